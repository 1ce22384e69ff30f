package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/testserve"
)

// FuzzAgainstNetHTTP extends TestHTTP1VectorsAgainstNetHTTP beyond the
// tables: whatever request head Go's net/http server refuses, the gateway
// refuses too, through its real listener. For each input whose first
// request Go's server answers with an error status, a gateway of its own
// is sent the same bytes (then a half-close, as a client with nothing more
// to send) and must not forward a byte of it upstream; if it answers, the
// answer is an error status, never 499. The oracle's handler does not read
// bodies, so its error statuses judge the head alone (a body is checked as
// it streams, after the head may have gone upstream).
func FuzzAgainstNetHTTP(f *testing.F) {
	for _, file := range loadVectors(f) {
		for _, c := range file.Cases {
			if raw, err := c.bytes(); err == nil {
				f.Add(raw)
			}
		}
	}
	ln := listenLoopback(f)
	srv := &http.Server{
		MaxHeaderBytes:    DefaultMaxHeaderBytes - 4096, // Go adds 4096 bytes of slack
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
	}
	go func() { _ = srv.Serve(ln) }()
	f.Cleanup(func() { _ = srv.Close() })
	oracle := ln.Addr().String()

	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 32<<10 {
			return
		}
		// A half-close ends what Go's server reads: a head cut short gets
		// no answer.
		sts := netHTTPStatuses(oracle, raw, 1, vectorDeadline, true)
		if len(sts) == 0 || sts[0] < 400 {
			return
		}
		st := sts[0]
		up, err := newRecordingUpstream()
		if err != nil {
			t.Fatal(err)
		}
		g, err := startGateway(Options{}, up.addr())
		if err != nil {
			up.close(time.Second)
			t.Fatal(err)
		}
		answer, xerr := halfClosedExchange(g.addr, raw)
		stopErr := g.stop()
		up.close(2 * time.Second)
		if stopErr != nil {
			t.Errorf("stopping the gateway: %v", stopErr)
		}
		up.mu.Lock()
		received, reqs := up.received, len(up.reqs)
		up.mu.Unlock()
		if received > 0 {
			t.Errorf("net/http answers %d, but the gateway forwarded %d bytes (%d whole requests) upstream\nraw: %q", st, received, reqs, raw)
		}
		if status499.Match(answer) {
			t.Errorf("a 499 on the wire\nraw: %q\nanswer: %q", raw, answer)
		}
		if len(answer) > 0 {
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil)
			if err != nil || resp.StatusCode < 400 {
				t.Errorf("net/http answers %d; the gateway's answer is not an error status (%v)\nraw: %q\nanswer: %q", st, err, raw, answer)
			}
		}
		if errors.Is(xerr, os.ErrDeadlineExceeded) {
			t.Errorf("the gateway had not closed the connection %s after a half-close\nraw: %q\nanswer so far: %q", vectorDeadline, raw, answer)
		}
	})
}

