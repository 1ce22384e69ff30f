package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// stallBackend is an upstream whose behaviour a test scripts on the raw
// connection: serve gets each accepted connection and its reader.
func stallBackend(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	return testserve.Conns(t, func(c net.Conn) { serve(c, bufio.NewReader(c)) })
}

// stallRig is a gateway with short timeouts in front of one gray target
// guarded by a breaker and a concurrency gate, logging to a buffer.
type stallRig struct {
	addr string
	gate *limit.Gate
	b    *breaker.Breaker
	log  *syncBuffer
	p    *Proxy
}

// lines decodes the JSON lines written so far.
func (s *syncBuffer) lines() []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func newStallRig(t *testing.T, upstreamAddr string, opts Options) *stallRig {
	t.Helper()
	return newStallRigFor(t, poolOf("gray", upstreamAddr), opts)
}

// newStallRigFor is newStallRig for the gray pool given (of any protocol),
// which it gives the gate.
func newStallRigFor(t *testing.T, pool *upstream.Pool, opts Options) *stallRig {
	t.Helper()
	return newStallRigOn(t, pool, opts, listener.Protocols{})
}

// newStallRigOn is newStallRigFor with the listener's protocols given.
func newStallRigOn(t *testing.T, pool *upstream.Pool, opts Options, prot listener.Protocols) *stallRig {
	t.Helper()
	b, err := breaker.New(breaker.Config{}, breaker.Options{Name: "r1/gray"})
	if err != nil {
		t.Fatal(err)
	}
	pool.Gate = limit.NewSet(nil).Gate("gray", 10)
	r := &stallRig{gate: pool.Gate, b: b, log: &syncBuffer{}}
	opts.AccessLog = r.log
	opts.AccessLogFlushInterval = 10 * time.Millisecond
	if prot.TLS == nil && !prot.H2C {
		r.p, r.addr = startProxy(t, opts, &grayRoute{gray: pool, b: b})
	} else {
		r.p, r.addr = startProxyWith(t, opts, &grayRoute{gray: pool, b: b}, prot)
	}
	return r
}

// settle waits until the slot is free, no goroutine is left in the
// proxy's code (busyGoroutines; fasthttp keeps idle workers of its own
// for a while, so the total is not a measure), and the access log has a
// line whose timeout is want ("": none fired); it returns that line.
func (r *stallRig) settle(t *testing.T, want string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var line map[string]any
		for _, l := range r.log.lines() {
			if got, _ := l["timeout"].(string); got == want {
				line = l
			}
		}
		busy := busyGoroutines()
		if line != nil && r.gate.InFlight() == 0 && len(busy) == 0 {
			return line
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the stall: access log line with timeout %q: %v; slot in flight %d; goroutines still in the proxy: %d\n%s\nlog: %v",
				want, line != nil, r.gate.InFlight(), len(busy), strings.Join(busy, "\n\n"), r.log.lines())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// busyGoroutines returns the stacks of goroutines that are inside the
// proxy's own (non-test) code, other than its long-lived helpers and the
// read loops of the http1 Transport's pooled connections (which read
// through headConn while idle).
func busyGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "graygate/internal/proxy.") ||
			strings.Contains(g, "sweepClients") || strings.Contains(g, "asyncWriter).run") || strings.Contains(g, "degradeLog).run") ||
			strings.Contains(g, "fasthttp.(*Server).Serve(") || strings.Contains(g, "net/http.(*persistConn).readLoop(") {
			continue
		}
		inCode := false
		for _, line := range strings.Split(g, "\n") {
			if strings.Contains(line, "/internal/proxy/") && !strings.Contains(line, "_test.go") {
				inCode = true
			}
		}
		if inCode {
			out = append(out, g)
		}
	}
	return out
}

// failures reads the breaker's failure count.
func (r *stallRig) failures() uint64 { return r.b.Snapshot().Window.Failures }

const shortTimeout = 300 * time.Millisecond

