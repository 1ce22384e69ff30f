package proxy

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/router"
)

// fasthttpBackend serves a small fixed response, so that the benchmarks
// measure the request path rather than the backend.
func fasthttpBackend(b testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-Backend", "stable")
		ctx.SetContentType("text/plain")
		ctx.SetBodyString("hello, world")
	}}
	go s.Serve(ln) //nolint:errcheck // returns on Shutdown
	b.Cleanup(func() { _ = s.Shutdown() })
	return ln.Addr().String()
}

func benchRequests(b *testing.B, addr string) {
	c := &fasthttp.HostClient{Addr: addr, MaxConns: 4, ReadTimeout: 5 * time.Second}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://app.test/api/items?id=42")
	req.Header.Set("X-User-Id", "user-42")
	req.Header.Set("Cookie", "session=abc; uid=u%2042")
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(req, resp); err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode() != 200 || len(resp.Body()) != len("hello, world") {
			b.Fatalf("status %d body %q", resp.StatusCode(), resp.Body())
		}
	}
}

// itemsRequester returns a function that sends the benchmarks' request
// (GET /api/items?id=42 as user-42) to addr over one connection and
// fails tb unless the answer is a 200.
func itemsRequester(tb testing.TB, addr string) func() {
	c := &fasthttp.HostClient{Addr: addr, MaxConns: 1, ReadTimeout: 5 * time.Second}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	tb.Cleanup(func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	})
	req.SetRequestURI("http://app.test/api/items?id=42")
	req.Header.Set("X-User-Id", "user-42")
	return func() {
		if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			tb.Fatalf("status %d, %v", resp.StatusCode(), err)
		}
	}
}

// BenchmarkProxy measures the whole path: fasthttp client → Proxy
// (validate, route, build the upstream request, pooled upstream connection,
// stream the response back, OnDone) → fasthttp backend, on loopback. The
// access_log variant adds the JSON access line.
func BenchmarkProxy(b *testing.B) {
	backend := fasthttpBackend(b)
	d := staticDecider{Rule: "r1", Group: "stable", Target: poolOf("stable", backend)}
	var n atomic.Int64
	onDone := func(*Done) { n.Add(1) }
	b.Run("plain", func(b *testing.B) {
		_, addr := startProxy(b, Options{OnDone: onDone}, d)
		benchRequests(b, addr)
	})
	b.Run("access_log", func(b *testing.B) {
		_, addr := startProxy(b, Options{OnDone: onDone, AccessLog: io.Discard}, d)
		benchRequests(b, addr)
	})
	// A gray request with every check of the resilience work armed: a
	// breaker (Allow after the limits, Record with two clock reads), a
	// stable target (so the request is checked for replayability), a pool
	// gate, a route timeout, a body limit and a rate limiter that never
	// refuses.
	b.Run("gray_guarded", func(b *testing.B) {
		br, err := breaker.New(breaker.Config{}, breaker.Options{Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		gray := poolOf("gray", backend)
		gray.Gate = limit.NewSet(nil).Gate("gray", 1<<20)
		pol := &router.Policy{
			UpstreamTimeout: 5 * time.Second, MaxBodyBytes: 1 << 20, FallbackBodyBytes: router.DefaultFallbackBodyBytes,
			Limiter: limit.New(limit.Config{RPS: 1e9, Burst: 1 << 20}, nil),
		}
		_, addr := startProxy(b, Options{OnDone: onDone}, &grayRoute{gray: gray, stable: poolOf("stable", backend), b: br, pol: pol})
		benchRequests(b, addr)
	})
	b.Run("gray_guarded_no_limiter", func(b *testing.B) {
		br, err := breaker.New(breaker.Config{}, breaker.Options{Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		gray := poolOf("gray", backend)
		gray.Gate = limit.NewSet(nil).Gate("gray", 1<<20)
		pol := &router.Policy{UpstreamTimeout: 5 * time.Second, MaxBodyBytes: 1 << 20, FallbackBodyBytes: router.DefaultFallbackBodyBytes}
		_, addr := startProxy(b, Options{OnDone: onDone}, &grayRoute{gray: gray, stable: poolOf("stable", backend), b: br, pol: pol})
		benchRequests(b, addr)
	})
}

// BenchmarkDirect is the same client and backend without the proxy, for
// comparison.
func BenchmarkDirect(b *testing.B) {
	benchRequests(b, fasthttpBackend(b))
}

// BenchmarkGuards measures what the resilience work adds per request, off
// the network: the policy checks of admit, the pool gate, and, for a
// breaker-guarded request, Allow and the clock reads and Record of
// roundTrip.
func BenchmarkGuards(b *testing.B) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.SetRequestURI("/api/items")
	br, err := breaker.New(breaker.Config{}, breaker.Options{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	gray, stable := poolOf("gray", "127.0.0.1:1"), poolOf("stable", "127.0.0.1:2")
	gray.Gate = limit.NewSet(nil).Gate("gray", 1<<20)
	full := &router.Policy{
		UpstreamTimeout: 5 * time.Second, MaxBodyBytes: 1 << 20, FallbackBodyBytes: router.DefaultFallbackBodyBytes,
		Limiter: limit.New(limit.Config{RPS: 1e12, Burst: 1 << 30}, nil),
	}
	tests := []struct {
		name string
		d    router.Decision
	}{
		{"plain", router.Decision{Target: stable}},
		{"gray_breaker_gate_fallback", router.Decision{Target: gray, Stable: stable, Breaker: br, Policy: &router.Policy{MaxBodyBytes: 1 << 20}}},
		{"gray_all_with_limiter", router.Decision{Target: gray, Stable: stable, Breaker: br, Policy: full}},
	}
	p := New(Options{}, staticDecider{}, nil)
	b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			ex := p.getExchange()
			defer dropExchange(p, ex)
			ex.resp.SetStatusCode(200)
			b.ReportAllocs()
			for b.Loop() {
				ex.d = tt.d
				ex.recorded = false
				if err := p.admit(&ctx, ex); err != nil {
					b.Fatal(err)
				}
				// The gate, then the breaker's Allow.
				if err := ex.acquire(); err != nil {
					b.Fatal(err)
				}
				ex.releaseGate()
				if ex.d.Breaker != nil {
					ex.recordOutcome(p.now(), nil)
				}
			}
		})
	}
}
