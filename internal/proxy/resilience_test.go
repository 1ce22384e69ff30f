package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/testserve"
	"github.com/graygate/graygate/internal/upstream"
)

// fakeClock is a clock the test moves by hand, shared by a breaker and the
// proxy (Options.Now), as the gateway shares its clock.
type fakeClock struct{ ns atomic.Int64 }

var fakeEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) Now() time.Time          { return fakeEpoch.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newBreaker(t testing.TB, clk *fakeClock, cfg breaker.Config) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(cfg, breaker.Options{Name: "r1/gray", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// grayRoute decides as the router does for one gray rule: the gray target
// (tag v2), guarded by its breaker if any, which the proxy asks
// (Decision.Guard) after its own limits; stable's tag is v1.
type grayRoute struct {
	gray, stable *upstream.Pool
	b            *breaker.Breaker
	pol          *router.Policy
}

func (g *grayRoute) DecideInto(_ attr.Request, d *router.Decision) {
	*d = router.Decision{
		Rule: "r1", Group: router.GroupGray, Tag: "v2", Target: g.gray, Stable: g.stable, StableTag: "v1", Policy: g.pol,
		Breaker: g.b, Identity: identity.ID{Value: "u1", Source: "header:X-User-Id"},
	}
}

// resetBackend reads each request (all of it if readBody) and then resets
// the connection without answering. It counts the requests it saw.
func resetBackend(t *testing.T, readBody bool) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	addr := testserve.Conns(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err == nil {
			n.Add(1)
			if readBody {
				_, _ = io.Copy(io.Discard, req.Body)
			}
		}
		_ = c.(*net.TCPConn).SetLinger(0) // close with RST
		_ = c.Close()
	})
	return addr, &n
}

// statusBackend answers every request with status (and its name as body);
// before answering it runs before, if set.
func statusBackend(t *testing.T, status int, before func()) string {
	return rawBackend(t, func(req *http.Request, w *bufio.Writer) {
		if before != nil {
			before()
		}
		fmt.Fprintf(w, "HTTP/1.1 %d X\r\nContent-Length: 4\r\n\r\ngray", status)
	})
}

// TestBreakerOutcome checks that every request the router let through to a
// breaker-guarded target is recorded exactly once, with the right
// classification and latency, and that requests the gateway refused before
// contacting the target are not.
func TestBreakerOutcome(t *testing.T) {
	tests := []struct {
		name string
		// gray returns the gray target's address; clk lets a backend move
		// the shared clock while it "works".
		gray         func(t *testing.T, clk *fakeClock) string
		stable       bool
		pol          *router.Policy
		requests     int
		hangUp       bool // the client leaves before the answer
		wantStatus   int
		wantRequests uint64
		wantFailures uint64
		wantSlow     uint64
	}{
		{
			name:     "500 is a failure",
			gray:     func(t *testing.T, _ *fakeClock) string { return statusBackend(t, 500, nil) },
			requests: 3, wantStatus: 500, wantRequests: 3, wantFailures: 3,
		},
		{
			name:     "200 is a success",
			gray:     func(t *testing.T, _ *fakeClock) string { return statusBackend(t, 200, nil) },
			requests: 3, wantStatus: 200, wantRequests: 3,
		},
		{
			name:     "404 is not an error status",
			gray:     func(t *testing.T, _ *fakeClock) string { return statusBackend(t, 404, nil) },
			requests: 1, wantStatus: 404, wantRequests: 1,
		},
		{
			name: "latency runs from sending to the response header",
			gray: func(t *testing.T, clk *fakeClock) string {
				return statusBackend(t, 200, func() { clk.Advance(700 * time.Millisecond) })
			},
			requests: 1, wantStatus: 200, wantRequests: 1, wantSlow: 1,
		},
		{
			name:     "connection refused is a failure",
			gray:     func(t *testing.T, _ *fakeClock) string { return testport.Refused(t) },
			requests: 2, wantStatus: 502, wantRequests: 2, wantFailures: 2,
		},
		{
			name:     "connection refused with a fallback is still the gray target's failure",
			gray:     func(t *testing.T, _ *fakeClock) string { return testport.Refused(t) },
			stable:   true,
			requests: 2, wantStatus: 200, wantRequests: 2, wantFailures: 2,
		},
		{
			name: "a client that leaves is not a failure",
			gray: func(t *testing.T, _ *fakeClock) string {
				addr, _, _ := stuckBackend(t)
				return addr
			},
			requests: 1, hangUp: true, wantStatus: StatusClientClosedRequest, wantRequests: 1,
		},
		{
			name: "a rate-limited request is not recorded",
			gray: func(t *testing.T, _ *fakeClock) string { return statusBackend(t, 500, nil) },
			// 1 token, refilled every 1000s of the fake clock.
			pol:      &router.Policy{Limiter: newLimiter(0.001, 1, nil)},
			requests: 3, wantStatus: 429, wantRequests: 1, wantFailures: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{}
			b := newBreaker(t, clk, breaker.Config{})
			route := &grayRoute{gray: poolOf("gray", tt.gray(t, clk)), b: b, pol: tt.pol}
			if tt.stable {
				srv, _ := echoBackend(t, "stable")
				route.stable = poolOf("stable", addrOf(srv))
			}
			rec := newDoneRecorder()
			_, addr := startProxy(t, Options{Now: clk.Now, OnDone: rec.onDone}, route)
			var last doneCall
			for range tt.requests {
				if tt.hangUp {
					hangUpAfter(t, addr, 3*watchDelay)
				} else {
					rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				}
				last = rec.next(t, 5*time.Second)
			}
			if last.status != tt.wantStatus {
				t.Errorf("last request: status %d, want %d", last.status, tt.wantStatus)
			}
			w := b.Snapshot().Window
			if w.Requests != tt.wantRequests || w.Failures != tt.wantFailures || w.Slow != tt.wantSlow {
				t.Errorf("breaker window: %d requests, %d failures, %d slow; want %d, %d, %d",
					w.Requests, w.Failures, w.Slow, tt.wantRequests, tt.wantFailures, tt.wantSlow)
			}
		})
	}
}