// stallingUpstream is an upstream that answers a request with part and
// then sends nothing more; closed is closed once the gateway has closed
// the connection.
func stallingUpstream(t *testing.T, part string) (addr string, closed <-chan struct{}) {
	c := make(chan struct{})
	addr = stallBackend(t, func(conn net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(conn, part)
		_, _ = io.Copy(io.Discard, conn) // until the gateway gives up on us
		close(c)
	})
	return addr, c
}

// TestStallsAreBounded stalls each side of a request, in each direction,
// on a real socket, and checks that the timeout named in proxy's config
// fires: the connection involved is closed, the concurrency slot and the
// goroutines come back, an upstream stall counts as a breaker failure,
// and the access log says which timeout fired.
func TestStallsAreBounded(t *testing.T) {
	opts := Options{
		UpstreamReadTimeout: shortTimeout, UpstreamWriteTimeout: shortTimeout,
		ReadTimeout: shortTimeout, WriteTimeout: shortTimeout, IdleTimeout: shortTimeout,
		ResponseHeaderTimeout: 5 * time.Second,
	}

	// stopsMidBody: the upstream sends part (a header and some body) and
	// then nothing; the client gets the body it was sent and then a cut
	// off, the stalled connection is closed, the access log says
	// read_timeout and the breaker counts a failure.
	stopsMidBody := func(t *testing.T, part string) (body []byte, err error) {
		t.Helper()
		up, upClosed := stallingUpstream(t, part)
		return newStallRig(t, up, opts).stoppedMidBody(t, upClosed)
	}

	t.Run("read_timeout: upstream stops mid-body", func(t *testing.T) {
		body, err := stopsMidBody(t, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 30000))
		if n := len(body); err == nil || n >= 100000 {
			t.Errorf("client read %d bytes, %v; want the body cut off", n, err)
		}
	})

	t.Run("read_timeout: upstream stops within a trailer section with a forbidden field", func(t *testing.T) {
		// fasthttp ends the section at a bare LF line, and refuses it;
		// skipTrailerSection then waits for the CRLF CRLF net/http's
		// client requires, under the same read timeout as the body.
		body, err := stopsMidBody(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nContent-Length: 9\n\n")
		if err == nil || string(body) != "ok" {
			t.Errorf("client read %q, %v; want \"ok\" and the body cut off", body, err)
		}
	})

	t.Run("read_timeout: upstream stops within a small body", func(t *testing.T) {
		// A body small enough to be copied, not streamed: the client has
		// been sent nothing when it stalls, so it gets a 504.
		up, upClosed := stallingUpstream(t, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
		r := newStallRig(t, up, opts)
		c := dialRaw(t, r.addr)
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("status %d, X-Request-Id %q, body %q; want 504 with a request id", resp.StatusCode, resp.Header.Get("X-Request-Id"), body)
		}
		select {
		case <-upClosed:
		case <-time.After(5 * time.Second):
			t.Error("the gateway kept the stalled upstream connection open")
		}
		line := r.settle(t, "read_timeout")
		if line["status"] != float64(504) {
			t.Errorf("logged status %v, want 504", line["status"])
		}
		if f := r.failures(); f != 1 {
			t.Errorf("breaker failures = %d, want 1", f)
		}
	})

	t.Run("write_timeout: upstream stops reading an upload", func(t *testing.T) {
		upClosed, answered := make(chan struct{}), make(chan struct{})
		up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			// Read none of the body until the client has its answer; then
			// the connection must have been closed by the gateway: what
			// is buffered drains, and then EOF.
			<-answered
			_, _ = io.Copy(io.Discard, br)
			close(upClosed)
		})
		newStallRig(t, up, opts).stoppedTakingUpload(t, answered, upClosed)
	})

	t.Run("client_read_timeout: client stops sending its body", func(t *testing.T) {
		seen := make(chan struct{}, 1)
		up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			seen <- struct{}{}
			_, _ = io.Copy(io.Discard, req.Body)
		})
		r := newStallRig(t, up, opts)
		c := dialRaw(t, r.addr)
		fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
		_, _ = c.Write(bytes.Repeat([]byte("y"), 80<<10))
		// ...and the rest never comes.
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
			t.Errorf("status %d close %v, want 408 and Connection: close", resp.StatusCode, resp.Close)
		}
		c.Close()
		r.settle(t, "client_read_timeout")
		if f := r.failures(); f != 0 {
			t.Errorf("breaker failures = %d: a slow client is not the upstream's failure", f)
		}
	})

	t.Run("client_write_timeout: client stops reading the response", func(t *testing.T) {
		r := newStallRig(t, endlessBackend(t), opts)
		d := net.Dialer{Control: smallReadBuffer}
		c, err := d.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
		r.stoppedReading(t, c)
	})

	t.Run("client_idle_timeout: keep-alive connection with no next request", func(t *testing.T) {
		backend, _ := echoBackend(t, "gray")
		r := newStallRig(t, addrOf(backend), opts)
		c := dialRaw(t, r.addr)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		closedWhenIdle(t, c)
	})
}

