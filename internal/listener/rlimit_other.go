//go:build !unix

package listener

// DefaultMaxConns is 0 (no cap) where the file descriptor limit cannot be
// read.
func DefaultMaxConns() int { return 0 }