// hangUpAfter sends a GET and closes the connection after d without
// reading the answer.
func hangUpAfter(t *testing.T, addr string, d time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(d) // the client's patience, not a synchronisation
	resetClose(t, c)
}

// TestBreakerTripAndRecover drives a breaker through the data plane: gray
// failures open it (the router then degrades to stable), and after
// open_for the probes, whose tickets the proxy must hand back unchanged,
// close it again.
func TestBreakerTripAndRecover(t *testing.T) {
	clk := &fakeClock{}
	b := newBreaker(t, clk, breaker.Config{MinRequests: 4, OpenFor: breaker.Duration(10 * time.Second), HalfOpenProbes: 2})
	var failing atomic.Bool
	failing.Store(true)
	gray := rawBackend(t, func(req *http.Request, w *bufio.Writer) {
		status := 200
		if failing.Load() {
			status = 503
		}
		fmt.Fprintf(w, "HTTP/1.1 %d X\r\nX-Backend: gray\r\nContent-Length: 0\r\n\r\n", status)
	})
	stable, _ := echoBackend(t, "stable")
	route := &grayRoute{gray: poolOf("gray", gray), stable: poolOf("stable", addrOf(stable)), b: b}
	_, addr := startProxy(t, Options{Now: clk.Now}, route)
	get := func() *http.Response {
		resp, _ := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		return resp
	}
	for range 4 {
		if resp := get(); resp.StatusCode != 503 {
			t.Fatalf("gray answered %d, want its 503 relayed", resp.StatusCode)
		}
	}
	if st := b.State(); st != breaker.Open {
		t.Fatalf("after 4 failures the breaker is %v, want open", st)
	}
	resp := get()
	if resp.Header.Get("X-Backend") != "stable" || resp.Header.Get("X-Gray-Degraded") != "breaker" {
		t.Errorf("with the breaker open: backend %q, X-Gray-Degraded %q; want stable, breaker",
			resp.Header.Get("X-Backend"), resp.Header.Get("X-Gray-Degraded"))
	}
	failing.Store(false)
	clk.Advance(10 * time.Second)
	for i := range 2 {
		if resp := get(); resp.Header.Get("X-Backend") != "gray" || resp.StatusCode != 200 {
			t.Fatalf("probe %d: %d from %q, want 200 from gray", i, resp.StatusCode, resp.Header.Get("X-Backend"))
		}
	}
	if st := b.State(); st != breaker.Closed {
		t.Errorf("after 2 successful probes the breaker is %v, want closed", st)
	}
}