// closedWhenIdle sends a request on c, reads its answer, and then sends
// nothing more: the gateway must close c after about shortTimeout.
func closedWhenIdle(t *testing.T, c net.Conn) {
	t.Helper()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	start := time.Now()
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d, %v; want EOF", n, err)
	}
	if d := time.Since(start); d < shortTimeout/2 || d > 5*time.Second {
		t.Errorf("closed after %v, want about %v", d, shortTimeout)
	}
}

// stoppedMidBody asks for an answer that the upstream stops sending part
// way (and then reads until the gateway closes, closing closed): it
// returns what the client read of the body, which must be cut off; the
// gateway must close the stalled connection, log read_timeout and count
// a breaker failure.
func (r *stallRig) stoppedMidBody(t *testing.T, closed <-chan struct{}) ([]byte, error) {
	t.Helper()
	c := dialRaw(t, r.addr)
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Error("the gateway kept the stalled upstream connection open")
	}
	r.settle(t, "read_timeout")
	if f := r.failures(); f != 1 {
		t.Errorf("breaker failures = %d, want 1", f)
	}
	return body, err
}

// stoppedTakingUpload sends a 64 MiB upload to an upstream that reads
// none of its body until answered is closed (and then reads until the
// gateway closes, closing closed): the client gets 504 once the write
// timeout (shortTimeout) has passed, and not seconds later, the gateway
// closes the stalled connection, logs write_timeout and counts a breaker
// failure.
func (r *stallRig) stoppedTakingUpload(t *testing.T, answered chan<- struct{}, closed <-chan struct{}) {
	t.Helper()
	start := time.Now()
	c := dialRaw(t, r.addr)
	const size = 64 << 20
	go func() {
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", size)
		chunk := bytes.Repeat([]byte("u"), 64<<10)
		for range size / len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("status %d, want 504", resp.StatusCode)
	}
	if d := time.Since(start); d > shortTimeout+2*time.Second {
		t.Errorf("answered after %v, want about %v", d, shortTimeout)
	}
	close(answered)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Error("the gateway kept the stalled upstream connection open")
	}
	c.Close()
	r.settle(t, "write_timeout")
	if f := r.failures(); f != 1 {
		t.Errorf("breaker failures = %d, want 1", f)
	}
}

// endlessBackend answers every request with a chunked body that never
// ends.
func endlessBackend(t *testing.T) string {
	return stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		chunk := append(append([]byte("10000\r\n"), bytes.Repeat([]byte("z"), 0x10000)...), "\r\n"...)
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
}

// stoppedReading checks what follows when a client that asked for
// endlessBackend's answer reads nothing: the gateway's writes fill the
// socket buffers and then wait, client_write_timeout fires and is logged,
// and the gateway closes the connection, so that raw (the client's TCP
// connection), once the buffers drain, reads EOF. The breaker counts no
// failure.
func (r *stallRig) stoppedReading(t *testing.T, raw net.Conn) {
	t.Helper()
	line := r.settle(t, "client_write_timeout")
	if line["status"] != float64(200) {
		t.Errorf("logged status %v, want 200 (the answer had begun)", line["status"])
	}
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, raw); err != nil {
		t.Errorf("draining the connection: %v, want EOF", err)
	}
	if f := r.failures(); f != 0 {
		t.Errorf("breaker failures = %d: a client that stops reading is not the upstream's failure", f)
	}
}

