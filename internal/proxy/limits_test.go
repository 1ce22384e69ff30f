package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testport"
)

func newLimiter(rps float64, burst int, now func() time.Time) *limit.Limiter {
	return limit.New(limit.Config{RPS: rps, Burst: burst}, now)
}

// TestRateLimit sends a steady 100 requests per second for one second of a
// fake clock through a 10 rps, burst 1 limit.
func TestRateLimit(t *testing.T) {
	clk := &fakeClock{}
	backend, seen := echoBackend(t, "stable")
	pol := &router.Policy{Limiter: newLimiter(10, 1, clk.Now)}
	_, addr := startProxy(t, Options{}, staticDecider{Rule: "r1", Group: "stable", Target: poolOf("stable", addrOf(backend)), Policy: pol})
	accepted := 0
	for i := range 100 {
		resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		switch resp.StatusCode {
		case 200:
			accepted++
		case 429:
			if ra := resp.Header.Get("Retry-After"); ra != "1" {
				t.Errorf("request %d: Retry-After %q, want 1 (a token comes within 100ms)", i, ra)
			}
			if errBody(t, resp, body) != "graygate: too many requests\n" || resp.Header.Get("X-Gray-Rule") != "r1" {
				t.Errorf("request %d: 429 with body %q, X-Gray-Rule %q", i, body, resp.Header.Get("X-Gray-Rule"))
			}
		default:
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		clk.Advance(10 * time.Millisecond)
	}
	if accepted < 9 || accepted > 11 {
		t.Errorf("accepted %d of 100 requests over 1s at 10 rps, want 10 ± 10%%", accepted)
	}
	if n := seen.Load(); n != int64(accepted) {
		t.Errorf("the backend saw %d requests, want only the %d accepted", n, accepted)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		rps  float64
		want string
	}{
		{10, "1"},   // 100ms, rounded up to a second
		{0.4, "3"},  // 2.5s
		{0.25, "4"}, // 4s exactly
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.rps), func(t *testing.T) {
			clk := &fakeClock{}
			backend, _ := echoBackend(t, "stable")
			pol := &router.Policy{Limiter: newLimiter(tt.rps, 1, clk.Now)}
			_, addr := startProxy(t, Options{}, staticDecider{Target: poolOf("stable", addrOf(backend)), Policy: pol})
			rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			resp, _ := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != tt.want {
				t.Errorf("second request: %d, Retry-After %q; want 429, %q", resp.StatusCode, resp.Header.Get("Retry-After"), tt.want)
			}
		})
	}
}

// TestRateLimitPerIdentity: the limiter is asked with the decision's
// identity, so each user has a bucket of its own.
func TestRateLimitPerIdentity(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	lim := limit.New(limit.Config{RPS: 0.001, Burst: 1, PerIdentity: true}, nil)
	target := poolOf("stable", addrOf(backend))
	d := deciderFunc(func(r attr.Request) router.Decision {
		u, _ := r.Header("X-User-Id")
		return router.Decision{Target: target, Policy: &router.Policy{Limiter: lim}, Identity: identity.ID{Value: u, Source: "header:X-User-Id"}}
	})
	_, addr := startProxy(t, Options{}, d)
	for _, step := range []struct {
		user string
		want int
	}{{"a", 200}, {"b", 200}, {"a", 429}, {"b", 429}, {"c", 200}} {
		resp, _ := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\nX-User-Id: "+step.user+"\r\n\r\n")
		if resp.StatusCode != step.want {
			t.Errorf("user %s: %d, want %d", step.user, resp.StatusCode, step.want)
		}
	}
}

