package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

func TestClassify(t *testing.T) {
	timeoutErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantReason string
	}{
		{"client gone", fmt.Errorf("%w: reading request body: %w", errClientGone, io.ErrUnexpectedEOF), 499, "abandoned: client closed the request"},
		{"slow body", fmt.Errorf("%w: %w", errRequestTimeout, os.ErrDeadlineExceeded), 408, "abandoned: request body timed out"},
		{"empty pool", fmt.Errorf("pool %q: %w", "p", upstream.ErrNoInstance), 503, "has no available instance"},
		{"no free connection", fasthttp.ErrNoFreeConns, 503, "has no free connection"},
		{"dial timeout", &dialError{addr: "a:1", err: timeoutErr}, 504, "timed out connecting"},
		{"connection refused", &dialError{addr: "a:1", err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, 502, "unreachable"},
		{"tls handshake failure", &dialError{addr: "a:1", err: fmt.Errorf("tls handshake: %w", io.EOF)}, 502, "unreachable"},
		{"response header timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, 504, "timed out"},
		{"fasthttp timeout", fasthttp.ErrTimeout, 504, "timed out"},
		{"closed before response", &staleError{err: io.EOF}, 502, "failed"},
		{"malformed response", fmt.Errorf("cannot parse response status line"), 502, "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, reason := classify(tt.err)
			if status != tt.wantStatus || reason != tt.wantReason {
				t.Errorf("classify(%v) = %d %q, want %d %q", tt.err, status, reason, tt.wantStatus, tt.wantReason)
			}
		})
	}
}

// stuckBackend accepts requests and never answers until the request is
// cancelled. Each arrival and each cancellation is reported.
func stuckBackend(t *testing.T) (addr string, arrived, canceled <-chan struct{}) {
	arrivedc := make(chan struct{}, 16)
	canceledc := make(chan struct{}, 16)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrivedc <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
			select {
			case canceledc <- struct{}{}:
			default:
			}
		case <-stop:
		}
	}))
	t.Cleanup(func() {
		close(stop)
		srv.Close()
	})
	return addrOf(srv), arrivedc, canceledc
}

func TestErrorResponses(t *testing.T) {
	stuck, _, _ := stuckBackend(t)
	dead := testport.Refused(t)
	tests := []struct {
		name       string
		opts       Options
		target     *upstream.Pool
		wantStatus int
		wantBody   string
	}{
		{
			name: "502 connection refused", target: poolOf("stable", dead),
			wantStatus: 502, wantBody: "graygate: upstream \"stable\" unreachable\n",
		},
		{
			name: "504 response header timeout", target: poolOf("gray", stuck),
			opts:       Options{ResponseHeaderTimeout: 150 * time.Millisecond},
			wantStatus: 504, wantBody: "graygate: upstream \"gray\" timed out\n",
		},
		{
			name: "503 empty pool", target: upstream.NewPool("empty", nil),
			wantStatus: 503, wantBody: "graygate: upstream \"empty\" has no available instance\n",
		},
		{
			name: "503 no target", target: nil,
			wantStatus: 503, wantBody: "graygate: no upstream for this request\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newDoneRecorder()
			tt.opts.OnDone = rec.onDone
			_, addr := startProxy(t, tt.opts, staticDecider{Rule: "r7", Group: "gray", Degraded: "fallback", Target: tt.target})
			start := time.Now()
			resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp.StatusCode != tt.wantStatus || errBody(t, resp, body) != tt.wantBody {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			if strings.Contains(body, "127.0.0.1") {
				t.Errorf("error body %q names an instance address", body)
			}
			if time.Since(start) > 3*time.Second {
				t.Errorf("answer took %v", time.Since(start))
			}
			for h, want := range map[string]string{"X-Gray-Rule": "r7", "X-Gray-Group": "gray", "X-Gray-Degraded": "fallback"} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			if c := rec.next(t, 2*time.Second); c.status != tt.wantStatus || c.bytes != int64(len(body)) {
				t.Errorf("OnDone(status %d, bytes %d), want (%d, %d)", c.status, c.bytes, tt.wantStatus, len(body))
			}
		})
	}
}