// TestFallback: a gray target that fails before answering is replaced by
// stable when the request can be sent again, and only then.
func TestFallback(t *testing.T) {
	small := strings.Repeat("0123456789abcdef", 640) // 10 KiB
	large := strings.Repeat("x", 100<<10)            // over the 64 KiB default
	type grayKind int
	const (
		closedPort grayKind = iota
		resetAfterRequest
		resetAfterBody
		stuck
	)
	tests := []struct {
		name                 string
		gray                 grayKind
		method               string
		body                 string
		chunked              bool
		pol                  *router.Policy
		noStable, stableDown bool
		wantStatus           int
		wantFallback         bool
	}{
		{name: "GET, gray port closed", gray: closedPort, method: "GET", wantStatus: 200, wantFallback: true},
		{name: "GET, gray resets the connection", gray: resetAfterRequest, method: "GET", wantStatus: 200, wantFallback: true},
		{
			name: "GET, gray response header timeout", gray: stuck, method: "GET",
			pol: &router.Policy{UpstreamTimeout: 150 * time.Millisecond}, wantStatus: 200, wantFallback: true,
		},
		{name: "HEAD, gray resets the connection", gray: resetAfterRequest, method: "HEAD", wantStatus: 200, wantFallback: true},
		{name: "POST small body, gray port closed", gray: closedPort, method: "POST", body: small, wantStatus: 200, wantFallback: true},
		{name: "POST small chunked body, gray port closed", gray: closedPort, method: "POST", body: small, chunked: true, wantStatus: 200, wantFallback: true},
		{name: "PUT small body replayed after gray read it and reset", gray: resetAfterBody, method: "PUT", body: small, wantStatus: 200, wantFallback: true},
		{name: "PUT small chunked body replayed after gray read it and reset", gray: resetAfterBody, method: "PUT", body: small, chunked: true, wantStatus: 200, wantFallback: true},
		// A body too large to buffer still goes to stable when the gray
		// connection failed: nothing of it was read, so it streams there
		// whole (nginx's proxy_next_upstream error without request
		// buffering does the same).
		{name: "POST large body, gray port closed: not buffered, streamed to stable", gray: closedPort, method: "POST", body: large, wantStatus: 200, wantFallback: true},
		{name: "POST large chunked body, gray port closed: streamed to stable", gray: closedPort, method: "POST", body: large, chunked: true, wantStatus: 200, wantFallback: true},
		{
			name: "POST body over a smaller FallbackBodyBytes, gray port closed: streamed to stable", gray: closedPort, method: "POST", body: small,
			pol: &router.Policy{FallbackBodyBytes: 1 << 10}, wantStatus: 200, wantFallback: true,
		},
		{name: "POST, gray accepted the connection then reset: no retry", gray: resetAfterRequest, method: "POST", body: small, wantStatus: 502},
		{name: "PATCH, gray reset after the body: no retry", gray: resetAfterBody, method: "PATCH", body: small, wantStatus: 502},
		{
			name: "POST, gray response header timeout: no retry", gray: stuck, method: "POST", body: small,
			pol: &router.Policy{UpstreamTimeout: 150 * time.Millisecond}, wantStatus: 504,
		},
		{name: "GET without a stable target", gray: closedPort, method: "GET", noStable: true, wantStatus: 502},
		{name: "GET, stable down too", gray: closedPort, method: "GET", stableDown: true, wantStatus: 502, wantFallback: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{}
			b := newBreaker(t, clk, breaker.Config{})
			var grayAddr string
			var grayGot *atomic.Int64
			switch tt.gray {
			case closedPort:
				grayAddr = testport.Refused(t)
			case resetAfterRequest:
				grayAddr, grayGot = resetBackend(t, false)
			case resetAfterBody:
				grayAddr, grayGot = resetBackend(t, true)
			case stuck:
				grayAddr, _, _ = stuckBackend(t)
			}
			route := &grayRoute{gray: poolOf("gray", grayAddr), b: b, pol: tt.pol}
			stable, stableGot := echoBackend(t, "stable")
			switch {
			case tt.stableDown:
				route.stable = poolOf("stable", testport.Refused(t))
			case !tt.noStable:
				route.stable = poolOf("stable", addrOf(stable))
			}
			rec := newDoneRecorder()
			_, addr := startProxy(t, Options{Now: clk.Now, OnDone: rec.onDone}, route)

			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
				if tt.chunked {
					body = io.MultiReader(body) // unknown length: net/http sends it chunked
				}
			}
			req, err := http.NewRequest(tt.method, "http://"+addr+"/p", body)
			if err != nil {
				t.Fatal(err)
			}
			var resp *http.Response
			var e echo
			if tt.method == "HEAD" {
				if resp, err = httpClient(t).Do(req); err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			} else {
				resp, e = getEcho(t, httpClient(t), req)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			wantGroup, wantDegraded := "gray", ""
			if tt.wantFallback {
				wantGroup, wantDegraded = "stable", "fallback"
			}
			for h, want := range map[string]string{"X-Gray-Rule": "r1", "X-Gray-Group": wantGroup, "X-Gray-Degraded": wantDegraded} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			wantStable := int64(0)
			if tt.wantFallback && !tt.stableDown {
				wantStable = 1
				if tt.method != "HEAD" && (e.Name != "stable" || e.Body != tt.body || e.Method != tt.method) {
					t.Errorf("stable got %s %q (%d bytes) from %q, want %s with the client's %d bytes",
						e.Method, e.Body[:min(len(e.Body), 20)], e.BodyLen, e.Name, tt.method, len(tt.body))
				}
				if got := e.Header.Values("X-Gray-Tag"); tt.method != "HEAD" && (len(got) != 1 || got[0] != "v1") {
					t.Errorf("stable got X-Gray-Tag %q, want the stable target's own tag v1 (never the gray one)", got)
				}
			}
			if n := stableGot.Load(); n != wantStable {
				t.Errorf("stable saw %d requests, want %d", n, wantStable)
			}
			if grayGot != nil && grayGot.Load() != 1 {
				t.Errorf("gray saw %d requests, want 1", grayGot.Load())
			}
			d := rec.next(t, 5*time.Second)
			wantTarget, wantIntended := "gray", ""
			if tt.wantFallback {
				wantTarget, wantIntended = "stable", "gray"
			}
			if d.group != wantGroup || d.degraded != wantDegraded || d.target != wantTarget || d.intended != wantIntended || d.status != tt.wantStatus {
				t.Errorf("OnDone(group %q, degraded %q, target %q, intended %q, status %d), want (%q, %q, %q, %q, %d)",
					d.group, d.degraded, d.target, d.intended, d.status, wantGroup, wantDegraded, wantTarget, wantIntended, tt.wantStatus)
			}
			if w := b.Snapshot().Window; w.Requests != 1 || w.Failures != 1 {
				t.Errorf("breaker window: %d requests, %d failures; want the gray failure recorded once", w.Requests, w.Failures)
			}
		})
	}
}

