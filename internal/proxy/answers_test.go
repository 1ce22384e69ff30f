package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/upstream"
)

// newH2RigFor is newStallRigFor on a listener that serves HTTP/2 with
// prior knowledge (h2c) as well as HTTP/1.1.
func newH2RigFor(t *testing.T, pool *upstream.Pool, opts Options) *stallRig {
	t.Helper()
	b, err := breaker.New(breaker.Config{}, breaker.Options{Name: "r1/gray"})
	if err != nil {
		t.Fatal(err)
	}
	pool.Gate = limit.NewSet(nil).Gate("gray", 10)
	r := &stallRig{gate: pool.Gate, b: b, log: &syncBuffer{}}
	opts.AccessLog = r.log
	opts.AccessLogFlushInterval = 10 * time.Millisecond
	r.p, r.addr = startProxyWith(t, opts, &grayRoute{gray: pool, b: b}, listener.Protocols{H2C: true})
	return r
}

// TestH2ClientTooManyInterim: an upstream that sends more interim (1xx)
// responses than maxInterimResponses is broken, for an HTTP/2 client as
// for an HTTP/1.1 one (TestH1ClientInterimFromH2Pool): the client gets
// maxInterimResponses of them, then the gateway's 502 with its request
// id, and the breaker counts a failure. The net/http transports put no
// bound on the interim responses they hand to a Got1xxResponse hook (the
// hook's owner is to), so the HTTP/2 codec's hook must: on an h2c pool,
// and on an http1 pool for a request with a body (the Transport); a GET
// to an http1 pool (roundTripH1) is bounded by readResponseH1, and is
// here as a regression test.
func TestH2ClientTooManyInterim(t *testing.T) {
	const sent = maxInterimResponses + 5
	h2up := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The header is set once. net/http's HTTP/2 server encodes a
		// 1xx answer's header map on another goroutine, and
		// WriteHeader waits for that unless the stream is closed
		// meanwhile, as the gateway closes it here after too many:
		// then a change to the map (the Del this test made before its
		// final answer) raced with the encoding, and -race failed the
		// test once in CI.
		w.Header().Set("Link", "</a.css>; rel=preload")
		for range sent {
			w.WriteHeader(http.StatusEarlyHints)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	hints := strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", sent)
	h1up := newRawUpstream(t, map[string]string{"/": hints + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}, map[string]bool{"/": true})
	for _, tt := range []struct {
		name   string
		proto  upstream.Protocol
		addr   string
		method string
	}{
		{"GET to h2c", upstream.H2C, addrOf(h2up), "GET"},
		{"POST to h2c", upstream.H2C, addrOf(h2up), "POST"},
		{"POST to http1", upstream.HTTP1, h1up.ln.Addr().String(), "POST"},
		{"GET to http1", upstream.HTTP1, h1up.ln.Addr().String(), "GET"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool := poolOf("gray", tt.addr)
			pool.Protocol = tt.proto
			r := newH2RigFor(t, pool, Options{})
			var got atomic.Int64
			trace := &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error {
				got.Add(1)
				return nil
			}}
			ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), trace), 10*time.Second)
			defer cancel()
			var body io.Reader
			if tt.method == "POST" {
				body = strings.NewReader("order")
			}
			req, _ := http.NewRequestWithContext(ctx, tt.method, "http://"+r.addr+"/", body)
			c := h2cClient(t)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			c.CloseIdleConnections() // so that its connection's goroutine ends
			id := resp.Header.Get("X-Request-Id")
			if n := got.Load(); n != maxInterimResponses || resp.StatusCode != http.StatusBadGateway || id == "" || !strings.Contains(string(b), id) {
				t.Errorf("%d interim responses, then %d %q with X-Request-Id %q; want %d, then the gateway's 502 with its request id",
					n, resp.StatusCode, b, id, maxInterimResponses)
			}
			line := r.settle(t, "")
			if line["status"] != float64(http.StatusBadGateway) {
				t.Errorf("logged status %v, want 502", line["status"])
			}
			if f := r.failures(); f != 1 {
				t.Errorf("breaker failures = %d, want 1", f)
			}
		})
	}
}

