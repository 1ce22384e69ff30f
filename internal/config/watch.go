package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls changed whenever the contents of the file at path change, at
// most once per debounce interval after the directory goes quiet. It
// watches the directory, not the file, because editors and config managers
// replace files by renaming a new one over the old, which a watch on the
// file itself would lose. An event makes it read the file again when it
// names the file, the file a symlink at path points to (in that file's
// directory, watched too), or a name starting with ".." (a Kubernetes
// ConfigMap volume swaps its ..data symlink and never names the file).
// Other files of the directory are left alone: an access log written next
// to the config would otherwise keep the debounce from ever ending.
// Watch returns when ctx ends.
//
// It calls changed only for a file that differs from the one it last saw
// (at first, the one there when Watch started), so that touching the file
// or writing another file in its directory reloads nothing. A file that is
// missing (an editor's rename in progress) or empty (truncated, its new
// contents not yet written) is taken for a save in progress: changed waits
// for the next event, so a half-saved file is never loaded. A watcher
// error (the kernel's event queue overflowed: events may have been lost)
// is taken for a change, and the watch goes on.
func Watch(ctx context.Context, path string, debounce time.Duration, changed func()) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	defer w.Close()
	dirs := []string{filepath.Dir(abs)}
	real, err := filepath.EvalSymlinks(abs)
	if err == nil && filepath.Dir(real) != dirs[0] {
		// A symlink to a file elsewhere: edits of the target happen in
		// its own directory.
		dirs = append(dirs, filepath.Dir(real))
	}
	relevant := func(ev fsnotify.Event) bool {
		n := filepath.Clean(ev.Name)
		return n == abs || (real != "" && n == real) || strings.HasPrefix(filepath.Base(n), "..")
	}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("watch %s: %w", d, err)
		}
	}
	last, _ := os.ReadFile(abs)
	var timer *time.Timer
	var fire <-chan time.Time
	arm := func() {
		if timer == nil {
			timer = time.NewTimer(debounce)
		} else {
			timer.Reset(debounce)
		}
		fire = timer.C
	}
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if relevant(ev) {
				arm()
			}
		case <-fire:
			fire = nil
			data, err := os.ReadFile(abs)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue // renamed away, its successor not there yet
			case err == nil && len(bytes.TrimSpace(data)) == 0:
				continue // truncated, not yet written
			case err == nil && bytes.Equal(data, last):
				continue // unchanged
			case err == nil:
				last = data
			}
			// A file that cannot be read is reloaded too, so that the
			// error shows in the reload's result.
			changed()
		case _, ok := <-w.Errors:
			if !ok {
				return nil
			}
			arm()
		}
	}
}