// FuzzUpstreamAgainstNetHTTP is the response side: an upstream answers a
// GET with arbitrary bytes, then closes, and what a client receives
// through the gateway's real listener is judged against what Go's
// net/http client reads from those bytes. Every input is sent three times:
// by an HTTP/1.1 client, and by an HTTP/2 client (h2c, Go's
// http2.Transport) as a GET and as a POST with a body, which take the
// gateway's two paths from an HTTP/2 client to an HTTP/1.1 upstream. Where
// Go refuses the head, the client gets the gateway's 502. Where Go reads a
// final response, the client gets the same status, or the gateway's 502
// (it may be stricter); with the same status, a body Go reads whole
// arrives whole and unchanged, and one Go cannot read whole (cut short,
// bad chunks) never arrives as a complete body.
func FuzzUpstreamAgainstNetHTTP(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nuntil the close",
		"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nshort",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 304 Not Modified\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\ncut",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nz\r\nbad\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
		"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: x-hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nUpgrade: h2c\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nX-Empty:\r\nX-Sp:  a b \r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\nContent-Length: 9\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX T: a\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T : a\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: a\r\n b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: a\x01b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nTe: trailers\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nHost: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX_T: 1\r\n\r\n",
		"garbage\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	// One gateway and one upstream for the whole run (a fuzzing run makes
	// tens of thousands of connections, and loopback ports run out). The
	// upstream closes each connection after its answer, but the gateway
	// keeps its connections per address, so an input's request may go out
	// on one the upstream closed after the previous answer: the gateway
	// must then send it again on a new one. answered counts the requests
	// the upstream answered, so that a 502 of the gateway's own is only
	// taken for a judgement of the upstream's bytes when the upstream did
	// answer this input's request.
	var reply atomic.Pointer[[]byte]
	var answered atomic.Int64
	up := testserve.Conns(f, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(vectorDeadline))
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body) // unread bytes would make the close a reset
		answered.Add(1)
		_, _ = c.Write(*reply.Load())
	})
	_, gw := startProxyWith(f, Options{}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", up)}, listener.Protocols{H2C: true})
	h2 := h2cClient(f) // one HTTP/2 connection, kept while its streams fail
	h2.Timeout = vectorDeadline

	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 16<<10 {
			return
		}
		// What Go's client reads of raw, with a status outside 100..599
		// refused (RFC 9110 section 15; Go's client passes it on).
		oracle, oerr := readFinalResponse(bufio.NewReader(bytes.NewReader(raw)), http.MethodGet)
		if oerr == nil && (oracle.StatusCode < 100 || oracle.StatusCode > 599) {
			oerr = fmt.Errorf("invalid status %d", oracle.StatusCode)
		}
		var wantBody []byte
		var wantBodyErr error
		if oerr == nil {
			if oracle.StatusCode == http.StatusSwitchingProtocols {
				return // an upgrade the GET did not ask for: not this test's
			}
			wantBody, wantBodyErr = io.ReadAll(oracle.Body)
		}
		reply.Store(&raw)

		// judge checks what a client got through the gateway (via names
		// the client) against the oracle.
		judge := func(via string, before int64, got *http.Response) {
			t.Helper()
			body, bodyErr := io.ReadAll(got.Body)
			got.Body.Close()
			fromGateway := bytes.Contains(body, []byte("(request id "+got.Header.Get("X-Request-Id")+")"))
			if fromGateway && answered.Load() == before {
				t.Fatalf("%s: the gateway answered %d without the upstream answering this request\nbody: %q\nupstream sends: %q", via, got.StatusCode, body, raw)
			}
			switch {
			case got.StatusCode == 499:
				t.Fatalf("%s: a 499 on the wire\nupstream sent: %q", via, raw)
			case oerr != nil:
				if got.StatusCode != http.StatusBadGateway {
					t.Fatalf("%s: Go refuses the upstream's head (%v), and the gateway answers %d, not 502\nupstream sent: %q\nbody: %q", via, oerr, got.StatusCode, raw, body)
				}
			case got.StatusCode == http.StatusBadGateway && fromGateway:
				// stricter than Go: allowed
			case got.StatusCode != oracle.StatusCode:
				t.Fatalf("%s: Go reads status %d, the client got %d\nupstream sent: %q", via, oracle.StatusCode, got.StatusCode, raw)
			case wantBodyErr == nil && (bodyErr != nil || !bytes.Equal(body, wantBody)):
				t.Fatalf("%s: Go reads the body %q whole; the client got %q (%v)\nupstream sent: %q", via, wantBody, body, bodyErr, raw)
			case wantBodyErr != nil && bodyErr == nil:
				t.Fatalf("%s: Go cannot read the body whole (%v), yet the client got a complete body %q\nupstream sent: %q", via, wantBodyErr, body, raw)
			}
		}

		before := answered.Load()
		conn, err := net.DialTimeout("tcp", gw, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.(*net.TCPConn).SetLinger(0) // a reset, not TIME_WAIT, when done
		_ = conn.SetDeadline(time.Now().Add(vectorDeadline))
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		got, err := readFinalResponse(bufio.NewReader(conn), http.MethodGet)
		if err != nil {
			t.Fatalf("HTTP/1.1: no answer from the gateway: %v\nupstream sent: %q", err, raw)
		}
		judge("HTTP/1.1", before, got)

		// An HTTP/2 client's GET goes over the HTTP/1.1 codec's pooled
		// connections; one with a body, over net/http's Transport.
		before = answered.Load()
		got, err = h2.Get("http://" + gw + "/")
		if err != nil {
			t.Fatalf("h2c GET: no answer from the gateway: %v\nupstream sent: %q", err, raw)
		}
		judge("h2c GET", before, got)
		// A POST is not sent twice by the gateway's Transport (nor by
		// nginx) once written to a pooled connection the upstream closed
		// just after its last answer, a race this upstream runs on every
		// input: the client then gets a 502 the upstream never answered.
		// So that 502, and only it, is sent again (at most twice), as a
		// client retries; the upstream must answer one of the three.
		for try := 1; ; try++ {
			before = answered.Load()
			got, err = h2.Post("http://"+gw+"/", "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatalf("h2c POST: no answer from the gateway: %v\nupstream sent: %q", err, raw)
			}
			if try == 3 || got.StatusCode != http.StatusBadGateway || answered.Load() != before {
				break
			}
			_, _ = io.Copy(io.Discard, got.Body)
			got.Body.Close()
		}
		judge("h2c POST", before, got)
	})
}