// TestBreakerAfterInterim: on an http1 pool, the outcome the breaker
// records for a response that began with an interim (1xx) response is
// that of the final response and its body, as for any other response and
// as on an h2 pool, not a success at the first interim response: a 500
// after a 103 is a failure, as is an upstream that breaks off after it,
// stalls after it (the header timeout, counted again from the 103), or
// breaks off within the final response's body. A 200 after a 103 is a
// success. The client gets the 103 first each time. The same upstream
// behind an h2c pool is held to the same outcomes.
func TestBreakerAfterInterim(t *testing.T) {
	const hints = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
	up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, hints)
		switch req.URL.Path {
		case "/ok":
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		case "/500":
			_, _ = io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nfail")
		case "/broken-body":
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 10))
		case "/stall":
			_, _ = io.Copy(io.Discard, c) // until the gateway gives up
		}
		// "/break": nothing more; the connection closes.
	})
	h2up := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, "ok")
		case "/500":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "fail")
		case "/broken-body":
			w.Header().Set("Content-Length", "100000")
			_, _ = io.WriteString(w, strings.Repeat("x", 10))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "/stall":
			<-r.Context().Done()
		case "/break":
			panic(http.ErrAbortHandler)
		}
	}))
	for _, tt := range []struct {
		path     string
		status   int // the final status the client gets
		timeout  string
		failures uint64
	}{
		{"/ok", http.StatusOK, "", 0},
		{"/500", http.StatusInternalServerError, "", 1},
		{"/break", http.StatusBadGateway, "", 1},
		{"/stall", http.StatusGatewayTimeout, "response_header_timeout", 1},
		{"/broken-body", http.StatusOK, "", 1},
	} {
		for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
			t.Run(tt.path[1:]+"/"+proto.String(), func(t *testing.T) {
				pool := poolOf("gray", up)
				if proto == upstream.H2C {
					pool = poolOf("gray", addrOf(h2up))
					pool.Protocol = proto
				}
				r := newStallRigFor(t, pool, Options{ResponseHeaderTimeout: shortTimeout})
				c := dialRaw(t, r.addr)
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", tt.path)
				br := bufio.NewReader(c)
				var got []int
				for {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("after %v: %v", got, err)
					}
					got = append(got, resp.StatusCode)
					_, _ = io.Copy(io.Discard, resp.Body)
					if resp.StatusCode >= 200 {
						break
					}
				}
				if len(got) != 2 || got[0] != http.StatusEarlyHints || got[1] != tt.status {
					t.Errorf("answers %v, want [103 %d]", got, tt.status)
				}
				line := r.settle(t, tt.timeout)
				if line["status"] != float64(tt.status) {
					t.Errorf("logged status %v, want %d", line["status"], tt.status)
				}
				if f := r.failures(); f != tt.failures {
					t.Errorf("breaker failures = %d, want %d", f, tt.failures)
				}
				if s := r.b.Snapshot().Window; s.Requests != 1 {
					t.Errorf("breaker saw %d requests, want 1", s.Requests)
				}
			})
		}
	}
}