// dialRaw opens a client connection that the test closes.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// TestReconfigureTimeouts: a timeout changed with Reconfigure applies to
// the next request, with no restart.
func TestReconfigureTimeouts(t *testing.T) {
	up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
		time.Sleep(700 * time.Millisecond)
		_, _ = c.Write([]byte("defghij"))
	})
	r := newStallRig(t, up, Options{UpstreamReadTimeout: 5 * time.Second})
	get := func() (string, error) {
		c := dialRaw(t, r.addr)
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if body, err := get(); err != nil || body != "abcdefghij" {
		t.Fatalf("with a 5s read_timeout: %q, %v; want the whole body", body, err)
	}
	if restart := r.p.Reconfigure(Options{UpstreamReadTimeout: 200 * time.Millisecond}); len(restart) != 0 {
		t.Fatalf("Reconfigure says restart required for %v", restart)
	}
	if body, err := get(); err != nil || !strings.Contains(body, "timed out") {
		t.Fatalf("with a 200ms read_timeout: %q, %v; want the gateway's 504", body, err)
	}
	if restart := r.p.Reconfigure(Options{UpstreamReadTimeout: 200 * time.Millisecond, MaxHeaderBytes: 4096}); len(restart) != 1 || restart[0] != "proxy.max_header_bytes" {
		t.Errorf("Reconfigure of max_header_bytes says %v, want [proxy.max_header_bytes]", restart)
	}
}

// smallReadBuffer gives a client socket a small receive buffer before it
// connects, so that a client that reads nothing stalls the gateway's
// writes soon.
func smallReadBuffer(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	})
	if err != nil {
		return err
	}
	return serr
}

// TestHeaderTimeoutStartsWhenSent: ResponseHeaderTimeout counts from when
// the request went upstream, not from when it arrived: a request that
// first waited for a free connection (MaxConnsPerHost) still gets the
// whole timeout for its answer.
func TestHeaderTimeoutStartsWhenSent(t *testing.T) {
	up := stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			// Each answer takes 400 ms: the second request waits that
			// long for the one connection, then as long again for its
			// answer, 800 ms after it arrived.
			time.Sleep(400 * time.Millisecond)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
	opts := Options{MaxConnsPerHost: 1, ResponseHeaderTimeout: 700 * time.Millisecond, DialTimeout: 2 * time.Second}
	_, addr := startProxy(t, opts, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	c := httpClient(t)
	codes := make(chan string, 2)
	for _, path := range []string{"/first", "/second"} {
		go func() {
			resp, err := c.Get("http://" + addr + path)
			if err != nil {
				codes <- fmt.Sprintf("%s: %v", path, err)
				return
			}
			resp.Body.Close()
			codes <- fmt.Sprintf("%s: %d", path, resp.StatusCode)
		}()
		time.Sleep(50 * time.Millisecond) // the first takes the connection
	}
	for range 2 {
		if got := <-codes; !strings.HasSuffix(got, ": 200") {
			t.Errorf("%s, want 200 (each answer came within the header timeout of its request being sent)", got)
		}
	}
}

// partsBackend is an upstream that answers each request on a connection
// with the parts listed for its path, gap apart; then after(path) says
// whether the connection goes on (false closes it). Each accepted
// connection is noted on conns, when given.
func partsBackend(t *testing.T, parts map[string][]string, gap time.Duration, conns chan<- struct{}, after func(path string) bool) string {
	return partsBackendClosing(t, parts, gap, conns, nil, after)
}

// partsBackendClosing is partsBackend that also counts, in closed, the
// connections the gateway closed (a read of the next request that fails).
func partsBackendClosing(t *testing.T, parts map[string][]string, gap time.Duration, conns chan<- struct{}, closed *atomic.Int64, after func(path string) bool) string {
	return stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		if conns != nil {
			conns <- struct{}{}
		}
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				if closed != nil {
					closed.Add(1)
				}
				return
			}
			for i, p := range parts[req.URL.Path] {
				if i > 0 {
					time.Sleep(gap)
				}
				if _, err := io.WriteString(c, p); err != nil {
					return
				}
			}
			if !after(req.URL.Path) {
				return
			}
		}
	})
}

