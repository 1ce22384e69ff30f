package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockDir takes the directory lock and writes this process's id into the
// lock file, so that the error a second opener gets can name the holder.
// The lock lasts until the returned file is closed.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if busy, err := flockExclusive(f); err != nil {
		holder := "unknown"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = strings.TrimSpace(string(b))
		}
		f.Close()
		if busy {
			return nil, fmt.Errorf("lock %s: held by pid %s: %w", path, holder, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is only informational, so it is not fsynced.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
