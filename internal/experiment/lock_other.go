//go:build !(linux || darwin || dragonfly || freebsd || illumos || netbsd || openbsd)

package experiment

import (
	"fmt"
	"os"
	"runtime"
)

// lockDir fails: without flock the store cannot keep a second process out,
// and two writers would corrupt the journal. Use experiments.store: redis://.
func lockDir(string) (*os.File, error) {
	return nil, fmt.Errorf("the data-dir experiment store needs file locking, which %s lacks; use experiments.store: redis://", runtime.GOOS)
}