// TestH2ClientBodyBreaksOff is TestBodyBreaksOff for an HTTP/2 client:
// an upstream whose answer ends before its Content-Length (an http1
// upstream closes its connection, an h2c one resets its stream), or
// stalls within it. A body of at most maxInlineBody bytes is read whole
// before the header is sent, from either pool, so the client gets the
// gateway's 502 (504 for the stall, read_timeout) with its request id and
// no instance address, rather than a reset stream and no answer; a larger
// one streams, so the client gets its header and then a reset stream.
// Either way the breaker counts a failure, and the access log has the
// status the client got.
func TestH2ClientBodyBreaksOff(t *testing.T) {
	// The answer to /?size=n is n/3 bytes of its body, then the break.
	h1, h2c := breakingBackends(t)
	for _, tt := range []struct {
		name, query string
		status      int
		timeout     string
	}{
		{"small body broken off", "size=100", http.StatusBadGateway, ""},
		{"small body stalled", "size=100&stall", http.StatusGatewayTimeout, "read_timeout"},
		{"body of maxInlineBody broken off", "size=" + strconv.Itoa(maxInlineBody), http.StatusBadGateway, ""},
		{"large body broken off", "size=100000", http.StatusOK, ""},
		{"large body stalled", "size=100000&stall", http.StatusOK, "read_timeout"},
		// Before any byte of a longer body, the client has been sent
		// nothing (x/net/http2 holds the header with the body's first
		// bytes), and gets the error answer, not a reset stream.
		{"large body broken off before its first byte", "size=100000&sent=0", http.StatusBadGateway, ""},
		{"large body stalled before its first byte", "size=100000&sent=0&stall", http.StatusGatewayTimeout, "read_timeout"},
		// After a few bytes, the header and those bytes go out before
		// the reset; the client got the reset alone.
		{"large body broken off early", "size=100000&sent=100", http.StatusOK, ""},
	} {
		for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
			t.Run(tt.name+"/"+proto.String(), func(t *testing.T) {
				addr := h1
				if proto == upstream.H2C {
					addr = addrOf(h2c)
				}
				pool := poolOf("gray", addr)
				pool.Protocol = proto
				r := newH2RigFor(t, pool, Options{UpstreamReadTimeout: shortTimeout, ResponseHeaderTimeout: 5 * time.Second})
				c := h2cClient(t)
				resp, err := c.Get("http://" + r.addr + "/?" + tt.query)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				body, berr := io.ReadAll(resp.Body)
				resp.Body.Close()
				c.CloseIdleConnections()
				id := resp.Header.Get("X-Request-Id")
				switch {
				case resp.StatusCode != tt.status:
					t.Fatalf("status %d, body %.80q (%v); want %d", resp.StatusCode, body, berr, tt.status)
				case tt.status == http.StatusOK && berr == nil:
					t.Errorf("client read %d bytes and the end; want the stream reset", len(body))
				case strings.Contains(tt.query, "sent=100") && len(body) != 100:
					t.Errorf("client read %d bytes before the reset; want the 100 sent", len(body))
				case tt.status != http.StatusOK && (berr != nil || id == "" || !strings.Contains(string(body), id) || strings.Contains(string(body), addr)):
					t.Errorf("error answer with X-Request-Id %q, body %q (%v); want the id in the body and no instance address", id, body, berr)
				}
				line := r.settle(t, tt.timeout)
				if line["status"] != float64(tt.status) {
					t.Errorf("logged status %v, want %d: %v", line["status"], tt.status, line)
				}
				if f := r.failures(); f != 1 {
					t.Errorf("breaker failures = %d, want 1", f)
				}
			})
		}
	}
}

// TestNoRequestLineLogged: a client that opens a connection and sends
// nothing within the head's timeout gets a 408, and the access log
// records it without a method or path (empty, as the log has any value
// it lacks: upstream, pool), not as "GET /": fasthttp's request header
// answers its defaults for a request line it never parsed. So does a
// client whose head never ended. A request that was parsed keeps its
// line.
func TestNoRequestLineLogged(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	log := &syncBuffer{}
	_, addr := startProxy(t, Options{ReadHeaderTimeout: 150 * time.Millisecond, AccessLog: log, AccessLogFlushInterval: 10 * time.Millisecond},
		staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})
	for i, tt := range []struct {
		name, send   string
		status       int
		method, path string
	}{
		{"nothing sent", "", http.StatusRequestTimeout, "", ""},
		{"a head that never ends", "GET /partial HTTP/1.1\r\nHost: a\r\n", http.StatusRequestTimeout, "", ""},
		{"a request", "GET /ok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", http.StatusOK, "GET", "/ok"},
		// A head the Guard refuses after its request line is logged with
		// the line's method and path, as nginx logs it.
		{"a bad field", "POST /refused?q=1 HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", http.StatusBadRequest, "POST", "/refused"},
		{"an unsupported version", "GET /v2 HTTP/2.0\r\nHost: a\r\n\r\n", http.StatusHTTPVersionNotSupported, "GET", "/v2"},
		{"absolute form, bad host", "GET http://a.example/abs/x?y HTTP/1.1\r\nHost: \xff\r\n\r\n", http.StatusBadRequest, "GET", "/abs/x"},
		{"a bad version", "GET /x y HTTP/1.1\r\nHost: a\r\n\r\n", http.StatusBadRequest, "GET", "/x"},
		{"a bad method", "G\x01T /x HTTP/1.1\r\nHost: a\r\n\r\n", http.StatusBadRequest, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dialBounded(t, addr, 5*time.Second)
			defer c.Close()
			_, _ = io.WriteString(c, tt.send)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			var line map[string]any
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if lines := log.lines(); len(lines) > i {
					line = lines[i]
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no access log line for it: %v", log.lines())
				}
			}
			if line["status"] != float64(tt.status) || line["method"] != tt.method || line["path"] != tt.path {
				t.Errorf("logged %v %q %q, want %d %q %q: %v", line["status"], line["method"], line["path"], tt.status, tt.method, tt.path, line)
			}
		})
	}
}
