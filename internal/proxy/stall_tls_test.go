package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// TestClientStallsOverTLS stalls the client side of TestStallsAreBounded
// over HTTP/1.1 on the TLS listener, where the gateway reads and writes
// through Go's tls.Conn: a client that stops sending its body (after a
// whole record, and within one, where tls.Conn waits for the rest of the
// record before it returns a byte), one whose head never ends (within a
// record, or dribbled a byte a record), one that stops reading the
// answer, and a keep-alive connection with no next request. Each timeout fires, closes
// the connection, and gives back the slot and the goroutines.
func TestClientStallsOverTLS(t *testing.T) {
	gw := newGatewayTLS(t)
	prot := listener.Protocols{TLS: gw.conf}
	opts := Options{
		UpstreamReadTimeout: 5 * time.Second, UpstreamWriteTimeout: 5 * time.Second,
		ReadTimeout: shortTimeout, WriteTimeout: shortTimeout, IdleTimeout: shortTimeout,
		ResponseHeaderTimeout: 5 * time.Second, ReadHeaderTimeout: shortTimeout,
	}
	client := &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test", NextProtos: []string{"http/1.1"}}
	reading := func(t *testing.T) string {
		return stallBackend(t, func(c net.Conn, br *bufio.Reader) {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
		})
	}

	for _, within := range []bool{false, true} {
		t.Run(fmt.Sprintf("client_read_timeout: client stops sending its body, within a record %v", within), func(t *testing.T) {
			r := newStallRigOn(t, poolOf("gray", reading(t)), opts, prot)
			c, rc := dialTLSRecorded(t, r.addr, net.Dialer{}, client)
			fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
			_, _ = c.Write(bytes.Repeat([]byte("y"), 20<<10))
			if within {
				rc.stallInRecord(c, 1000)
			}
			// ...and the rest never comes.
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
				t.Errorf("status %d close %v, want 408 and Connection: close", resp.StatusCode, resp.Close)
			}
			r.settle(t, "client_read_timeout")
			if f := r.failures(); f != 0 {
				t.Errorf("breaker failures = %d: a slow client is not the upstream's failure", f)
			}
		})
	}

	for _, dribble := range []bool{false, true} {
		t.Run(fmt.Sprintf("read_header_timeout: a head that never ends, dribbled in one-byte records %v", dribble), func(t *testing.T) {
			r := newStallRigOn(t, poolOf("gray", reading(t)), opts, prot)
			c, rc := dialTLSRecorded(t, r.addr, net.Dialer{}, client)
			const head = "GET /partial HTTP/1.1\r\nHost: a\r\nX-Pad: "
			if dribble {
				// A byte a record every 20 ms: each read gets a byte,
				// and the header timeout bounds the whole head.
				go func() {
					for i := 0; ; i++ {
						if _, err := c.Write([]byte{head[i%len(head)]}); err != nil {
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				}()
			} else {
				// Part of the head's record, and then nothing.
				rc.holdWrites()
				_, _ = io.WriteString(c, head)
				_, _ = rc.Conn.Write(rc.held()[:20])
			}
			start := time.Now()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
				t.Errorf("status %d close %v, want 408 and Connection: close", resp.StatusCode, resp.Close)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("answered after %v, want about %v", d, shortTimeout)
			}
			r.settle(t, "read_header_timeout")
		})
	}

	t.Run("client_write_timeout: client stops reading the response", func(t *testing.T) {
		r := newStallRigOn(t, poolOf("gray", endlessBackend(t)), opts, prot)
		c, rc := dialTLSRecorded(t, r.addr, net.Dialer{Control: smallReadBuffer}, client)
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
		r.stoppedReading(t, rc.Conn)
	})

	t.Run("client_idle_timeout: keep-alive connection with no next request", func(t *testing.T) {
		backend, _ := echoBackend(t, "gray")
		r := newStallRigOn(t, poolOf("gray", addrOf(backend)), opts, prot)
		c, _ := dialTLSRecorded(t, r.addr, net.Dialer{}, client)
		closedWhenIdle(t, c)
		r.settle(t, "")
	})
}

