package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/graygate/graygate/internal/fswatch"
)

// Watch calls changed whenever the contents of the file at path change, at
// most once per debounce interval after the directory goes quiet. It
// watches directories, not the file, because editors and config managers
// replace files by renaming a new one over the old, which a watch on the
// file itself would lose. It follows symbolic links (see fswatch.Follow):
// an event makes it read the file again when it names the file, a link on
// the way to it (a Kubernetes ConfigMap volume swaps its ..data link and
// never names the file), or the file a link leads to, in whatever
// directory, or a directory above any of them (replaced by a rename, mv
// conf.new conf); the links are resolved again and the watches placed
// again after every event, so the watch moves with them. Other files of
// the directories are left alone: an access log written next to the config
// would otherwise keep the debounce from ever ending. Watch returns when
// ctx ends.
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
	return watch(ctx, path, nil, debounce, changed)
}

// WatchSince is Watch for a file whose contents were loaded, as loaded,
// before the watch began: a change made in between raised no event the
// watch could see, so once its watches are in place it reads the file,
// and calls changed (after debounce, as for an event) if it differs from
// loaded. Read the file before loading it, so that loaded is never newer
// than what serves: a change made between the two reads then costs one
// reload of the same file, never a lost one.
func WatchSince(ctx context.Context, path string, loaded []byte, debounce time.Duration, changed func()) error {
	return watch(ctx, path, &loaded, debounce, changed)
}

// watch is Watch, comparing with *loaded (if set) instead of the file
// there when it starts.
func watch(ctx context.Context, path string, loaded *[]byte, debounce time.Duration, changed func()) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	defer w.Close()
	relevant, err := fswatch.Follow(w, []string{abs})
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
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
	if loaded != nil && !bytes.Equal(last, *loaded) {
		// Changed before the watches existed: judged at fire as an
		// event's change is (a save in progress waits for its event).
		last = *loaded
		arm()
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
			if fswatch.Relevant(relevant, ev) {
				arm()
			}
		case <-fire:
			fire = nil
			// Where the links lead now, before the file is read. A
			// directory that cannot be watched now is tried again at the
			// next event.
			relevant, _ = fswatch.Follow(w, []string{abs})
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
