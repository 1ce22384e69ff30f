//go:build linux || darwin || dragonfly || freebsd || illumos || netbsd || openbsd

package store

import (
	"errors"
	"os"
	"syscall"
)

// flockExclusive takes a non-blocking exclusive flock on f. busy reports
// that another open file description holds it. The kernel drops the lock
// when the process dies, so a crash never leaves the directory locked.
func flockExclusive(f *os.File) (busy bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, err
	}
	return false, err
}
