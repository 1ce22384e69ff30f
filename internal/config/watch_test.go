package config

import (
	"context"
	"fmt"
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

// wantHit waits for the change watchHits reports after what, and fails
// unless changed saw the file holding body.
func wantHit(t *testing.T, hits <-chan string, what, body string) {
	t.Helper()
	select {
	case got := <-hits:
		if got != body {
			t.Fatalf("%s: changed saw %q, want %q", what, got, body)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was never seen", what)
	}
}

// watchHits starts Watch on path and returns a channel that receives the
// file's contents at every call of changed. It returns once the watch is
// seen to work: path is rewritten until a call comes, and that call is
// drained.
func watchHits(t *testing.T, path string, debounce time.Duration) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hits := make(chan string, 100)
	go Watch(ctx, path, debounce, func() {
		b, _ := os.ReadFile(path)
		hits <- string(b)
	})
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		if err := os.WriteFile(path, []byte(fmt.Sprintf("listen: ':%d'\n", 1000+i)), 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case <-hits:
			for len(hits) > 0 {
				<-hits
			}
			return hits
		case <-time.After(20 * debounce):
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch never saw a write")
		}
	}
}

// TestWatchWaitsForTheSecondWrite: a config saved as a truncation, a
// pause, then the new contents (a config manager, "cat > file" from a
// slow pipe) is loaded once, whole; the empty file between is never
// loaded, as it would be a config with no upstreams, routes or tokens.
func TestWatchWaitsForTheSecondWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "graygate.yaml")
	const debounce = 20 * time.Millisecond
	hits := watchHits(t, path, debounce)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The writer pauses between its two writes well past the debounce.
	time.Sleep(10 * debounce)
	if _, err := f.WriteString("listen: ':2'\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	select {
	case got := <-hits:
		if got != "listen: ':2'\n" {
			t.Fatalf("changed was called while the file held %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the completed write was never seen")
	}
}

// TestWatchSymlinkSwap: a Kubernetes ConfigMap volume updates by swapping
// the ..data symlink; the file's own name never appears in an event.
// Writing or touching another file of the directory calls nothing.
func TestWatchSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, v, "graygate.yaml"), []byte("listen: ':"+v[1:]+"'\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "graygate.yaml")
	if err := os.Symlink(filepath.Join("..data", "graygate.yaml"), path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hits := make(chan string, 10)
	go Watch(ctx, path, 20*time.Millisecond, func() {
		b, _ := os.ReadFile(path)
		hits <- string(b)
	})
	// The swap is retried, to v2 and back, until one is seen: the watch
	// may not be up yet.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		v := []string{"v2", "v1"}[i%2]
		// What kubelet does: a new symlink renamed over ..data.
		tmp := filepath.Join(dir, "..data_tmp")
		os.Remove(tmp)
		if err := os.Symlink(v, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-hits:
			if want := "listen: ':" + v[1:] + "'\n"; got != want {
				t.Fatalf("changed saw %q, want %q", got, want)
			}
			return
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Fatal("the symlink swap was never seen")
		}
	}
}