// TestResponseHeaderInParts: the response header timeout bounds the whole
// header, however it is split. A header whose first bytes come at once and
// the rest a while later (a status line flushed early, a large header over
// a slow link, an interim response and then the final one) is waited for
// up to ResponseHeaderTimeout, not cut at the first wait's end (watchDelay);
// a header that stops in the middle gets 504 after the timeout, and one
// whose upstream closes in the middle gets 502.
func TestResponseHeaderInParts(t *testing.T) {
	const gap, timeout = 3 * watchDelay, 12 * watchDelay
	final := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	parts := map[string][]string{
		"/status-line":   {"HTTP/1.1 200 OK\r\n", final[len("HTTP/1.1 200 OK\r\n"):]},
		"/mid-field":     {final[:25], final[25:]},
		"/continue":      {"HTTP/1.1 100 Continue\r\n\r\n", final},
		"/early-hints":   {"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", final},
		"/two-gaps":      {final[:10], final[10:30], final[30:]},
		"/stop-then-eof": {"HTTP/1.1 200 OK\r\nContent-Le"},
		"/stop":          {"HTTP/1.1 200 OK\r\nContent-Le"},
	}
	up := partsBackend(t, parts, gap, nil, func(path string) bool {
		switch path {
		case "/stop-then-eof":
			time.Sleep(gap)
			return false
		case "/stop":
			time.Sleep(2 * timeout) // silent past the header timeout
			return false
		}
		return true
	})
	_, addr := startProxy(t, Options{ResponseHeaderTimeout: timeout}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	for _, tt := range []struct {
		path string
		code int
		body string
	}{
		{"/status-line", 200, "ok"},
		{"/mid-field", 200, "ok"},
		{"/continue", 200, "ok"},
		{"/early-hints", 200, "ok"},
		{"/two-gaps", 200, "ok"},
		{"/stop-then-eof", 502, ""},
		{"/stop", 504, ""},
	} {
		t.Run(tt.path[1:], func(t *testing.T) {
			start := time.Now()
			resp, body := rawExchange(t, addr, "GET", "GET "+tt.path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			took := time.Since(start)
			if resp.StatusCode != tt.code || (tt.code == 200 && body != tt.body) {
				t.Errorf("%d %q after %v, want %d %q", resp.StatusCode, body, took, tt.code, tt.body)
			}
			if tt.code == 504 && took < timeout {
				t.Errorf("504 after %v, before the %v header timeout", took, timeout)
			}
		})
	}
}

// TestSmallBodyInParts: a response body small enough to be copied rather
// than streamed (at most maxInlineBody) that does not come with its header
// is read to its end before the answer goes out, each read bounded by the
// read timeout. One that comes in parts is relayed whole, on a connection
// that is then reused; one whose upstream closes within it gets a 502 with
// a request id, not an empty reply (the client was sent nothing yet). A
// longer body, which streams, is waited for the same way up to its first
// bytes: split from its header by a pause, or itself in parts, it is
// relayed whole on the same connection.
func TestSmallBodyInParts(t *testing.T) {
	const gap = 3 * watchDelay
	body := strings.Repeat("b", 5000)
	large := strings.Repeat("l", 3*maxInlineBody)
	largeHead := "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(large)) + "\r\n\r\n"
	parts := map[string][]string{
		"/body-later":    {"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", body},
		"/body-parts":    {"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + body[:10], body[10:3000], body[3000:]},
		"/large-later":   {largeHead, large},
		"/large-parts":   {largeHead, large[:1], large[1:30000], large[30000:]},
		"/body-then-eof": {"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + body[:10]},
		"/no-body-yet":   {"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"},
	}
	conns := make(chan struct{}, 16)
	up := partsBackend(t, parts, gap, conns, func(path string) bool {
		if path == "/body-then-eof" || path == "/no-body-yet" {
			time.Sleep(gap)
			return false // closes the connection
		}
		return true
	})
	_, addr := startProxy(t, Options{UpstreamReadTimeout: 5 * time.Second}, staticDecider{Group: "stable", Target: poolOf("stable", up)})
	for _, tt := range []struct {
		path      string
		code      int
		body      string
		upstreams int // connections the upstream has accepted by the end
	}{
		{"/body-later", 200, body, 1},
		{"/body-parts", 200, body, 1}, // on the same upstream connection
		{"/large-later", 200, large, 1},
		{"/large-parts", 200, large, 1},
		{"/body-then-eof", 502, "", 1},
		{"/no-body-yet", 502, "", 2},
	} {
		t.Run(tt.path[1:], func(t *testing.T) {
			resp, got := rawExchange(t, addr, "GET", "GET "+tt.path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != tt.code || (tt.code == 200 && got != tt.body) {
				t.Errorf("%d with %d bytes %.40q, want %d with %d bytes", resp.StatusCode, len(got), got, tt.code, len(tt.body))
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
			if tt.code != 200 && strings.Contains(got, "127.0.0.1") {
				t.Errorf("error body %q names the instance", got)
			}
			if n := len(conns); n != tt.upstreams {
				t.Errorf("the upstream accepted %d connections by now, want %d", n, tt.upstreams)
			}
		})
	}
}

// TestBodyBreaksOff: an upstream whose answer ends before its
// Content-Length (an http1 upstream closes its connection, an h2c one
// resets its stream), or stalls within it, or ends a chunked body without
// its last chunk. A small body is read whole before the client is
// answered, on either pool, so the client gets the gateway's 502 (504 for
// the stall) with its request id and no instance address, rather than
// nothing; a large or chunked one streams, so the client gets its header
// and then, on a closed connection, every byte of the body the upstream
// sent before the break (relayed): none is lost in a write buffer. Either
// way the breaker counts a failure, and the access log has the status the
// client got (and the timeout that fired).
func TestBodyBreaksOff(t *testing.T) {
	// The answer to /?size=n (chunked without it; stall: no end) is n/3
	// bytes of its body, or 10 bytes of a chunked one, then the break.
	h1, h2c := breakingBackends(t)
	for _, tt := range []struct {
		name, query string
		status      int
		timeout     string
		relayed     int // body bytes the client gets, on a 200
	}{
		{"small body broken off", "size=100", http.StatusBadGateway, "", 0},
		{"small body stalled", "size=100&stall", http.StatusGatewayTimeout, "read_timeout", 0},
		// 33,333 bytes: eight times fasthttp's 4 KiB write buffer and
		// 565 bytes, which used to be lost in it.
		{"large body broken off", "size=100000", http.StatusOK, "", 33333},
		// Before any byte of a longer body, the client has been sent
		// nothing either (fasthttp holds the header with the body's
		// first bytes), and gets the error answer, where it got none.
		{"large body broken off before its first byte", "size=100000&sent=0", http.StatusBadGateway, "", 0},
		{"large body stalled before its first byte", "size=100000&sent=0&stall", http.StatusGatewayTimeout, "read_timeout", 0},
		// After a few bytes, the header goes out, and the cut body; the
		// client got no answer at all.
		{"large body broken off early", "size=100000&sent=100", http.StatusOK, "", 100},
		{"chunked body broken off", "", http.StatusOK, "", 10},
		// A streamed body that stalls is bounded by read_timeout too.
		{"large body stalled", "size=100000&stall", http.StatusOK, "read_timeout", 33333},
		{"chunked body stalled", "stall", http.StatusOK, "read_timeout", 10},
	} {
		for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
			t.Run(tt.name+"/"+proto.String(), func(t *testing.T) {
				addr := h1
				if proto == upstream.H2C {
					addr = addrOf(h2c)
				}
				pool := poolOf("gray", addr)
				pool.Protocol = proto
				r := newStallRigFor(t, pool, Options{UpstreamReadTimeout: shortTimeout, ResponseHeaderTimeout: 5 * time.Second})
				c := dialRaw(t, r.addr)
				fmt.Fprintf(c, "GET /?%s HTTP/1.1\r\nHost: a\r\n\r\n", tt.query)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("reading the answer: %v", err)
				}
				body, berr := io.ReadAll(resp.Body)
				id := resp.Header.Get("X-Request-Id")
				switch {
				case resp.StatusCode != tt.status:
					t.Fatalf("status %d, body %q; want %d", resp.StatusCode, body, tt.status)
				case tt.status == http.StatusOK && (berr == nil || len(body) != tt.relayed):
					t.Errorf("client read %d bytes, %v; want the %d bytes sent, cut off", len(body), berr, tt.relayed)
				case tt.status != http.StatusOK && (id == "" || !strings.Contains(string(body), id) || strings.Contains(string(body), addr)):
					t.Errorf("error answer with X-Request-Id %q, body %q; want the id in the body and no instance address", id, body)
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

// breakingBackends starts an http1 and an h2c upstream whose answer to
// /?size=n promises n bytes (Content-Length) and sends n/3 of them (with
// sent=m, m of them); without size, a chunked body's first chunk. Then the answer breaks off (the
// http1 upstream closes its connection, the h2c one resets its stream),
// or with stall, stops until the gateway gives up.
func breakingBackends(t *testing.T) (h1 string, h2c *httptest.Server) {
	t.Helper()
	h1 = stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		q := req.URL.Query()
		if size, err := strconv.Atoi(q.Get("size")); err == nil {
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", size, bytes.Repeat([]byte("x"), sent(q, size)))
		} else {
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nxxxxxxxxxx\r\n")
		}
		if q.Has("stall") {
			_, _ = io.Copy(io.Discard, c) // until the gateway gives up
		}
	})
	h2c = h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		part := []byte("xxxxxxxxxx")
		if size, err := strconv.Atoi(q.Get("size")); err == nil {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			part = bytes.Repeat([]byte("x"), sent(q, size))
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(part)
		w.(http.Flusher).Flush()
		if q.Has("stall") {
			<-r.Context().Done()
			return
		}
		panic(http.ErrAbortHandler)
	}))
	return h1, h2c
}

// pausingBackend starts an upstream of protocol proto whose answer
// promises size bytes (Content-Length), sends the first of them, and
// sends the rest once release is closed.
func pausingBackend(t *testing.T, proto upstream.Protocol, size, first int, release <-chan struct{}) string {
	t.Helper()
	if proto == upstream.H2C {
		return addrOf(h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = w.Write(bytes.Repeat([]byte("a"), first))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			_, _ = w.Write(bytes.Repeat([]byte("b"), size-first))
		})))
	}
	return stallBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", size, bytes.Repeat([]byte("a"), first))
		<-release
		_, _ = c.Write(bytes.Repeat([]byte("b"), size-first))
	})
}

// TestLongBodyRelayedAsItArrives: the first bytes of a long body with a
// Content-Length reach the client while the upstream pauses before the
// rest, from either pool and to an HTTP/1.1 or an HTTP/2 client, not only
// once 4 KiB of it have come (they used to wait in fasthttp's write
// buffer, and in x/net/http2's); then the whole body arrives on the same
// answer.
func TestLongBodyRelayedAsItArrives(t *testing.T) {
	const size, first = 100000, 100
	for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
		for _, client := range []string{"HTTP/1.1", "h2c"} {
			t.Run(proto.String()+" pool to "+client, func(t *testing.T) {
				release := make(chan struct{})
				var once sync.Once
				letGo := func() { once.Do(func() { close(release) }) }
				t.Cleanup(letGo)
				pool := poolOf("gray", pausingBackend(t, proto, size, first, release))
				pool.Protocol = proto
				var body io.Reader
				var settle func()
				if client == "h2c" {
					d := deciderFunc(func(attr.Request) router.Decision {
						return router.Decision{Rule: "r", Group: "gray", Target: pool}
					})
					_, gw := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+gw+"/", nil)
					hc := h2cClient(t)
					type answer struct {
						resp *http.Response
						err  error
					}
					answers := make(chan answer, 1)
					go func() {
						resp, err := hc.Do(req)
						answers <- answer{resp, err}
					}()
					var a answer
					select {
					case a = <-answers:
					case <-time.After(3 * time.Second):
						a.err = errors.New("no header within 3 s")
					}
					if a.err != nil {
						letGo() // the gateway's cleanup waits for the exchange
						t.Fatalf("the header while the upstream pauses: %v", a.err)
					}
					defer a.resp.Body.Close()
					body, settle = a.resp.Body, func() {}
				} else {
					r := newStallRigFor(t, pool, Options{})
					c := dialRaw(t, r.addr)
					fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						letGo()
						t.Fatalf("reading the header while the upstream pauses: %v", err)
					}
					body, settle = resp.Body, func() { r.settle(t, "") }
				}
				got := make(chan error, 1)
				buf := make([]byte, first)
				go func() { _, err := io.ReadFull(body, buf); got <- err }()
				select {
				case err := <-got:
					if err != nil {
						letGo()
						t.Fatalf("reading the %d bytes the upstream sent before its pause: %v", first, err)
					}
				case <-time.After(3 * time.Second):
					letGo()
					t.Fatalf("the %d bytes the upstream sent before its pause did not arrive within 3 s", first)
				}
				letGo()
				rest, err := io.ReadAll(body)
				if err != nil || first+len(rest) != size || string(buf) != strings.Repeat("a", first) {
					t.Fatalf("body %d bytes, %v; want %d", first+len(rest), err, size)
				}
				settle()
			})
		}
	}
}