// TestFallbackNoInstance: a gray pool with no instance falls back for any
// method, since nothing was sent.
func TestFallbackNoInstance(t *testing.T) {
	stable, _ := echoBackend(t, "stable")
	route := &grayRoute{gray: upstream.NewPool("gray", nil), stable: poolOf("stable", addrOf(stable))}
	_, addr := startProxy(t, Options{}, route)
	req, _ := http.NewRequest("POST", "http://"+addr+"/", strings.NewReader("payload"))
	resp, e := getEcho(t, httpClient(t), req)
	if resp.StatusCode != 200 || e.Body != "payload" || resp.Header.Get("X-Gray-Degraded") != "fallback" {
		t.Errorf("got %d %q degraded %q, want 200 payload from stable, fallback", resp.StatusCode, e.Body, resp.Header.Get("X-Gray-Degraded"))
	}
}

// TestFallbackBodyStaysIntact sends bodies around the buffer size, declared
// and chunked, so that every way of reading them is used: buffered and
// replayed, or streamed on after a partial read.
func TestFallbackBodyStaysIntact(t *testing.T) {
	stable, _ := echoBackend(t, "stable")
	gray, _ := echoBackend(t, "gray")
	const limit = 4 << 10
	route := &grayRoute{
		gray: poolOf("gray", addrOf(gray)), stable: poolOf("stable", addrOf(stable)),
		pol: &router.Policy{FallbackBodyBytes: limit},
	}
	_, addr := startProxy(t, Options{}, route)
	c := httpClient(t)
	for _, n := range []int{1, limit - 1, limit, limit + 1, 3 * limit} {
		for _, chunked := range []bool{false, true} {
			payload := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
			var body io.Reader = bytes.NewReader(payload)
			if chunked {
				body = io.MultiReader(body)
			}
			req, _ := http.NewRequest("POST", "http://"+addr+"/", body)
			resp, e := getEcho(t, c, req)
			if resp.StatusCode != 200 || e.Name != "gray" || e.Body != string(payload) {
				t.Errorf("%d bytes (chunked %t): %d from %q with %d bytes, want 200 from gray with all of them",
					n, chunked, resp.StatusCode, e.Name, e.BodyLen)
			}
		}
	}
}
