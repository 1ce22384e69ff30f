package rawio

import (
	"io"
	"net"
	"testing"
)

// BenchmarkReadWrite compares one small write and the read that takes it,
// on a loopback TCP connection, through net.TCPConn and through Conn.
func BenchmarkReadWrite(b *testing.B) {
	for _, bc := range []struct {
		name string
		wrap func(*net.TCPConn) io.ReadWriter
	}{
		{"TCPConn", func(c *net.TCPConn) io.ReadWriter { return c }},
		{"rawio", func(c *net.TCPConn) io.ReadWriter { return New(c) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a, z := tcpPair(b)
			w, r := bc.wrap(a), bc.wrap(z)
			msg := make([]byte, 64)
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(r, buf[:len(msg)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