// TestMaxBodyBytes: a body over Policy.MaxBodyBytes gets 413, from its
// Content-Length before anything is forwarded, or, chunked, once the
// streamed body passes the limit. (fasthttp reads up to 8 KiB of a body
// before calling the handler, so the clients here send theirs.)
func TestMaxBodyBytes(t *testing.T) {
	const max = 1 << 10
	tests := []struct {
		name       string
		fallback   bool // gray target with a stable one: the body is buffered first
		raw        string
		wantStatus int
	}{
		{name: "Content-Length over the limit", raw: fmt.Sprintf("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", max+1, strings.Repeat("b", max+1)), wantStatus: 413},
		{name: "Content-Length at the limit", raw: fmt.Sprintf("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", max, strings.Repeat("b", max)), wantStatus: 200},
		{name: "chunked body over the limit", raw: chunkedRequest(max+1, 100), wantStatus: 413},
		{name: "chunked body at the limit", raw: chunkedRequest(max, 100), wantStatus: 200},
		{name: "chunked body over the limit while buffered for fallback", fallback: true, raw: chunkedRequest(max+1, 100), wantStatus: 413},
		{name: "Content-Length over the limit with fallback", fallback: true, raw: fmt.Sprintf("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", max+1, strings.Repeat("b", max+1)), wantStatus: 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backend, seen := echoBackend(t, "gray")
			pol := &router.Policy{MaxBodyBytes: max}
			route := &grayRoute{gray: poolOf("gray", addrOf(backend)), pol: pol}
			if tt.fallback {
				stable, _ := echoBackend(t, "stable")
				route.stable = poolOf("stable", addrOf(stable))
			}
			_, addr := startProxy(t, Options{}, route)
			resp, body := rawExchange(t, addr, "POST", tt.raw)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d (%q), want %d", resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantStatus == 413 {
				if want := "graygate: request body larger than 1024 bytes\n"; errBody(t, resp, body) != want || !resp.Close {
					t.Errorf("413 body %q, close %t; want %q and Connection: close", body, resp.Close, want)
				}
				if strings.Contains(tt.name, "Content-Length") && seen.Load() != 0 {
					t.Errorf("the backend saw %d requests; a declared oversize body must not be forwarded", seen.Load())
				}
			}
		})
	}
}

// chunkedRequest is a POST with an n-byte body in chunks of size.
func chunkedRequest(n, size int) string {
	var b strings.Builder
	b.WriteString("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
	for n > 0 {
		c := min(n, size)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", c, strings.Repeat("c", c))
		n -= c
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// TestUpstreamTimeoutPerRoute: Policy.UpstreamTimeout replaces
// Options.ResponseHeaderTimeout, shorter or longer.
func TestUpstreamTimeoutPerRoute(t *testing.T) {
	slow := rawBackend(t, func(req *http.Request, w *bufio.Writer) {
		time.Sleep(300 * time.Millisecond) // the backend's think time
		fmt.Fprint(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	tests := []struct {
		name       string
		global     time.Duration
		route      time.Duration
		wantStatus int
	}{
		{"route shorter than the default", 10 * time.Second, 100 * time.Millisecond, 504},
		{"route longer than the default", 100 * time.Millisecond, 5 * time.Second, 200},
		{"no route timeout: the default", 100 * time.Millisecond, 0, 504},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := &router.Policy{UpstreamTimeout: tt.route}
			_, addr := startProxy(t, Options{ResponseHeaderTimeout: tt.global},
				staticDecider{Group: "stable", Target: poolOf("slow", slow), Policy: pol})
			resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status %d %q, want %d", resp.StatusCode, body, tt.wantStatus)
			}
		})
	}
}

// waitInFlight polls the gate until no request holds it.
func waitInFlight(t *testing.T, g *limit.Gate) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for g.InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("gate still has %d requests in flight", g.InFlight())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGate: a full pool answers 503 without being contacted, and every kind
// of exchange gives its slot back when it ends.
func TestGate(t *testing.T) {
	gates := limit.NewSet(nil)

	t.Run("503 when full", func(t *testing.T) {
		stuck, arrived, _ := stuckBackend(t)
		pool := poolOf("busy", stuck)
		pool.Gate = gates.Gate("busy", 1)
		_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: pool})
		first, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(first, "GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("the first request never reached the backend")
		}
		resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		if want := "graygate: upstream \"busy\" is at its concurrency cap\n"; resp.StatusCode != 503 || errBody(t, resp, body) != want {
			t.Errorf("second request: %d %q, want 503 %q", resp.StatusCode, body, want)
		}
		resetClose(t, first) // the proxy sees the hang-up and lets the slot go
		waitInFlight(t, pool.Gate)
	})

	backend, _ := echoBackend(t, "stable")
	streamer := rawBackend(t, func(req *http.Request, w *bufio.Writer) {
		fmt.Fprint(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		for range 50 {
			fmt.Fprintf(w, "400\r\n%s\r\n", strings.Repeat("s", 0x400))
		}
		fmt.Fprint(w, "0\r\n\r\n")
	})
	ws, _ := wsEchoBackend(t, "ws")
	tests := []struct {
		name string
		addr string
		do   func(t *testing.T, addr string)
	}{
		{"plain", addrOf(backend), func(t *testing.T, addr string) {
			if resp, _ := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		}},
		{"streamed body", streamer, func(t *testing.T, addr string) {
			if resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); len(body) != 50<<10 {
				t.Errorf("status %d, %d bytes", resp.StatusCode, len(body))
			}
		}},
		{"streamed body abandoned by the client", streamer, func(t *testing.T, addr string) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			_, _ = bufio.NewReader(c).ReadString('\n')
			c.Close()
		}},
		{"upstream down", testport.Refused(t), func(t *testing.T, addr string) {
			if resp, _ := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 502 {
				t.Errorf("status %d", resp.StatusCode)
			}
		}},
		{"websocket", ws, func(t *testing.T, addr string) {
			c, _, err := dialWS(t, "ws://"+addr+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "ws:hi" {
				t.Fatalf("read %q, %v", msg, err)
			}
			c.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := poolOf("p", tt.addr)
			pool.Gate = gates.Gate("p-"+tt.name, 4)
			_, addr := startProxy(t, Options{}, staticDecider{Group: "stable", Target: pool})
			tt.do(t, addr)
			waitInFlight(t, pool.Gate)
		})
	}

	t.Run("fallback gives the gray slot back", func(t *testing.T) {
		gray := poolOf("gray", testport.Refused(t))
		gray.Gate = gates.Gate("gray", 1)
		stable := poolOf("stable", addrOf(backend))
		stable.Gate = gates.Gate("stable", 1)
		_, addr := startProxy(t, Options{}, &grayRoute{gray: gray, stable: stable})
		for range 3 {
			if resp, _ := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
				t.Fatalf("status %d, want 200 from stable", resp.StatusCode)
			}
		}
		waitInFlight(t, gray.Gate)
		waitInFlight(t, stable.Gate)
	})
}

