//go:build unix

package listener

import "syscall"

// DefaultMaxConns is the client connection cap when the config sets none.
// Of the file descriptors the process may open (RLIMIT_NOFILE, which the
// Go runtime raises to its hard limit at start), 256 are kept for the
// admin API, the store, logs and listeners, and the cap is half of the
// rest, at least 64. The other half is for the upstream connections the
// clients' requests use.
func DefaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur >= 1<<62 { // unlimited (RLIM_INFINITY)
		return 0
	}
	return maxConnsFor(rl.Cur)
}
