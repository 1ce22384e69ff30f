//go:build unix

package testport

import (
	"fmt"
	"syscall"
	"testing"
)

// Refused returns a 127.0.0.1 address that refuses every connection until
// the test ends: a socket bound to it that never listens. A port that a
// test listened on and closed is only free, not dead: a server of a test
// running in parallel (or of another package's test binary) may be given
// it next and answer in its stead (CI saw a 404 where a refused
// connection's 502 was due). A bound port is never handed out again, to a
// listener or as a connection's local port, while the socket is open; and
// without SO_REUSEADDR on it, no one can bind it either.
func Refused(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("refused address: socket: %v", err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("refused address: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("refused address: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("refused address: bound to %T, want an IPv4 address", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in4.Port)
}
