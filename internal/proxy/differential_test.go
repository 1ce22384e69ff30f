package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

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

// FuzzUpstreamAgainstNetHTTP is the response side: an upstream answers
// a request with arbitrary bytes, then closes (but after a HEAD, see
// below), and what a client receives through the gateway's real listener
// is judged against what Go's net/http client reads from those bytes for
// that method. Every input is sent five times: by an HTTP/1.1 client as a
// HEAD and then a GET on the same connection, and by an HTTP/2 client
// (h2c, Go's http2.Transport) as a GET, a HEAD and a POST with a body
// (the GET and the POST take the gateway's two paths from an HTTP/2
// client to an HTTP/1.1 upstream). Where Go refuses the head, the client
// gets the gateway's 502. Where Go reads a final response, the client gets
// the same status, or the gateway's 502 (it may be stricter); with the
// same status, a body Go reads whole arrives whole and unchanged, and one
// Go cannot read whole (cut short, bad chunks) never arrives as a
// complete body. Every other input (by its hash) is written in pieces
// (cutAtRandom) rather than in one write, under the same judgement.
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
		"HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTrailer: X-\"T\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
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
	//
	// After an answer that Go reads whole and framed (a HEAD's head; a
	// body with a length or chunked, on a connection not closed by it),
	// the upstream keeps the connection and reads the next request on it,
	// as a server does: a gateway that waited for more after that answer
	// would wait until the client gave up, and one that took the bytes
	// after it for the next answer would hand a client the wrong one.
	var reply atomic.Pointer[[]byte]
	var cut atomic.Pointer[[]piece] // nil pieces: the reply in one write
	var keepHead, keepGet atomic.Bool
	var answered atomic.Int64
	up := testserve.Conns(f, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(vectorDeadline))
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body) // unread bytes would make the close a reset
			answered.Add(1)
			writePieces(c, *reply.Load(), *cut.Load())
			keep := keepGet.Load()
			if req.Method == http.MethodHead {
				keep = keepHead.Load()
			}
			if !keep {
				return
			}
		}
	})
	_, gw := startProxyWith(f, Options{}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", up)}, listener.Protocols{H2C: true})
	h2 := h2cClient(f) // one HTTP/2 connection, kept while its streams fail
	h2.Timeout = vectorDeadline

	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 16<<10 {
			return
		}
		reply.Store(&raw)
		get, head := readAsNetHTTP(raw, http.MethodGet), readAsNetHTTP(raw, http.MethodHead)
		keepHead.Store(head.err == nil && !head.resp.Close)
		keepGet.Store(get.err == nil && get.bodyErr == nil && !get.resp.Close &&
			(get.resp.ContentLength >= 0 || len(get.resp.TransferEncoding) > 0))
		// Every other input is written in pieces (cutAtRandom), chosen
		// and cut by its hash: the judgement is the same however the
		// bytes arrive. Not an answer the upstream keeps its connection
		// after while bytes follow it (a body sent to a HEAD): those
		// bytes, late, are what the gateway reads for the next request
		// on that pooled connection, which it answers 502 and closes, as
		// nginx does; in one write they come with the answer and the
		// connection is closed at once (violationExtraBytes).
		var pieces []piece
		if h := xxhash.Sum64(raw); h&1 == 1 && !(keepHead.Load() && head.rest > 0) && !(keepGet.Load() && get.rest > 0) {
			pieces = cutAtRandom(rand.New(rand.NewPCG(h, 17)), raw)
		}
		cut.Store(&pieces)
		sent := fmt.Sprintf("%q%s", raw, describePieces(raw, pieces))
		if get.err == nil && get.resp.StatusCode == http.StatusSwitchingProtocols {
			return // an upgrade the request did not ask for: not this test's
		}

		// judge checks what a client got through the gateway (via names
		// the client) for a request with want's method against want.
		judge := func(via string, want oracleRead, before int64, got *http.Response) {
			t.Helper()
			body, bodyErr := io.ReadAll(got.Body)
			got.Body.Close()
			fromGateway := bytes.Contains(body, []byte("(request id "+got.Header.Get("X-Request-Id")+")"))
			if want.method == http.MethodHead {
				// No body to tell by: a 502 where the upstream's bytes
				// carry none is the gateway's.
				fromGateway = got.StatusCode == http.StatusBadGateway && (want.err != nil || want.resp.StatusCode != http.StatusBadGateway)
			}
			if fromGateway && answered.Load() == before {
				t.Fatalf("%s: the gateway answered %d without the upstream answering this request\nbody: %q\nupstream sends: %s", via, got.StatusCode, body, sent)
			}
			switch {
			case got.StatusCode == 499:
				t.Fatalf("%s: a 499 on the wire\nupstream sent: %s", via, sent)
			case want.err != nil:
				if got.StatusCode != http.StatusBadGateway {
					t.Fatalf("%s: Go refuses the upstream's head (%v), and the gateway answers %d, not 502\nupstream sent: %s\nbody: %q", via, want.err, got.StatusCode, sent, body)
				}
			case got.StatusCode == http.StatusBadGateway && fromGateway:
				// stricter than Go: allowed
			case got.StatusCode != want.resp.StatusCode:
				t.Fatalf("%s: Go reads status %d, the client got %d\nupstream sent: %s", via, want.resp.StatusCode, got.StatusCode, sent)
			case want.bodyErr == nil && (bodyErr != nil || !bytes.Equal(body, want.body)):
				t.Fatalf("%s: Go reads the body %q whole; the client got %q (%v)\nupstream sent: %s", via, want.body, body, bodyErr, sent)
			case want.bodyErr != nil && bodyErr == nil:
				t.Fatalf("%s: Go cannot read the body whole (%v), yet the client got a complete body %q\nupstream sent: %s", via, want.bodyErr, body, sent)
			}
		}

		// HTTP/1.1: a HEAD, then a GET on the same connection (unless the
		// HEAD's answer closes it), so that a body the upstream sent
		// after its answer to the HEAD, or one the gateway expected, is
		// caught as the GET's answer gone wrong.
		dial := func() (net.Conn, *bufio.Reader) {
			conn, err := net.DialTimeout("tcp", gw, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			_ = conn.(*net.TCPConn).SetLinger(0) // a reset, not TIME_WAIT, when done
			_ = conn.SetDeadline(time.Now().Add(vectorDeadline))
			return conn, bufio.NewReader(conn)
		}
		conn, br := dial()
		for _, want := range []oracleRead{head, get} {
			before := answered.Load()
			if _, err := io.WriteString(conn, want.method+" / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
				t.Fatalf("HTTP/1.1 %s: %v\nupstream sent: %s", want.method, err, sent)
			}
			got, err := readFinalResponse(br, want.method)
			if err != nil {
				t.Fatalf("HTTP/1.1 %s: no answer from the gateway: %v\nupstream sent: %s", want.method, err, sent)
			}
			judge("HTTP/1.1 "+want.method, want, before, got)
			if got.Close {
				conn, br = dial()
			}
		}

		// An HTTP/2 client's GET and HEAD go over the HTTP/1.1 codec's
		// pooled connections; one with a body, over net/http's Transport.
		for _, want := range []oracleRead{get, head} {
			before := answered.Load()
			req, _ := http.NewRequest(want.method, "http://"+gw+"/", nil)
			got, err := h2.Do(req)
			if err != nil {
				t.Fatalf("h2c %s: no answer from the gateway: %v\nupstream sent: %s", want.method, err, sent)
			}
			judge("h2c "+want.method, want, before, got)
		}
		// A POST is not sent twice by the gateway's Transport (nor by
		// nginx) once written to a pooled connection the upstream closed
		// just after its last answer, a race this upstream runs on every
		// input: the client then gets a 502 the upstream never answered.
		// So that 502, and only it, is sent again (at most twice), as a
		// client retries; the upstream must answer one of the three.
		for try := 1; ; try++ {
			before := answered.Load()
			got, err := h2.Post("http://"+gw+"/", "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatalf("h2c POST: no answer from the gateway: %v\nupstream sent: %s", err, sent)
			}
			if try == 3 || got.StatusCode != http.StatusBadGateway || answered.Load() != before {
				judge("h2c POST", get, before, got)
				break
			}
			_, _ = io.Copy(io.Discard, got.Body)
			got.Body.Close()
		}
	})
}

// oracleRead is what Go's net/http client reads of an upstream's bytes as
// the answer to a request with method: the final response, or the error
// that refuses its head, and its body, whole or not.
type oracleRead struct {
	method  string
	resp    *http.Response
	err     error
	body    []byte
	bodyErr error
	rest    int // the bytes of raw after the answer, when it was read whole
}

// readAsNetHTTP reads raw as Go's client does, with a status outside
// 100..599 refused (RFC 9110 section 15; Go's client passes it on).
func readAsNetHTTP(raw []byte, method string) oracleRead {
	o := oracleRead{method: method}
	rd := bytes.NewReader(raw)
	br := bufio.NewReader(rd)
	o.resp, o.err = readFinalResponse(br, method)
	if o.err == nil && (o.resp.StatusCode < 100 || o.resp.StatusCode > 599) {
		o.err = fmt.Errorf("invalid status %d", o.resp.StatusCode)
	}
	if o.err == nil {
		o.body, o.bodyErr = io.ReadAll(o.resp.Body)
		o.rest = br.Buffered() + rd.Len()
	}
	return o
}