// TestAbortAfterLastByteKeepsConnection: an h2c upstream that resets its
// stream right after the last byte its Content-Length announced has
// answered in full. The HTTP/1.1 client gets the whole body, and its
// keep-alive connection stays open for the next request. (fasthttp reads
// once past the length, to check for an overrun; that read's failure
// closed the client's connection after the complete answer, and the
// client's next request there was reset. Before the bytes went out as
// they came, the answer's last part was lost in the write buffer instead,
// unless the body was a multiple of 4 KiB.)
func TestAbortAfterLastByteKeepsConnection(t *testing.T) {
	const size = 20000 // over maxInlineBody: streamed
	srv := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(bytes.Repeat([]byte("a"), size))
		w.(http.Flusher).Flush()
		time.Sleep(10 * time.Millisecond) // the last byte is with the gateway first
		panic(http.ErrAbortHandler)
	}))
	pool := poolOf("gray", addrOf(srv))
	pool.Protocol = upstream.H2C
	r := newStallRigFor(t, pool, Options{})
	c := dialRaw(t, r.addr)
	br := bufio.NewReader(c)
	for i := range 3 {
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on the connection: %v", i+1, err)
		}
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || err != nil || len(body) != size || resp.Close {
			t.Fatalf("request %d: %d with %d bytes, %v (close %v); want 200 with %d, kept open", i+1, resp.StatusCode, len(body), err, resp.Close, size)
		}
	}
	line := r.settle(t, "")
	if line["status"] != float64(http.StatusOK) || line["error"] != nil {
		t.Errorf("access log line %v; want a 200 without an error", line)
	}
}

// sent is how many bytes of a body of size bytes a breaking backend sends.
func sent(q url.Values, size int) int {
	if n, err := strconv.Atoi(q.Get("sent")); err == nil {
		return n
	}
	return size / 3
}
