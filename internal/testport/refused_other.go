//go:build !unix

package testport

import (
	"net"
	"testing"
)

// Refused returns a 127.0.0.1 address nothing listens on: one a listener
// had and closed. Unlike on unix systems, another server may be given it
// later.
func Refused(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
