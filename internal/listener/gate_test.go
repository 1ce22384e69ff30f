package listener

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

func TestMaxConnsFor(t *testing.T) {
	for _, tt := range []struct {
		nofile uint64
		want   int
	}{
		{0, 64}, {256, 64}, {300, 64}, {384, 64}, {1024, 384}, {65536, 32640}, {1 << 20, 524160}, {1 << 62, 1 << 30},
	} {
		if got := maxConnsFor(tt.nofile); got != tt.want {
			t.Errorf("maxConnsFor(%d) = %d, want %d", tt.nofile, got, tt.want)
		}
	}
}

// waitOpen waits until g counts n open connections.
func waitOpen(t *testing.T, g *Gate, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for g.Open() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the gate counts %d open connections, want %d", g.Open(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closedByPeer reports whether the server closed c without a word.
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestGateCountsEveryProtocol: on a listener split for h2c, the gate
// counts HTTP/2 connections (until ServeH2 returns) and HTTP/1.1 ones
// (until the Conn closes) against one cap; a connection beyond it is
// closed at once, and one that closes frees its place. A new Config
// applies at the next accept.
func TestGateCountsEveryProtocol(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[Config]
	cur.Store(&Config{MaxHeaderBytes: 4096, MaxConns: 2})
	g := &Gate{}
	ln := Split(raw, cur.Load, Protocols{H2C: true, Gate: g, ServeH2: func(c net.Conn) {
		io.Copy(io.Discard, c) // until the client closes
		c.Close()
	}})
	defer ln.Close()
	h1 := accepted(ln)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	a, b := dial(), dial()
	a.Write([]byte(Preface))
	b.Write([]byte(Preface))
	waitOpen(t, g, 2)
	c := dial()
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	if !closedByPeer(t, c) {
		t.Errorf("a third connection over a cap of 2 was not closed")
	}
	if g.Refused() != 1 || g.Open() != 2 {
		t.Errorf("refused %d, open %d; want 1 and 2", g.Refused(), g.Open())
	}

	a.Close() // an HTTP/2 connection ends: its place is free
	waitOpen(t, g, 1)
	d := dial()
	d.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	var served net.Conn
	select {
	case served = <-h1:
	case <-time.After(5 * time.Second):
		t.Fatal("an HTTP/1.1 connection under the cap was not accepted")
	}
	if _, ok := served.(*Conn); !ok {
		t.Fatalf("accepted a %T, want a *Conn", served)
	}
	waitOpen(t, g, 2)
	served.Close()
	served.Close() // a second close counts nothing
	waitOpen(t, g, 1)

	cur.Store(&Config{MaxHeaderBytes: 4096, MaxConns: 1})
	e := dial()
	e.Write([]byte(Preface))
	if !closedByPeer(t, e) {
		t.Errorf("a connection over the lowered cap of 1 was not closed")
	}
	b.Close()
	waitOpen(t, g, 0)
}