// TestUpstreamStallsOverTLS stalls the upstream side of
// TestStallsAreBounded toward an https pool, where the gateway reads and
// writes the upstream connection through Go's tls.Conn: an upstream that
// stops mid-body after a whole record and within one (tls.Conn waits for
// the rest of the record before it returns a byte), and one that stops
// reading an upload. Each timeout fires, the stalled connection is
// closed, the breaker counts a failure, and the slot and the goroutines
// come back.
func TestUpstreamStallsOverTLS(t *testing.T) {
	upTLS := newGatewayTLS(t) // a certificate for 127.0.0.1, and its CA
	opts := Options{
		UpstreamReadTimeout: shortTimeout, UpstreamWriteTimeout: shortTimeout,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
		ResponseHeaderTimeout: 5 * time.Second,
		UpstreamTLS:           &tls.Config{RootCAs: upTLS.ca.Pool},
	}
	// httpsBackend serves each connection over TLS with serve, giving it
	// the TCP connection's recordConn too, to hold back what it writes.
	httpsBackend := func(t *testing.T, serve func(c *tls.Conn, rc *recordConn, br *bufio.Reader)) *upstream.Pool {
		ln := listenLoopback(t)
		testserve.On(t, ln, func(raw net.Conn) {
			rc := &recordConn{Conn: raw}
			c := tls.Server(rc, upTLS.conf)
			serve(c, rc, bufio.NewReader(c))
		})
		return upstream.NewPool("gray", []*upstream.Instance{{Addr: ln.Addr().String(), TLS: true}})
	}

	for _, within := range []bool{false, true} {
		t.Run(fmt.Sprintf("read_timeout: upstream stops mid-body, within a record %v", within), func(t *testing.T) {
			closed := make(chan struct{})
			pool := httpsBackend(t, func(c *tls.Conn, rc *recordConn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 30000))
				if within {
					rc.stallInRecord(c, 1000)
				}
				_, _ = io.Copy(io.Discard, rc.Conn) // until the gateway gives up on us
				close(closed)
			})
			body, err := newStallRigFor(t, pool, opts).stoppedMidBody(t, closed)
			if n := len(body); err == nil || n >= 100000 {
				t.Errorf("client read %d bytes, %v; want the body cut off", n, err)
			}
		})
	}

	// Three times: whether the stalled connection's send buffer has room
	// left for a close_notify alert (dropCloseNotify) varies from run to
	// run.
	for i := range 3 {
		t.Run(fmt.Sprintf("write_timeout: upstream stops reading an upload, %d", i+1), func(t *testing.T) {
			answered, closed := make(chan struct{}), make(chan struct{})
			pool := httpsBackend(t, func(c *tls.Conn, rc *recordConn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				// Read none of the body until the client has its answer;
				// then the gateway must have closed the connection.
				<-answered
				_, _ = io.Copy(io.Discard, rc.Conn)
				close(closed)
			})
			newStallRigFor(t, pool, opts).stoppedTakingUpload(t, answered, closed)
		})
	}
}

// TestDropCloseNotify: closing a TLS connection to a peer that has
// stopped reading, once nothing more fits in the buffers under it, takes
// no time after dropCloseNotify. tls.Conn.Close alone writes a
// close_notify alert under a deadline of five seconds, and that write
// waits the five seconds for room that never comes.
func TestDropCloseNotify(t *testing.T) {
	gw := newGatewayTLS(t)
	ln := listenLoopback(t)
	peer := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(peer)
			return
		}
		s := tls.Server(c, gw.conf)
		_ = s.SetDeadline(time.Now().Add(5 * time.Second))
		_ = s.Handshake()
		peer <- s // and then it reads nothing
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c := tls.Client(raw, &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test"})
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	s, ok := <-peer
	if !ok {
		t.Fatal("no connection accepted")
	}
	defer s.Close()
	// Fill the buffers under the TLS connection (the bytes need not be
	// records: the peer reads none of them) until a byte no longer fits,
	// five times in a row; and once more after a pause, as the peer's
	// kernel may still have been taking what was in flight.
	chunk := make([]byte, 64<<10)
	for range 2 {
		for full := 0; full < 5; {
			b := chunk
			if full > 0 {
				b = chunk[:1]
			}
			_ = raw.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
			if _, err := raw.Write(b); err != nil {
				full++
			} else {
				full = 0
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = c.SetDeadline(time.Time{})
	start := time.Now()
	dropCloseNotify(c)
	_ = c.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("closing took %v, want no wait", d)
	}
}
