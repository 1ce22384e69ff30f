package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
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
	dial := func(t *testing.T, addr string, d net.Dialer) (*tls.Conn, *recordConn) {
		t.Helper()
		raw, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
		rc := &recordConn{Conn: raw}
		c := tls.Client(rc, &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test", NextProtos: []string{"http/1.1"}})
		if err := c.Handshake(); err != nil {
			t.Fatal(err)
		}
		return c, rc
	}
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
			c, rc := dial(t, r.addr, net.Dialer{})
			fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
			_, _ = c.Write(bytes.Repeat([]byte("y"), 20<<10))
			if within {
				// The next record's first bytes, and then nothing.
				rc.holdWrites()
				_, _ = c.Write(bytes.Repeat([]byte("y"), 1000))
				_, _ = rc.Conn.Write(rc.held()[:500])
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
			c, rc := dial(t, r.addr, net.Dialer{})
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
		c, rc := dial(t, r.addr, net.Dialer{Control: smallReadBuffer})
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
		r.stoppedReading(t, rc.Conn)
	})

	t.Run("client_idle_timeout: keep-alive connection with no next request", func(t *testing.T) {
		backend, _ := echoBackend(t, "gray")
		r := newStallRigOn(t, poolOf("gray", addrOf(backend)), opts, prot)
		c, _ := dial(t, r.addr, net.Dialer{})
		closedWhenIdle(t, c)
		r.settle(t, "")
	})
}
