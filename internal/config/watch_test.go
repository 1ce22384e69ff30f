package config

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchSeesRenames covers editors that write a new file and rename it
// over the old one, as well as plain writes.
func TestWatchSeesRenames(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "graygate.yaml")
	if err := os.WriteFile(path, []byte("listen: ':1'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hits := make(chan struct{}, 10)
	go Watch(ctx, path, 20*time.Millisecond, func() { hits <- struct{}{} })
	time.Sleep(50 * time.Millisecond) // let the watch start
	wait := func(what string) {
		t.Helper()
		select {
		case <-hits:
		case <-time.After(3 * time.Second):
			t.Fatalf("no change seen after %s", what)
		}
	}
	if err := os.WriteFile(path, []byte("listen: ':2'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wait("a write")
	tmp := filepath.Join(dir, ".graygate.yaml.swp")
	os.WriteFile(tmp, []byte("listen: ':3'\n"), 0o644)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	wait("a rename over the file")
	os.WriteFile(filepath.Join(dir, "other.yaml"), []byte("x"), 0o644)
	select {
	case <-hits:
		t.Fatal("a change to another file triggered a reload")
	case <-time.After(200 * time.Millisecond):
	}
}