// TestClientGone checks that a client hanging up while the upstream is still
// thinking is recorded as 499 and that the upstream request is abandoned
// rather than left to run to ResponseHeaderTimeout.
// resetClose closes c with a reset (SO_LINGER 0), as a client that goes
// away does; a plain close (FIN) is also a half-close, which is answered.
func resetClose(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestClientGone(t *testing.T) {
	stuck, _, canceled := stuckBackend(t)
	rec := newDoneRecorder()
	var log syncBuffer
	_, addr := startProxy(t, Options{OnDone: rec.onDone, AccessLog: &log}, staticDecider{
		Rule: "r", Group: "stable", Target: poolOf("stable", stuck),
	})

	t.Run("hang up while waiting", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
		// Past watchDelay, so the watcher is what notices.
		time.Sleep(3 * watchDelay)
		resetClose(t, c)
		if d := rec.next(t, 3*time.Second); d.status != StatusClientClosedRequest || d.rule != "r" {
			t.Errorf("OnDone(status %d, rule %q), want (499, r)", d.status, d.rule)
		}
		// The access log says it (its writer flushes within a second).
		want := `"path":"/slow","status":499,`
		for end := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), want) && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		if l := log.String(); !strings.Contains(l, want) || !strings.Contains(l, `"error":"client closed the request"`) {
			t.Errorf("access log %q: want the 499 with its error", l)
		}
		select {
		case <-canceled:
		case <-time.After(3 * time.Second):
			t.Error("the upstream request was not cancelled")
		}
	})

	t.Run("hang up while waiting on a reused upstream connection", func(t *testing.T) {
		// Fast answers first, so that the slow request goes out on a pooled
		// connection whose read deadline an earlier request armed.
		addr := rawBackend(t, func(req *http.Request, w *bufio.Writer) {
			if req.URL.Path == "/slow" {
				time.Sleep(2 * time.Second)
			}
			fmt.Fprint(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		})
		rec := newDoneRecorder()
		_, proxyAddr := startProxy(t, Options{OnDone: rec.onDone}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", addr)})
		c := httpClient(t)
		for range 5 {
			resp, err := c.Get("http://" + proxyAddr + "/fast")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			rec.next(t, 2*time.Second)
		}
		conn, err := net.Dial("tcp", proxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		fmt.Fprint(conn, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
		time.Sleep(3 * watchDelay)
		resetClose(t, conn)
		if d := rec.next(t, 3*time.Second); d.status != StatusClientClosedRequest {
			t.Errorf("OnDone(status %d), want 499", d.status)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("the hang-up was noticed after %v, not while the upstream was silent", el)
		}
	})

	t.Run("hang up before the watcher starts", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
		resetClose(t, c)
		if d := rec.next(t, 3*time.Second); d.status != StatusClientClosedRequest {
			t.Errorf("OnDone(status %d), want 499", d.status)
		}
	})

	t.Run("half-close while waiting is answered", func(t *testing.T) {
		addr := rawBackend(t, func(req *http.Request, w *bufio.Writer) {
			time.Sleep(4 * watchDelay)
			fmt.Fprint(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		})
		_, proxyAddr := startProxy(t, Options{}, staticDecider{Rule: "r", Group: "stable", Target: poolOf("stable", addr)})
		c, err := net.Dial("tcp", proxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
		_ = c.(*net.TCPConn).CloseWrite()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("after a half-close: %v, want the answer", err)
		}
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "ok" {
			t.Errorf("after a half-close: %d %q, want 200 ok", resp.StatusCode, b)
		}
	})

	t.Run("upload broken off", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 20000))
		time.Sleep(3 * watchDelay)
		c.Close()
		if d := rec.next(t, 3*time.Second); d.status != StatusClientClosedRequest {
			t.Errorf("OnDone(status %d), want 499", d.status)
		}
	})
}

// TestStaleConnectionRetry: an upstream that closes every connection after
// one response without saying so leaves a dead connection in the pool; the
// next safe request must be sent again on a new one instead of failing.
func TestStaleConnectionRetry(t *testing.T) {
	up := testserve.Conns(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	c := httpClient(t)
	for i := range 5 {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i, resp.StatusCode, body)
		}
		// Give the upstream's close time to land before the next request
		// picks the pooled connection; without the retry this is a 502.
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleCloseFoundBeforePOST: a pooled connection that sat idle for
// longer than peekAfter is peeked before it carries a request, so one the
// upstream closed meanwhile (without saying so) is dropped before anything
// is sent on it, and even a POST, which is never sent twice, goes out on a
// new connection instead of failing.
func TestIdleCloseFoundBeforePOST(t *testing.T) {
	var accepted atomic.Int32
	up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		accepted.Add(1)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		// One answer, then the connection closes without saying so.
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	c := httpClient(t)
	for i := range 4 {
		want := fmt.Sprintf("order-%d", i)
		resp, err := c.Post("http://"+addr+"/", "text/plain", strings.NewReader(want))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("POST %d: %d %q, want 200 %q", i, resp.StatusCode, body, want)
		}
		// Longer than peekAfter: the upstream's close has landed, and
		// the pooled connection is peeked before the next POST.
		time.Sleep(peekAfter + 40*time.Millisecond)
	}
	if n := accepted.Load(); n != 4 {
		t.Errorf("the upstream accepted %d connections, want one per POST (4)", n)
	}
}

