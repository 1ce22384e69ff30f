package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
)

// TestPipeliningShapesOverTLS drives TestPipeliningShapes's requests over
// HTTP/1.1 on the TLS listener, where what the gateway reads is not what
// came on the socket: Go's tls.Conn returns one record's bytes a read and
// keeps the records after it, already off the socket, in a buffer of its
// own. So a request can wait in that buffer while the socket has nothing
// to read, and a close_notify that follows the last request's record
// comes back with its bytes as (n, io.EOF).
//
// The client's records are the requests together, one a request, or
// pieces of 1 to 40 bytes; their bytes then go out in one write, or cut at
// random into TCP writes of 1 to 60 bytes (so records span writes and
// writes carry several records), with gaps of up to 3 ms. A third of the
// connections end with a close_notify, half of those with a FIN after it.
// Every request must be answered, in order, and after a close_notify the
// gateway must answer and then close.
func TestPipeliningShapesOverTLS(t *testing.T) {
	gw := newGatewayTLS(t)
	backend, _ := echoBackend(t, "stable")
	_, addr := startProxyWith(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))}, listener.Protocols{TLS: gw.conf})
	client := &tls.Config{RootCAs: gw.ca.Pool, ServerName: "gw.test", NextProtos: []string{"http/1.1"}}
	rng := rand.New(rand.NewPCG(13, 14))
	for it := range shortened(500) {
		reqs := pipelineRequests(rng, it)
		recs := splitRequests(rng, reqs)
		cut := rng.IntN(3) > 0
		var gap time.Duration
		if rng.IntN(2) == 0 {
			gap = time.Duration(rng.IntN(3000)) * time.Microsecond
		}
		closeNotify, fin := rng.IntN(3) == 0, rng.IntN(2) == 0
		if err := pipelinedTLS(t, addr, client, reqs, recs, cut, gap, closeNotify, closeNotify && fin, rng); err != nil {
			t.Fatalf("iteration %d (%d requests in %d records, cut %v, gap %v, close_notify %v, FIN %v): %v",
				it, len(reqs), len(recs), cut, gap, closeNotify, closeNotify && fin, err)
		}
	}
}

// pipelinedTLS shakes hands with the gateway at addr, then has its TLS
// client write recs as records (and a close_notify) into a buffer, and
// sends that buffer's bytes in one write or, if cut, in random pieces,
// gap apart.
func pipelinedTLS(t *testing.T, addr string, client *tls.Config, reqs, recs []string, cut bool, gap time.Duration, closeNotify, fin bool, rng *rand.Rand) error {
	c, rc := dialTLSRecorded(t, addr, net.Dialer{}, client)
	defer rc.Close()
	raw := rc.Conn
	rc.holdWrites()
	for _, r := range recs {
		if _, err := io.WriteString(c, r); err != nil {
			return err
		}
	}
	if closeNotify {
		if err := rc.closeNotify(c); err != nil {
			return err
		}
	}
	wire := rc.held()
	segs := [][]byte{wire}
	if cut {
		segs = segs[:0]
		for rest := wire; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(60))
			segs = append(segs, rest[:k])
			rest = rest[k:]
		}
	}
	go func() {
		for _, s := range segs {
			if _, err := raw.Write(s); err != nil {
				return
			}
			if gap > 0 {
				time.Sleep(gap)
			}
		}
		if fin {
			_ = raw.(*net.TCPConn).CloseWrite()
		}
	}()
	if err := readAnswers(bufio.NewReader(c), reqs, closeNotify); err != nil {
		return fmt.Errorf("%w (%d TLS bytes in %d writes)", err, len(wire), len(segs))
	}
	return nil
}

// dialTLSRecorded dials addr with d and shakes hands over TLS with
// config, on a recordConn: the TCP connection, closed when the test ends,
// with a deadline 10 s away.
func dialTLSRecorded(t *testing.T, addr string, d net.Dialer, config *tls.Config) (*tls.Conn, *recordConn) {
	t.Helper()
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	rc := &recordConn{Conn: raw}
	c := tls.Client(rc, config)
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	return c, rc
}

// recordConn is a TLS client's TCP connection whose writes can be held
// back: after holdWrites, what the client writes (its records) is kept,
// for the test to send in writes of its own choosing.
type recordConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	kept bytes.Buffer
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		return c.kept.Write(p)
	}
	return c.Conn.Write(p)
}

func (c *recordConn) holdWrites() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

func (c *recordConn) held() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.kept.Bytes())
}

// closeNotify has c, which runs over rc, send its close_notify, and
// gives rc a deadline 10 s away again: tls.Conn.CloseWrite ends further
// writes by expiring the write deadline of the connection under it.
func (rc *recordConn) closeNotify(c *tls.Conn) error {
	if err := c.CloseWrite(); err != nil {
		return err
	}
	return rc.Conn.SetDeadline(time.Now().Add(10 * time.Second))
}

// stallInRecord has c, which runs over rc, write a record of n bytes, and
// sends only the first half of it: the peer's tls.Conn then waits for the
// rest before it returns a byte of it.
func (rc *recordConn) stallInRecord(c *tls.Conn, n int) {
	rc.holdWrites()
	_, _ = c.Write(bytes.Repeat([]byte("x"), n))
	held := rc.held()
	_, _ = rc.Conn.Write(held[:len(held)/2])
}
