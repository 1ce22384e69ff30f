package proxy

import (
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
func fasthttpBackend(b *testing.B) string {
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

// BenchmarkProxy measures the whole path: fasthttp client → Proxy
// (validate, route, build the upstream request, pooled upstream connection,
// stream the response back, OnDone) → fasthttp backend, on loopback. The
// access_log variant adds the JSON access line.
func BenchmarkProxy(b *testing.B) {
	backend := fasthttpBackend(b)
	d := staticDecider{Rule: "r1", Group: "stable", Target: poolOf("stable", backend)}
	var n atomic.Int64
	onDone := func(*router.Decision, int, time.Duration, int64) { n.Add(1) }
	b.Run("plain", func(b *testing.B) {
		_, addr := startProxy(b, Options{OnDone: onDone}, d)
		benchRequests(b, addr)
	})
	b.Run("access_log", func(b *testing.B) {
		_, addr := startProxy(b, Options{OnDone: onDone, AccessLog: io.Discard}, d)
		benchRequests(b, addr)
	})
	// A gray request with every check of the resilience work armed: a
	// breaker (Allow in the decider, Record with two clock reads), a
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
