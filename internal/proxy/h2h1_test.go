package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// TestH2ToHTTP1WithoutBody: HTTP/2 requests without a body to an http1
// pool (roundTripH1) reach the upstream with the policy's fields, come
// back with the body, status and trailers, and share a pooled connection:
// twenty sequential requests of every shape (GET, HEAD, a 204, a chunked
// body with a trailer) use one upstream connection.
func TestH2ToHTTP1WithoutBody(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Proto", r.Proto)
		w.Header().Set("X-Seen-Tag", r.Header.Get("X-Gray-Tag"))
		w.Header().Set("X-Seen-XFF", r.Header.Get("X-Forwarded-For"))
		switch r.URL.Path {
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(200)
			w.(http.Flusher).Flush() // chunked
			_, _ = io.WriteString(w, "chunked body")
			w.Header().Set("X-Sum", "12")
		default:
			_, _ = io.WriteString(w, r.Method+" "+r.RequestURI)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	d := staticDecider{Rule: "r", Group: "gray", Tag: "gray-tag", Target: poolOf("h1", addrOf(srv))}
	_, addr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
	c := h2cClient(t)
	for i := range 20 {
		var path, method string
		switch i % 4 {
		case 0:
			method, path = "GET", fmt.Sprintf("/get?i=%d", i)
		case 1:
			method, path = "HEAD", "/head"
		case 2:
			method, path = "GET", "/empty"
		case 3:
			method, path = "GET", "/trailer"
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		req.Header.Set("X-Gray-Tag", "forged")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: body: %v", method, path, err)
		}
		if resp.Header.Get("X-Proto") != "HTTP/1.1" || resp.Header.Get("X-Seen-Tag") != "gray-tag" || resp.Header.Get("X-Seen-XFF") != "127.0.0.1" {
			t.Errorf("%s %s: upstream saw proto %q tag %q XFF %q", method, path, resp.Header.Get("X-Proto"), resp.Header.Get("X-Seen-Tag"), resp.Header.Get("X-Seen-XFF"))
		}
		if resp.Header.Get("X-Gray-Group") != "gray" {
			t.Errorf("%s %s: X-Gray-Group %q", method, path, resp.Header.Get("X-Gray-Group"))
		}
		want := map[int]string{0: "GET " + path, 1: "", 2: "", 3: "chunked body"}[i%4]
		wantStatus := map[int]int{2: 204}[i%4]
		if wantStatus == 0 {
			wantStatus = 200
		}
		if resp.StatusCode != wantStatus || string(body) != want {
			t.Errorf("%s %s: %d %q, want %d %q", method, path, resp.StatusCode, body, wantStatus, want)
		}
		if i%4 == 3 && resp.Trailer.Get("X-Sum") != "12" {
			t.Errorf("trailer X-Sum = %q, want 12", resp.Trailer.Get("X-Sum"))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sequential requests opened %d upstream connections, want 1", n)
	}
}

// rawUpstream is an HTTP/1.1 upstream that answers each request with the
// bytes its path names, for the shapes a well-behaved server never sends.
// after, when set for a path, says to close the connection after the
// answer.
type rawUpstream struct {
	ln      net.Listener
	accepts atomic.Int32
	answers map[string]string
	closing map[string]bool
	stall   chan struct{}
}

func newRawUpstream(t *testing.T, answers map[string]string, closing map[string]bool) *rawUpstream {
	u := &rawUpstream{ln: listenLoopback(t), answers: answers, closing: closing, stall: make(chan struct{})}
	t.Cleanup(func() { close(u.stall); _ = u.ln.Close() })
	go func() {
		for {
			c, err := u.ln.Accept()
			if err != nil {
				return
			}
			u.accepts.Add(1)
			go u.serve(c)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		ans, ok := u.answers[req.URL.Path]
		if !ok { // "/stall": no answer until the test ends
			select {
			case <-u.stall:
			case <-time.After(10 * time.Second):
			}
			return
		}
		if req.URL.Path == "/split" {
			// A slow peer: the answer in pieces, the header cut mid-line
			// and between its CR and LF.
			for _, piece := range splitPieces(ans) {
				if _, err := io.WriteString(c, piece); err != nil {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			continue
		}
		if _, err := io.WriteString(c, ans); err != nil || u.closing[req.URL.Path] {
			return
		}
	}
}

// splitPieces cuts s into pieces of 1, 2, 3, ... bytes.
func splitPieces(s string) []string {
	var out []string
	for n := 1; s != ""; n++ {
		k := min(n, len(s))
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

// TestH2ToHTTP1Shapes: roundTripH1 against the answers the HTTP/1.1
// codec's tests also throw at it: an upstream that closes every
// connection after its answer without saying so (the next request finds
// the pooled connection stale and goes on a new one), interim 1xx
// answers (skipped), bare LF line ends, an answer written in pieces of a
// few bytes (a slow peer), a body delimited by the close, bytes after the
// answer (the connection is not used again), a header larger than the
// limit (502) and no answer (504 at the header timeout).
func TestH2ToHTTP1Shapes(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	u := newRawUpstream(t, map[string]string{
		"/closes": ok,
		"/early":  "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + ok,
		"/junk":   ok + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforged",
		"/huge":   "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\nContent-Length: 2\r\n\r\nok",
		"/lf":     "HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
		"/ok":     ok,
		"/split":  "HTTP/1.1 200 OK\r\nX-Slow: yes\r\nContent-Length: 5\r\n\r\nsplit",
		"/eof":    "HTTP/1.1 200 OK\r\n\r\nuntil the close",
		"/nobody": "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
	}, map[string]bool{"/closes": true, "/eof": true})
	d := staticDecider{Rule: "r", Group: "gray", Target: poolOf("raw", u.ln.Addr().String())}
	_, addr := startProxyWith(t, Options{ResponseHeaderTimeout: 300 * time.Millisecond}, d, listener.Protocols{H2C: true})
	c := h2cClient(t)
	get := func(path string) (int, string) {
		t.Helper()
		return fetch(t, c, "GET", "http://"+addr+path, "")
	}
	for i := range 5 {
		if st, b := get("/closes"); st != 200 || b != "ok" {
			t.Fatalf("request %d to an upstream that closes after each answer: %d %q", i, st, b)
		}
	}
	if n := u.accepts.Load(); n != 5 {
		t.Errorf("5 answers that each closed their connection took %d connections", n)
	}
	for _, tt := range []struct {
		path   string
		status int
		body   string
	}{
		{"/early", 200, "ok"},
		{"/split", 200, "split"},
		{"/eof", 200, "until the close"}, // a body delimited by the close
		{"/lf", 200, "ok"},
		{"/huge", 502, ""},
		{"/stall", 504, ""},
	} {
		if st, b := get(tt.path); st != tt.status || (tt.body != "" && b != tt.body) {
			t.Errorf("GET %s: %d %q, want %d %q", tt.path, st, b, tt.status, tt.body)
		}
	}
	before := u.accepts.Load()
	if st, b := get("/junk"); st != 200 || b != "ok" {
		t.Fatalf("GET /junk: %d %q", st, b)
	}
	if st, b := get("/ok"); st != 200 || b != "ok" {
		t.Fatalf("GET /ok after the junk: %d %q, want the upstream's own answer", st, b)
	}
	if n := u.accepts.Load() - before; n != 2 {
		t.Errorf("a connection with bytes after its answer was used again (%d new connections for 2 requests)", n)
	}
	// A 204 goes out without the Content-Length its upstream gave it
	// (RFC 9110 section 8.6; an HTTP/2 client takes one for an error).
	resp, err := c.Get("http://" + addr + "/nobody")
	if err != nil {
		t.Fatalf("GET /nobody: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Content-Length") != "" {
		t.Errorf("GET /nobody: %d with Content-Length %q, want 204 without one", resp.StatusCode, resp.Header.Get("Content-Length"))
	}
}

// TestH2ToHTTP1Concurrent: many streams at once on one HTTP/2 connection
// share the http1 pool's connections, and every answer is its own
// request's (none crosses to another stream).
func TestH2ToHTTP1Concurrent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, r.URL.RawQuery)
	}))
	t.Cleanup(srv.Close)
	d := staticDecider{Rule: "r", Group: "gray", Target: poolOf("h1", addrOf(srv))}
	_, addr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
	c := h2cClient(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8*25)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				q := fmt.Sprintf("g=%d&i=%d", g, i)
				resp, err := c.Get("http://" + addr + "/?" + q)
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != q {
					errs <- fmt.Errorf("request %s answered %d %q", q, resp.StatusCode, b)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestHeaderTimeoutAfterH2Shares: a pooled connection the HTTP/2 codec
// used in between (roundTripH1, which clears its read deadline) still
// gets the header timeout when the HTTP/1.1 codec takes it back within a
// few milliseconds of its previous header wait, whose deadline the codec
// may otherwise keep instead of re-arming it: a stalled answer is a 504,
// not a hang.
func TestHeaderTimeoutAfterH2Shares(t *testing.T) {
	up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/stall" {
				_, _ = io.Copy(io.Discard, br) // never answers
				return
			}
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	d := staticDecider{Group: "stable", Target: poolOf("h1", up)}
	_, addr := startProxyWith(t, Options{ResponseHeaderTimeout: 300 * time.Millisecond}, d, listener.Protocols{H2C: true})
	h2 := h2cClient(t)
	for i := range 3 {
		c := dialBounded(t, addr, 5*time.Second)
		br := bufio.NewReader(c)
		get := func(path string) (*http.Response, error) {
			if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path); err != nil {
				return nil, err
			}
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			return resp, err
		}
		if resp, err := get("/fast"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("try %d: HTTP/1.1 /fast: %v %v", i, resp, err)
		}
		resp, err := h2.Get("http://" + addr + "/fast")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("try %d: HTTP/2 /fast: %v %v", i, resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		begin := time.Now()
		resp, err = get("/stall")
		if err != nil || resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("try %d: a stalled answer after %v: %v %v, want 504 after the 300ms header timeout", i, time.Since(begin), resp, err)
		}
		c.Close()
	}
}

// TestH2InterimResponses: an upstream's 103 Early Hints reaches an HTTP/2
// client before the final response, with its Link and without the
// gateway's or hop-by-hop fields, whichever way the request went: a GET
// to an http1 pool (roundTripH1), a POST to it (the Transport), and a GET
// to an h2c pool. The final response does not carry the hint's fields.
func TestH2InterimResponses(t *testing.T) {
	hints := "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: X-Hop\r\nX-Hop: 1\r\n\r\n"
	u := newRawUpstream(t, map[string]string{"/early": hints + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}, nil)
	h2up := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.WriteString(w, "ok")
	}))
	h1pool, h2pool := poolOf("raw", u.ln.Addr().String()), poolOf("h2c", addrOf(h2up))
	h2pool.Protocol = upstream.H2C
	d := deciderFunc(func(r attr.Request) router.Decision {
		if r.Host() == "h2c.test" {
			return router.Decision{Group: "g", Target: h2pool}
		}
		return router.Decision{Group: "g", Target: h1pool}
	})
	_, addr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
	c := h2cClient(t)
	for _, tt := range []struct{ name, method, host string }{
		{"GET to http1", "GET", "h1.test"},
		{"POST to http1", "POST", "h1.test"},
		{"GET to h2c", "GET", "h2c.test"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				got = append(got, fmt.Sprintf("%d link=%q hop=%q group=%q", code, h.Get("Link"), h.Get("X-Hop"), h.Get("X-Gray-Group")))
				return nil
			}}
			var body io.Reader
			if tt.method == "POST" {
				body = strings.NewReader("order")
			}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), tt.method, "http://"+addr+"/early", body)
			req.Host = tt.host
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := `103 link="</a.css>; rel=preload" hop="" group=""`
			if len(got) != 1 || got[0] != want {
				t.Errorf("interim responses %q, want [%s]", got, want)
			}
			if resp.StatusCode != 200 || string(b) != "ok" || resp.Header.Get("Link") != "" {
				t.Errorf("final: %d %q Link %q, want 200 \"ok\" without the hint's Link", resp.StatusCode, b, resp.Header.Get("Link"))
			}
		})
	}
}
