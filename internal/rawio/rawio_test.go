package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection, closed when
// the test ends.
func tcpPair(tb testing.TB) (*net.TCPConn, *net.TCPConn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	z, err := ln.Accept()
	if err != nil {
		a.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close(); z.Close() })
	return a.(*net.TCPConn), z.(*net.TCPConn)
}

// impls are what the tests and benchmarks read and write through: the
// TCPConn itself, and a Conn over it. Every case runs on both, and must
// see the same thing.
var impls = []struct {
	name string
	wrap func(*net.TCPConn) io.ReadWriter
}{
	{"TCPConn", func(c *net.TCPConn) io.ReadWriter { return c }},
	{"rawio", func(c *net.TCPConn) io.ReadWriter { return New(c) }},
}

// TestNewWhereSupported checks that New gives a Conn exactly where raw
// socket calls are supported.
func TestNewWhereSupported(t *testing.T) {
	a, _ := tcpPair(t)
	if c := New(a); (c != nil) != supported {
		t.Fatalf("New = %v, supported = %v", c, supported)
	}
}

// TestSameAsTCPConn runs each shape of a read or a write on a real
// loopback connection through net.TCPConn and through Conn, and checks
// that both give the same bytes and the same kind of error.
func TestSameAsTCPConn(t *testing.T) {
	if !supported {
		t.Skip("raw socket calls are not used on this platform")
	}
	tests := []struct {
		name string
		run  func(t *testing.T, c io.ReadWriter, tc, peer *net.TCPConn)
	}{
		{"read what the peer wrote, then EOF", func(t *testing.T, c io.ReadWriter, _, peer *net.TCPConn) {
			if _, err := peer.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			peer.CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != "hello" {
				t.Fatalf("ReadAll = %q, %v; want \"hello\", nil", got, err)
			}
			if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("Read after EOF = %d, %v; want 0, io.EOF", n, err)
			}
		}},
		{"a read waits for bytes that come later", func(t *testing.T, c io.ReadWriter, _, peer *net.TCPConn) {
			go func() {
				time.Sleep(20 * time.Millisecond)
				peer.Write([]byte("late"))
			}()
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != "late" {
				t.Fatalf("Read = %q, %v; want \"late\", nil", buf[:n], err)
			}
		}},
		{"an empty read reads nothing", func(t *testing.T, c io.ReadWriter, _, _ *net.TCPConn) {
			if n, err := c.Read(nil); n != 0 || err != nil {
				t.Fatalf("Read(nil) = %d, %v; want 0, nil", n, err)
			}
		}},
		{"read deadline", func(t *testing.T, c io.ReadWriter, tc, _ *net.TCPConn) {
			tc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			n, err := c.Read(make([]byte, 8))
			wantOpError(t, "read", n, err, os.ErrDeadlineExceeded)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("Read error %v is not a net.Error timeout", err)
			}
		}},
		{"read on a closed connection", func(t *testing.T, c io.ReadWriter, tc, _ *net.TCPConn) {
			tc.Close()
			n, err := c.Read(make([]byte, 8))
			wantOpError(t, "read", n, err, net.ErrClosed)
		}},
		{"read after the peer reset", func(t *testing.T, c io.ReadWriter, _, peer *net.TCPConn) {
			peer.SetLinger(0)
			peer.Close()
			time.Sleep(20 * time.Millisecond)
			n, err := c.Read(make([]byte, 8))
			wantOpError(t, "read", n, err, syscall.ECONNRESET)
		}},
		{"a write larger than the socket buffers waits and writes it all", func(t *testing.T, c io.ReadWriter, tc, peer *net.TCPConn) {
			// More than a loopback socket's send and receive buffers
			// hold, so the write meets EAGAIN and waits.
			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
			got := make(chan []byte)
			go func() {
				b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
				got <- b
			}()
			n, err := c.Write(big)
			if n != len(big) || err != nil {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(big))
			}
			if b := <-got; !bytes.Equal(b, big) {
				t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(big))
			}
		}},
		{"write deadline while the peer does not read", func(t *testing.T, c io.ReadWriter, tc, _ *net.TCPConn) {
			big := make([]byte, 64<<20)
			tc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := c.Write(big)
			if n == len(big) {
				t.Fatalf("Write wrote all %d bytes to a peer that reads nothing", n)
			}
			wantOpError(t, "write", 0, err, os.ErrDeadlineExceeded)
		}},
		{"write after the peer reset", func(t *testing.T, c io.ReadWriter, _, peer *net.TCPConn) {
			peer.SetLinger(0)
			peer.Close()
			time.Sleep(20 * time.Millisecond)
			var err error
			for i := 0; i < 3 && err == nil; i++ {
				_, err = c.Write([]byte("x"))
			}
			var se *os.SyscallError
			if !errors.As(err, &se) || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
				t.Fatalf("Write error = %v; want a *os.SyscallError for ECONNRESET or EPIPE", err)
			}
			wantOpError(t, "write", 0, err, se.Err)
		}},
		{"an empty write writes nothing", func(t *testing.T, c io.ReadWriter, _, _ *net.TCPConn) {
			if n, err := c.Write(nil); n != 0 || err != nil {
				t.Fatalf("Write(nil) = %d, %v; want 0, nil", n, err)
			}
		}},
		{"one goroutine reads while another writes", func(t *testing.T, c io.ReadWriter, _, peer *net.TCPConn) {
			const rounds = 200
			go io.Copy(peer, peer) // echo
			done := make(chan error, 1)
			go func() {
				msg := []byte("ping-pong-")
				for range rounds {
					if _, err := c.Write(msg); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			got, err := io.ReadAll(io.LimitReader(c, rounds*10))
			if err != nil || len(got) != rounds*10 || !bytes.Equal(got[:10], []byte("ping-pong-")) {
				t.Fatalf("read back %d bytes, %v; want %d", len(got), err, rounds*10)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		for _, im := range impls {
			t.Run(tt.name+"/"+im.name, func(t *testing.T) {
				tc, peer := tcpPair(t)
				tt.run(t, im.wrap(tc), tc, peer)
			})
		}
	}
}

// wantOpError checks that n is 0 and err is a *net.OpError for op that
// wraps target, with the connection's addresses, as net.Conn returns.
func wantOpError(t *testing.T, op string, n int, err, target error) {
	t.Helper()
	var oe *net.OpError
	switch {
	case n != 0:
		t.Fatalf("n = %d with error %v; want 0", n, err)
	case !errors.As(err, &oe):
		t.Fatalf("error %v (%T) is not a *net.OpError", err, err)
	case oe.Op != op || oe.Net != "tcp" || oe.Source == nil || oe.Addr == nil:
		t.Fatalf("OpError{Op: %q, Net: %q, Source: %v, Addr: %v}; want op %q, net tcp and both addresses", oe.Op, oe.Net, oe.Source, oe.Addr, op)
	case !errors.Is(err, target):
		t.Fatalf("error %v does not wrap %v", err, target)
	}
}

// TestWriteToClosedPeerRaisesNoSIGPIPE writes through a Conn to a peer
// that reset the connection, in a program that asks for SIGPIPE (as one
// embedding the gateway may): the write fails with a *net.OpError, and no
// SIGPIPE is raised, so none reaches the program or the runtime's handler.
// A Conn that wrote with write(2), or without MSG_NOSIGNAL, raises one for
// the first write after the reset.
func TestWriteToClosedPeerRaisesNoSIGPIPE(t *testing.T) {
	if !supported {
		t.Skip("raw socket calls are not supported here")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGPIPE)
	defer signal.Stop(sig)
	a, z := tcpPair(t)
	if err := z.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	z.Close() // a reset: a's next writes fail at once
	c := New(a)
	if err := a.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("x"))
		if err == nil {
			time.Sleep(10 * time.Millisecond) // the reset is on its way
		}
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("write to a reset peer: %v; want a *net.OpError for write", err)
	}
	// Once more, now that the reset has surely arrived: EPIPE.
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("second write after the reset: %v; want EPIPE", err)
	}
	select {
	case s := <-sig:
		t.Fatalf("the write raised %v", s)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestOnWriteWait: the function runs only in a Write that finds the send
// buffer full, once however often that Write waits, and its error ends
// the Write.
func TestOnWriteWait(t *testing.T) {
	if !supported {
		t.Skip("raw socket calls are not supported here")
	}
	a, z := tcpPair(t)
	c := New(a)
	calls := 0
	c.OnWriteWait(func() error { calls++; return nil })
	if _, err := c.Write([]byte("small")); err != nil || calls != 0 || c.WriteWaited() {
		t.Fatalf("a write that did not wait: err %v, %d calls, waited %v", err, calls, c.WriteWaited())
	}
	big := make([]byte, 32<<20)
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = io.Copy(io.Discard, z)
	}()
	if _, err := c.Write(big); err != nil || calls != 1 || !c.WriteWaited() {
		t.Fatalf("a write that waited: err %v, %d calls, waited %v; want 1 call", err, calls, c.WriteWaited())
	}
	b, _ := tcpPair(t) // its peer never reads
	c = New(b)
	stop := errors.New("stop")
	c.OnWriteWait(func() error { return stop })
	if _, err := c.Write(big); !errors.Is(err, stop) {
		t.Fatalf("a write whose wait function failed: %v; want its error", err)
	}
}