// TestUpstreamRestartUnderLoad: an upstream that closes every connection
// at once (a restart) leaves a pool of stale connections that were in use
// a moment ago, too recently to be peeked (peekAfter). A safe request
// whose connection turns out stale is sent again on a peeked one, so it
// skips every other stale connection instead of failing on the second; a
// POST, which is never sent twice, is only sent on a peeked connection.
// The pool may hold more stale connections than a request is sent again
// (maxStaleConns): 20 warm connections, with the next requests sent at
// once or after every connection has sat past peekAfter (an upstream whose
// keep-alive timeout ran out after a burst), are all skipped too.
func TestUpstreamRestartUnderLoad(t *testing.T) {
	for _, tt := range []struct {
		warm int
		wait time.Duration
	}{{4, 0}, {20, 0}, {20, 3 * peekAfter}} {
		for _, method := range []string{"GET", "POST"} {
			t.Run(fmt.Sprintf("%s/warm=%d/wait=%v", method, tt.warm, tt.wait), func(t *testing.T) {
				testUpstreamRestart(t, method, tt.warm, tt.wait)
			})
		}
	}
}

func testUpstreamRestart(t *testing.T, method string, warm int, wait time.Duration) {
	var (
		mu      sync.Mutex
		conns   []net.Conn
		arrived = make(chan struct{}, warm)
		release = make(chan struct{})
	)
	up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(req.Body)
			switch req.URL.Path {
			case "/warm":
				arrived <- struct{}{}
				<-release
			case "/restart":
				// Close every other connection without saying so,
				// then answer on this one and close it too. On
				// loopback the closes have landed by the time the
				// answer has.
				mu.Lock()
				for _, cc := range conns {
					if cc != c {
						cc.Close()
					}
				}
				conns = nil
				mu.Unlock()
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 7\r\n\r\nrestart")
				return
			}
			answer := req.Method + " " + req.URL.Path + " " + string(body)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		}
	})
	_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	c := httpClient(t)
	do := func(method, path, body string) (int, string) {
		return fetch(t, c, method, "http://"+addr+path, body)
	}
	// Four connections in the pool, released together.
	var wg sync.WaitGroup
	for range warm {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do("GET", "/warm", "")
		}()
	}
	for range warm {
		<-arrived
	}
	close(release)
	wg.Wait()
	if code, _ := do("GET", "/restart", ""); code != 200 {
		t.Fatalf("GET /restart: %d", code)
	}
	time.Sleep(wait)
	body := ""
	if method == "POST" {
		body = "order"
	}
	want := method + " /next " + body
	for i := range 3 {
		if code, got := do(method, "/next", body); code != 200 || got != want {
			t.Fatalf("%s %d after the restart: %d %q, want 200 %q", method, i, code, got, want)
		}
	}
}

// TestShutdownInFlight: Shutdown lets a request in flight finish.
func TestShutdownInFlight(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		fmt.Fprint(w, "done")
	}))
	defer backend.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{}, staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))}, nil)
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()

	got := make(chan string, 1)
	go func() {
		resp, err := httpClient(t).Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the backend")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(ctx) }()
	time.Sleep(50 * time.Millisecond) // let Shutdown start waiting; the test holds either way
	close(release)
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if b := <-got; b != "done" {
		t.Errorf("in-flight request got %q, want done", b)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestShutdownWithoutServe(t *testing.T) {
	var out syncBuffer
	p := New(Options{AccessLog: &out}, staticDecider{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

// TestErrorBodyWithIssuedCookie: an error answer that also issues an
// anonymous id cookie keeps its body intact (both are built in the
// exchange's scratch buffer).
func TestErrorBodyWithIssuedCookie(t *testing.T) {
	dead := testport.Refused(t)
	_, addr := startProxy(t, Options{}, staticDecider{
		Rule: "r", Group: "stable", Target: poolOf("stable", dead),
		Identity: identity.ID{Value: "anon-0123456789abcdef", Source: identity.SourceAnonymousCookie, Issued: true, Cookie: "gg_uid"},
	})
	resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if want := "graygate: upstream \"stable\" unreachable\n"; resp.StatusCode != 502 || errBody(t, resp, body) != want {
		t.Errorf("got %d %q, want 502 %q", resp.StatusCode, body, want)
	}
	if c := resp.Header.Get("Set-Cookie"); !strings.HasPrefix(c, "gg_uid=anon-0123456789abcdef;") {
		t.Errorf("Set-Cookie %q, want the issued id", c)
	}
}
