//go:build linux || darwin || dragonfly || freebsd || illumos || netbsd || openbsd

package experiment

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes a non-blocking exclusive flock on path, so that two
// processes never write one experiment store. The kernel drops the lock
// when the process dies, so a kill -9 never leaves it held.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: another graygate process holds this experiment store", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
