//go:build unix

package main

import (
	"os"
	"syscall"
)

// reopenSignals are the signals that reopen the access log file.
func reopenSignals() []os.Signal { return []os.Signal{syscall.SIGUSR1} }
