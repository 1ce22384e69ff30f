package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDataDirErrorSaysItOnce: a data dir that cannot be opened stops
// serve with one sentence naming the dir and the cause; it read "open
// store in X: open store X: …".
func TestDataDirErrorSaysItOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--listen", freeAddr(t), "--admin-listen", freeAddr(t), "--data-dir", file).CombinedOutput()
	want := "graygate: open store " + file + ": " + file + " is not a directory"
	if err == nil || !strings.Contains(string(out), want) || strings.Count(string(out), "open store") != 1 {
		t.Errorf("serve --data-dir FILE: %v\n%s\nwant it to stop saying %q, once", err, out, want)
	}
}
