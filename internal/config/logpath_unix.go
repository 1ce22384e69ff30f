//go:build unix

package config

import "golang.org/x/sys/unix"

// writable asks the kernel whether this process may write path without
// opening it: opening would block on a FIFO that no one reads yet.
func writable(path string) error { return unix.Access(path, unix.W_OK) }
