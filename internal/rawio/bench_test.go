package rawio

import (
	"io"
	"testing"
)

// BenchmarkReadWrite compares one small write and the read that takes it,
// on a loopback TCP connection, through net.TCPConn and through Conn. Run
// it on one CPU (taskset -c 1), as the pinned gateway runs: with a second
// CPU free the two measured alike on the project's machine (6.7 µs).
func BenchmarkReadWrite(b *testing.B) {
	for _, bc := range impls {
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
