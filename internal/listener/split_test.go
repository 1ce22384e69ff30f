package listener

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/certs/certstest"
	"github.com/graygate/graygate/internal/testserve"
)

// splitFixture serves the HTTP/1.1 side of a Split listener by answering
// "h1 <first line>" and its HTTP/2 side by answering "h2 <first 24
// bytes>" on every connection.
func splitFixture(t *testing.T, p Protocols) (string, net.Listener) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.ServeH2 = func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, len(Preface))
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		_, _ = io.WriteString(c, "h2 "+string(buf))
	}
	cfg := &Config{MaxHeaderBytes: 4096}
	ln := Split(raw, func() *Config { return cfg }, p)
	testserve.On(t, ln, func(c net.Conn) {
		if _, ok := c.(*Conn); !ok {
			_, _ = io.WriteString(c, "not guarded")
			return
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			var gerr *Error
			if errors.As(err, &gerr) {
				_, _ = io.WriteString(c, "refused "+gerr.Reason)
			}
			return
		}
		tls := "plain"
		if c.(*Conn).TLS() {
			tls = "tls"
		}
		_, _ = io.WriteString(c, "h1 "+tls+" "+strings.TrimSpace(line))
	})
	return raw.Addr().String(), ln
}

func roundTrip(t *testing.T, c net.Conn, send string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, send); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestSplitCleartext(t *testing.T) {
	addr, _ := splitFixture(t, Protocols{H2C: true, HandshakeTimeout: time.Second})
	tests := []struct {
		name, send, want string
	}{
		{"http/1.1", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "h1 plain GET / HTTP/1.1"},
		{"h2c preface, replayed", Preface + "\x00\x00\x00\x04", "h2 " + Preface},
		{"preface split over writes", Preface, "h2 " + Preface},
		{"a request that starts like the preface", "PRI / HTTP/1.1\r\nHost: a\r\n\r\n", "refused unknown method"},
		{"a bad request is still guarded", "GET / HTTP/1.1\nHost: a\r\n\r\n", "refused line not terminated by CRLF (bare LF)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tt.name == "preface split over writes" {
				_, _ = io.WriteString(c, tt.send[:5])
				time.Sleep(20 * time.Millisecond)
				tt.send = tt.send[5:]
			}
			if got := roundTrip(t, c, tt.send); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("silent client is closed", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeoutErr(err) {
			t.Errorf("read %d, %v; want the gateway to close the connection after the handshake timeout", n, err)
		}
	})
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestSplitTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	pair := ca.Server("s.pem", "s.key", "gw.test")
	cert := pair.TLSCertificate(t)
	addr, _ := splitFixture(t, Protocols{
		TLS:              &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		HandshakeTimeout: time.Second,
	})
	tests := []struct {
		name  string
		alpn  []string
		send  string
		want  string
		proto string
	}{
		{"alpn h2", []string{"h2", "http/1.1"}, Preface, "h2 " + Preface, "h2"},
		{"alpn http/1.1", []string{"http/1.1"}, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n", "h1 tls GET /x HTTP/1.1", "http/1.1"},
		{"no alpn", nil, "GET /y HTTP/1.1\r\nHost: a\r\n\r\n", "h1 tls GET /y HTTP/1.1", ""},
		{"guarded over tls", []string{"http/1.1"}, "GET / HTTP/2.0\r\nHost: a\r\n\r\n", "refused HTTP version not supported (HTTP/1.0 and HTTP/1.1 are)", "http/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "gw.test", RootCAs: ca.Pool, NextProtos: tt.alpn})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if p := c.ConnectionState().NegotiatedProtocol; p != tt.proto {
				t.Errorf("negotiated %q, want %q", p, tt.proto)
			}
			if got := roundTrip(t, c, tt.send); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("plaintext on the TLS listener", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := roundTrip(t, c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); strings.Contains(got, "h1") {
			t.Errorf("a plaintext request was served on the TLS listener: %q", got)
		}
	})
}

func TestSplitClose(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &Config{MaxHeaderBytes: 4096}
	ln := Split(raw, func() *Config { return cfg }, Protocols{H2C: true, ServeH2: func(c net.Conn) { c.Close() }})
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		done <- err
	}()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waits after Close")
	}
}

func TestSplitWithoutProtocolsIsWrap(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, ok := Split(raw, func() *Config { return &Config{} }, Protocols{}).(*wrapped); !ok {
		t.Error("Split without TLS or h2c is not Wrap")
	}
}

