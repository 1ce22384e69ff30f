//go:build !(linux || darwin || freebsd)

package proxy

// peekIdle cannot look at the socket here; a stale connection is found by
// the request that uses it.
func (u *upstreamTCP) peekIdle() error { return nil }