// TestWatchIgnoresUnchanged: touching the file, or rewriting it with the
// same contents, reloads nothing; a real change after that is seen.
func TestWatchIgnoresUnchanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "graygate.yaml")
	const debounce = 20 * time.Millisecond
	hits := watchHits(t, path, debounce)
	same, _ := os.ReadFile(path)
	if err := os.WriteFile(path, same, 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	os.Chtimes(path, now, now)
	// Well past the debounce, so that the real change comes on its own.
	time.Sleep(10 * debounce)
	if err := os.WriteFile(path, []byte("listen: ':7'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-hits:
		if got != "listen: ':7'\n" {
			t.Fatalf("changed was called for an unchanged file (%q)", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the change was never seen")
	}
}

// TestWatchBusyNeighbour: a file written all the time next to the config
// (an access log in the same directory) neither reloads anything nor
// keeps the debounce from ending: a change of the config is still seen.
func TestWatchBusyNeighbour(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "graygate.yaml")
	const debounce = 20 * time.Millisecond
	hits := watchHits(t, path, debounce)
	log, err := os.Create(filepath.Join(dir, "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(debounce / 4):
				fmt.Fprintln(log, `{"status":200}`)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	if err := os.WriteFile(path, []byte("listen: ':8'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-hits:
		if got != "listen: ':8'\n" {
			t.Fatalf("changed saw %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a config change next to a busy log was never seen")
	}
}

// TestWatchFollowsLinksAsTheyMove: the watch moves with the links. A
// link re-pointed to a file in another directory is followed there, so
// an edit of the new file in place reloads; and an operator's own link to
// a file in a ConfigMap volume sees the volume's ..data swap, which
// happens in a directory the link itself is not in.
func TestWatchFollowsLinksAsTheyMove(t *testing.T) {
	const debounce = 20 * time.Millisecond
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// swap renames a new link to target over link, as kubelet and
	// certbot-style tools do.
	swap := func(target, link string) {
		t.Helper()
		tmp := link + ".tmp"
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, link); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("re-pointed link", func(t *testing.T) {
		dir := t.TempDir()
		write(filepath.Join(dir, "a", "graygate.yaml"), "listen: ':1'\n")
		write(filepath.Join(dir, "b", "graygate.yaml"), "listen: ':2'\n")
		path := filepath.Join(dir, "etc", "graygate.yaml")
		write(filepath.Join(dir, "etc", "README"), "")
		if err := os.Symlink(filepath.Join(dir, "a", "graygate.yaml"), path); err != nil {
			t.Fatal(err)
		}
		hits := watchHits(t, path, debounce)
		swap(filepath.Join(dir, "b", "graygate.yaml"), path)
		wantHit(t, hits, "the re-pointed link", "listen: ':2'\n")
		write(filepath.Join(dir, "b", "graygate.yaml"), "listen: ':3'\n")
		wantHit(t, hits, "an edit of the new target in place", "listen: ':3'\n")
	})
	t.Run("own link into a volume", func(t *testing.T) {
		dir := t.TempDir()
		vol := filepath.Join(dir, "vol")
		write(filepath.Join(vol, "..ts1", "graygate.yaml"), "listen: ':1'\n")
		write(filepath.Join(vol, "..ts2", "graygate.yaml"), "listen: ':2'\n")
		if err := os.Symlink("..ts1", filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", "graygate.yaml"), filepath.Join(vol, "graygate.yaml")); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "etc", "graygate.yaml")
		write(filepath.Join(dir, "etc", "README"), "")
		if err := os.Symlink(filepath.Join(vol, "graygate.yaml"), path); err != nil {
			t.Fatal(err)
		}
		hits := watchHits(t, path, debounce)
		swap("..ts2", filepath.Join(vol, "..data"))
		wantHit(t, hits, "the volume's ..data swap", "listen: ':2'\n")
		if err := os.RemoveAll(filepath.Join(vol, "..ts1")); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(vol, "..ts3", "graygate.yaml"), "listen: ':3'\n")
		swap("..ts3", filepath.Join(vol, "..data"))
		wantHit(t, hits, "a second swap", "listen: ':3'\n")
	})
}

// TestWatchSinceSeesEarlierChange: a change made after the file was loaded
// but before the watch began raises no event the watch sees; WatchSince
// reloads it all the same, and reloads nothing when the file is what was
// loaded.
func TestWatchSinceSeesEarlierChange(t *testing.T) {
	tests := []struct {
		name   string
		loaded string
		want   bool
	}{
		{"changed before the watch", "listen: ':1'\n", true},
		{"unchanged", "listen: ':2'\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "graygate.yaml")
			if err := os.WriteFile(path, []byte("listen: ':2'\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hits := make(chan struct{}, 10)
			go WatchSince(ctx, path, []byte(tt.loaded), 20*time.Millisecond, func() { hits <- struct{}{} })
			wait := 300 * time.Millisecond
			if tt.want {
				wait = 5 * time.Second
			}
			select {
			case <-hits:
				if !tt.want {
					t.Error("a file unchanged since it was loaded was reloaded")
				}
			case <-time.After(wait):
				if tt.want {
					t.Error("a change made before the watch began was never reloaded")
				}
			}
		})
	}
}

// TestWatchSeesDirectoryAboveReplaced: a real directory above the file's
// own, replaced by a rename (mv conf conf.old; mv conf.new conf), is a
// change of the file; later edits of the file in the new directory are
// changes too.
func TestWatchSeesDirectoryAboveReplaced(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "conf", "gw", "graygate.yaml")
	for _, d := range []string{filepath.Dir(path), filepath.Join(root, "conf.new", "gw")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "conf.new", "gw", "graygate.yaml"), []byte("listen: ':2'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const debounce = 20 * time.Millisecond
	hits := watchHits(t, path, debounce)
	if err := os.Rename(filepath.Join(root, "conf"), filepath.Join(root, "conf.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "conf.new"), filepath.Join(root, "conf")); err != nil {
		t.Fatal(err)
	}
	wantHit(t, hits, "the directory's replacement", "listen: ':2'\n")
	if err := os.WriteFile(path, []byte("listen: ':3'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantHit(t, hits, "a write in the new directory", "listen: ':3'\n")
}