// TestSlowloris: clients that dribble a header one byte at a time are cut
// off by ReadHeaderTimeout, long before their header would be complete,
// while other clients are served as usual.
func TestSlowloris(t *testing.T) {
	const headerTimeout = 300 * time.Millisecond
	backend, _ := echoBackend(t, "stable")
	rec := newDoneRecorder()
	_, addr := startProxy(t, Options{ReadHeaderTimeout: headerTimeout, OnDone: rec.onDone},
		staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})

	// 250 bytes at one per 20ms would take 5s, far past the timeout.
	slowReq := "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", 214) + "\r\n\r\n"
	const slowClients = 8
	const dribble = 20 * time.Millisecond
	type result struct {
		sent   int
		closed time.Duration
		err    error
	}
	results := make(chan result, slowClients)
	var started sync.WaitGroup
	started.Add(slowClients)
	start := time.Now()
	for range slowClients {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				started.Done()
				results <- result{err: err}
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			var sent atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(dribble)
				defer tick.Stop()
				for i := range len(slowReq) {
					if _, err := c.Write([]byte{slowReq[i]}); err != nil {
						return
					}
					if sent.Add(1) == 1 {
						started.Done()
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
			// Whatever the gateway sends (a 408) is read until it closes.
			_, err = io.Copy(io.Discard, c)
			closed := time.Since(start)
			close(stop)
			wg.Wait()
			results <- result{sent: int(sent.Load()), closed: closed, err: err}
		}()
	}
	started.Wait()

	// Served while the slow clients hold their connections.
	c := httpClient(t)
	for i := range 20 {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("normal request %d during the attack: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("normal request %d: status %d", i, resp.StatusCode)
		}
	}
	full := time.Duration(len(slowReq)) * dribble
	for range slowClients {
		r := <-results
		switch {
		case r.err != nil && !isConnReset(r.err):
			t.Errorf("slow client: %v", r.err)
		case r.sent >= len(slowReq):
			t.Errorf("a slow client sent its whole header (%d bytes) in %v", r.sent, r.closed)
		case r.closed < headerTimeout || r.closed > full/2:
			t.Errorf("a slow client was closed after %v, want about ReadHeaderTimeout (%v), well before %v", r.closed, headerTimeout, full)
		}
	}
	timedOut := 0
	for range slowClients + 20 {
		if d := rec.next(t, 10*time.Second); d.status == http.StatusRequestTimeout {
			timedOut++
		}
	}
	if timedOut != slowClients {
		t.Errorf("%d requests recorded as 408, want %d", timedOut, slowClients)
	}
}

