//go:build !unix

package main

import "os"

// reopenSignals is empty where there is no SIGUSR1: rotate by restarting.
func reopenSignals() []os.Signal { return nil }

// ignoreBrokenPipes does nothing where there is no SIGPIPE.
func ignoreBrokenPipes() {}
