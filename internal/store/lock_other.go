//go:build !(linux || darwin || dragonfly || freebsd || illumos || netbsd || openbsd)

package store

import (
	"fmt"
	"os"
	"runtime"
)

// flockExclusive fails: without flock the store cannot keep a second
// process out, and two writers would corrupt the journal.
func flockExclusive(*os.File) (busy bool, err error) {
	return false, fmt.Errorf("file locking is not supported on %s", runtime.GOOS)
}