// TestSplitHandsOnAfterClose: a connection Split took from its listener
// before Close, still being looked at (here its first byte could begin an
// h2c preface), is handed on to Accept when its bytes come after Close, and
// only then does Accept report the end. In a handover (reuse_port) no
// other process can take such a connection, and closing it lost its
// request (TestReusePortHandover over TLS). An HTTP/2 connection counts
// until it is handed to ServeH2, not while it is served: Accept reports
// the end while one is still open.
func TestSplitHandsOnAfterClose(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var g Gate
	serving, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	cfg := &Config{MaxHeaderBytes: 4096}
	ln := Split(raw, func() *Config { return cfg }, Protocols{H2C: true, Gate: &g, ServeH2: func(c net.Conn) {
		defer c.Close()
		serving <- struct{}{}
		<-release
	}})
	type accepted struct {
		c   net.Conn
		err error
	}
	acc := make(chan accepted, 4)
	go func() {
		for {
			c, err := ln.Accept()
			acc <- accepted{c, err}
			if err != nil {
				return
			}
		}
	}()
	dial := func(send string) net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", raw.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
		return c
	}
	dial(Preface) // served by ServeH2 until the test ends
	select {
	case <-serving:
	case <-time.After(5 * time.Second):
		t.Fatal("the h2c connection never reached ServeH2")
	}
	late := dial("P") // h2c ("PRI") or HTTP/1.1, not known yet
	waitOpen(t, &g, 2)
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-acc:
		t.Fatalf("Accept returned (%v, %v) with a connection still being looked at", a.c, a.err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := io.WriteString(late, "OST / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-acc:
		if a.err != nil {
			t.Fatalf("Accept after Close: %v, want the connection taken before it", a.err)
		}
		line, err := bufio.NewReader(a.c).ReadString('\n')
		if err != nil || line != "POST / HTTP/1.1\r\n" {
			t.Errorf("the connection handed on reads %q, %v", line, err)
		}
		a.c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the connection taken before Close was not handed on")
	}
	select {
	case a := <-acc:
		if !errors.Is(a.err, net.ErrClosed) {
			t.Errorf("Accept after the last connection: %v, %v; want net.ErrClosed", a.c, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waits after Close, with only an HTTP/2 connection being served")
	}
}

// TestGateCloseSorting: a connection a TLS or h2c listener has taken but
// whose handshake (or first bytes) has not come is in no server's hands,
// so a shutdown that runs out of time could not close it, and it stayed
// open until its handshake timeout. Gate.CloseSorting closes it, and
// every such connection taken after, while one already handed on is
// left alone.
func TestGateCloseSorting(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	cert := ca.Server("s.pem", "s.key", "gw.test").TLSCertificate(t)
	for _, tt := range []struct {
		name string
		p    Protocols
	}{
		{"tls", Protocols{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}}},
		{"h2c", Protocols{H2C: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var g Gate
			p := tt.p
			p.Gate, p.HandshakeTimeout = &g, time.Minute
			p.ServeH2 = func(c net.Conn) { c.Close() }
			cfg := &Config{MaxHeaderBytes: 4096}
			ln := Split(raw, func() *Config { return cfg }, p)
			defer ln.Close()
			acc := accepted(ln)
			dial := func() net.Conn {
				t.Helper()
				c, err := net.DialTimeout("tcp", raw.Addr().String(), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			// One handed on to Accept before the cut, one silent.
			var served net.Conn
			if tt.p.TLS != nil {
				tc := tls.Client(dial(), &tls.Config{ServerName: "gw.test", RootCAs: ca.Pool})
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				served = tc
			} else {
				served = dial()
				if _, err := io.WriteString(served, "GET"); err != nil {
					t.Fatal(err)
				}
			}
			var handed net.Conn
			select {
			case handed = <-acc:
				defer handed.Close()
			case <-time.After(5 * time.Second):
				t.Fatal("the connection was not handed on")
			}
			silent := dial()
			waitOpen(t, &g, 2)

			g.CloseSorting()
			closedSoon := func(c net.Conn, what string) {
				t.Helper()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
					t.Errorf("%s: read %v, want the connection closed", what, err)
				}
			}
			closedSoon(silent, "a connection in its handshake at the cut")
			waitOpen(t, &g, 1)
			closedSoon(dial(), "a connection taken after the cut")
			waitOpen(t, &g, 1)

			// The one handed on still works both ways.
			if _, err := io.WriteString(served, "!"); err != nil {
				t.Fatal(err)
			}
			want := "GET!" // the bytes h2c looked at come again
			if tt.p.TLS != nil {
				want = "!"
			}
			_ = handed.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, len(want))
			if n, err := io.ReadFull(handed, b); err != nil || string(b) != want {
				t.Errorf("the connection handed on before the cut reads %q, %v; want %q", b[:n], err, want)
			}
		})
	}
}

// accepted hands on every connection ln's Accept returns, until Accept
// fails.
func accepted(ln net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch
}
