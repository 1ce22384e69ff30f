//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// reopenSignals are the signals that reopen the access log file.
func reopenSignals() []os.Signal { return []os.Signal{syscall.SIGUSR1} }

// ignoreBrokenPipes makes a write to a pipe whose reader is gone fail
// with EPIPE instead of killing the process. Go kills a program that
// writes to a broken pipe on its standard output or error unless SIGPIPE
// is handled, and the access log goes to standard output by default,
// often a pipe (a container runtime's log shim, journald, `| tee`): when
// its reader died, the next request's log line stopped the gateway
// without a word. nginx ignores SIGPIPE too. The lines that cannot be
// written are dropped and counted (graygate_access_log_dropped_total).
func ignoreBrokenPipes() { signal.Ignore(syscall.SIGPIPE) }
