package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/upstream"
)

// realRouter compiles rules (JSON) against pools and serves them from a
// real router.Snapshot, so that a test drives the decision code live
// traffic uses rather than a stand-in. in supplies the rest of the input.
func realRouter(t testing.TB, pools map[string]*upstream.Pool, in router.Input, rules ...string) *router.Router {
	t.Helper()
	env := rule.Env{Resolve: func(target string) (*upstream.Pool, error) {
		if p, ok := pools[target]; ok {
			return p, nil
		}
		return nil, fmt.Errorf("no upstream named %q", target)
	}}
	for _, js := range rules {
		c, err := rule.Parse([]byte(js), env)
		if err != nil {
			t.Fatalf("rule %s: %v", js, err)
		}
		in.Rules = append(in.Rules, c)
	}
	if in.Default == nil {
		in.Default = pools["stable"]
	}
	s, err := router.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	return router.New(s)
}

// TestRefusedRequestKeepsTheProbe: a request the data plane refuses before
// contacting the gray target (429 from the route's rate limit, 503 from
// the gray pool's concurrency cap) must not use up a half-open breaker's
// probe; the next request that is let through gets it, reaches gray and
// closes the breaker. The decisions come from the real router.
func TestRefusedRequestKeepsTheProbe(t *testing.T) {
	tests := []struct {
		name       string
		wantStatus int
		// refuse arranges for the next request to be refused, starting
		// with no token left in the rate limit, and returns what lifts the
		// refusal. Advancing the limiter's clock by a second adds a token.
		refuse func(lim *fakeClock, gate *limit.Gate) (lift func())
	}{
		{
			name: "rate limited", wantStatus: http.StatusTooManyRequests,
			refuse: func(lim *fakeClock, _ *limit.Gate) func() {
				return func() { lim.Advance(time.Second) }
			},
		},
		{
			name: "gray pool at its concurrency cap", wantStatus: http.StatusServiceUnavailable,
			refuse: func(lim *fakeClock, gate *limit.Gate) func() {
				lim.Advance(time.Second)
				if !gate.Acquire() {
					t.Fatal("could not fill the gate")
				}
				return func() { gate.Release(); lim.Advance(time.Second) }
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk, limClk := &fakeClock{}, &fakeClock{}
			b := newBreaker(t, clk, breaker.Config{MinRequests: 2, OpenFor: breaker.Duration(10 * time.Second), HalfOpenProbes: 1})
			gray := rawBackend(t, func(req *http.Request, w *bufio.Writer) {
				fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Backend: gray\r\nContent-Length: 0\r\n\r\n")
			})
			stable, _ := echoBackend(t, "stable")
			pools := map[string]*upstream.Pool{"gray": poolOf("gray", gray), "stable": poolOf("stable", addrOf(stable))}
			gate := limit.NewSet(nil).Gate("gray", 1)
			pools["gray"].Gate = gate
			// One token a second, and the first one spent.
			lim := newLimiter(1, 1, limClk.Now)
			if ok, _ := lim.Allow(""); !ok {
				t.Fatal("a new limiter refused its first token")
			}
			rt := realRouter(t, pools, router.Input{
				Breakers: map[string]*breaker.Breaker{"r1": b},
				Policy:   &router.Policy{Limiter: lim, FallbackBodyBytes: router.DefaultFallbackBodyBytes},
			}, `{"key":"r1","type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"}}`)
			_, addr := startProxy(t, Options{Now: clk.Now}, rt)
			get := func() *http.Response {
				resp, _ := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\nX-User-Id: u1\r\n\r\n")
				return resp
			}

			// Open the breaker, then let open_for pass: the next Allow
			// goes half-open with one probe.
			for range 2 {
				tk, _ := b.Allow()
				b.Record(tk, breaker.Outcome{Latency: time.Millisecond, Failed: true, End: clk.Now()})
			}
			if st := b.State(); st != breaker.Open {
				t.Fatalf("breaker %v, want open", st)
			}
			clk.Advance(10 * time.Second)

			lift := tt.refuse(limClk, gate)
			if resp := get(); resp.StatusCode != tt.wantStatus {
				t.Fatalf("refused request: %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if pr := b.Snapshot().Probes; pr != nil && pr.Admitted > 0 {
				t.Fatalf("the refused request spent a half-open probe: %+v", *pr)
			}
			lift()
			resp := get()
			if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "gray" || resp.Header.Get("X-Gray-Degraded") != "" {
				t.Fatalf("next request: %d from %q, degraded %q; want the probe: 200 from gray, not degraded",
					resp.StatusCode, resp.Header.Get("X-Backend"), resp.Header.Get("X-Gray-Degraded"))
			}
			if st := b.State(); st != breaker.Closed {
				t.Errorf("after the successful probe the breaker is %v, want closed", st)
			}
		})
	}
}

// TestBreakerRefusalDegradesInStablesSlot: when the breaker refuses after
// the gray pool's slot was taken, the request goes to stable degraded
// "breaker" with the stable target's tag, and the gray slot is given back.
func TestBreakerRefusalDegradesInStablesSlot(t *testing.T) {
	clk := &fakeClock{}
	b := newBreaker(t, clk, breaker.Config{MinRequests: 2, OpenFor: breaker.Duration(time.Hour)})
	gray, _ := echoBackend(t, "gray")
	stable, _ := echoBackend(t, "stable")
	pools := map[string]*upstream.Pool{"gray": poolOf("gray", addrOf(gray)), "stable": poolOf("stable", addrOf(stable))}
	set := limit.NewSet(nil)
	grayGate, stableGate := set.Gate("gray", 1), set.Gate("stable", 1)
	pools["gray"].Gate, pools["stable"].Gate = grayGate, stableGate
	rt := realRouter(t, pools, router.Input{Breakers: map[string]*breaker.Breaker{"r1": b}},
		`{"key":"r1","type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"v2","stable":"v1"}}`)
	rec := newDoneRecorder()
	_, addr := startProxy(t, Options{Now: clk.Now, OnDone: rec.onDone}, rt)
	for range 2 {
		tk, _ := b.Allow()
		b.Record(tk, breaker.Outcome{Failed: true, End: clk.Now()})
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set("X-User-Id", "u1")
	resp, e := getEcho(t, httpClient(t), req)
	if resp.StatusCode != 200 || e.Name != "stable" || resp.Header.Get("X-Gray-Degraded") != "breaker" || resp.Header.Get("X-Gray-Group") != "stable" {
		t.Fatalf("%d from %q, degraded %q, group %q; want 200 from stable, breaker, stable",
			resp.StatusCode, e.Name, resp.Header.Get("X-Gray-Degraded"), resp.Header.Get("X-Gray-Group"))
	}
	if got := e.Header.Get("X-Gray-Tag"); got != "v1" {
		t.Errorf("stable got X-Gray-Tag %q, want the stable tag v1", got)
	}
	d := rec.next(t, 5*time.Second)
	if d.degraded != "breaker" || d.target != "stable" || d.intended != "gray" {
		t.Errorf("OnDone = %+v, want degraded breaker, target stable, intended gray", d)
	}
	// Both slots are free again: the gray one was given back at once, the
	// stable one when the exchange ended.
	for name, g := range map[string]*limit.Gate{"gray": grayGate, "stable": stableGate} {
		if !g.Acquire() {
			t.Errorf("the %s pool's slot was not given back", name)
			continue
		}
		g.Release()
	}
}

// TestBreakerRefusalWithoutStable: a decision whose breaker refuses and
// that names no stable target is answered 503, not sent anywhere.
func TestBreakerRefusalWithoutStable(t *testing.T) {
	clk := &fakeClock{}
	b := newBreaker(t, clk, breaker.Config{MinRequests: 2, OpenFor: breaker.Duration(time.Hour)})
	for range 2 {
		tk, _ := b.Allow()
		b.Record(tk, breaker.Outcome{Failed: true, End: clk.Now()})
	}
	gray, seen := echoBackend(t, "gray")
	_, addr := startProxy(t, Options{Now: clk.Now}, &grayRoute{gray: poolOf("gray", addrOf(gray)), b: b})
	resp, _ := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != http.StatusServiceUnavailable || seen.Load() != 0 {
		t.Errorf("open breaker, no stable: %d, gray saw %d requests; want 503 and none", resp.StatusCode, seen.Load())
	}
}