// TestKeepAliveHeadTimeout: on a keep-alive connection, ReadHeaderTimeout
// bounds the next request's head from its first bytes, not from the end
// of the last answer, and IdleTimeout bounds the wait for those bytes
// (the listener arms both: see listener.Config). Each row answers one
// request, waits, then sends a second head in parts.
func TestKeepAliveHeadTimeout(t *testing.T) {
	const headerTimeout = 300 * time.Millisecond
	const idleTimeout = 3 * time.Second
	backend, _ := echoBackend(t, "stable")
	_, addr := startProxy(t, Options{ReadHeaderTimeout: headerTimeout, IdleTimeout: idleTimeout},
		staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))})
	head := "GET /second HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", 100) + "\r\n\r\n"
	tests := []struct {
		name  string
		wait  time.Duration // after the first answer
		parts int           // the second head in this many writes
		gap   time.Duration // between them
		// answered: the second request gets its 200; otherwise the
		// connection is closed within [headerTimeout, cutBy] of the
		// second head's first byte.
		answered bool
		cutBy    time.Duration
	}{
		// Longer than the header timeout, well within the idle one: a
		// head timed from the end of the last answer would be cut.
		{name: "whole after a wait", wait: 2 * headerTimeout, parts: 1, answered: true},
		{name: "in parts after a wait", wait: 2 * headerTimeout, parts: 3, gap: headerTimeout / 4, answered: true},
		// A slow head on a connection that already served one.
		{name: "dribbled", parts: len(head), gap: 20 * time.Millisecond, cutBy: 2 * time.Second},
		{name: "dribbled after a wait", wait: 2 * headerTimeout, parts: len(head), gap: 20 * time.Millisecond, cutBy: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			br := bufio.NewReader(c)
			if _, err := io.WriteString(c, "GET /first HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("first request: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			time.Sleep(tt.wait)
			// The parts are written on their own goroutine, so that a cut
			// is seen while they are still being sent.
			sent := make(chan time.Time, 1)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				size := (len(head) + tt.parts - 1) / tt.parts
				for i := 0; i < len(head); i += size {
					if _, err := io.WriteString(c, head[i:min(i+size, len(head))]); err != nil {
						return
					}
					if i == 0 {
						sent <- time.Now()
					}
					select {
					case <-stop:
						return
					case <-time.After(tt.gap):
					}
				}
			}()
			first := <-sent
			resp, err = http.ReadResponse(br, nil)
			if tt.answered {
				if err != nil {
					t.Fatalf("second request: %v", err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("second request: status %d, want 200", resp.StatusCode)
				}
				return
			}
			if err == nil {
				// A 408 may come before the close.
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestTimeout {
					t.Fatalf("slow second head: status %d, want 408 or a close", resp.StatusCode)
				}
				_, err = io.Copy(io.Discard, br)
			}
			if err != nil && !isConnReset(err) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("slow second head: %v", err)
			}
			if took := time.Since(first); took < headerTimeout || took > tt.cutBy {
				t.Fatalf("slow second head cut %v after its first byte, want between %v and %v", took, headerTimeout, tt.cutBy)
			}
		})
	}
}

// TestShutdownDeadline: a request still in flight when Shutdown's context
// ends has its connection closed, and its upstream wait abandoned.
func TestShutdownDeadline(t *testing.T) {
	stuck, arrived, canceled := stuckBackend(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{}, staticDecider{Group: "stable", Target: poolOf("stable", stuck)}, nil)
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the backend")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Errorf("Shutdown = %v, want %v", err, context.DeadlineExceeded)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("client read %d bytes, %v; want the connection closed", n, err)
	}
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Error("the upstream request was not abandoned")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
