package upstream

import (
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is an injected clock for passive health.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// instances builds instances "a:1", "b:1", … with the given weights.
func weighted(weights ...int) []*Instance {
	out := make([]*Instance, len(weights))
	for i, w := range weights {
		out[i] = &Instance{Addr: string(rune('a'+i)) + ":1", Weight: w}
	}
	return out
}

func mustPool(t testing.TB, name string, insts []*Instance, opts PoolOptions) *Pool {
	t.Helper()
	p, err := NewPoolWith(name, insts, opts)
	if err != nil {
		t.Fatalf("NewPoolWith(%q): %v", name, err)
	}
	return p
}

// count picks n times, reporting success after each pick, and returns how
// often each address was chosen.
func count(t testing.TB, n int, pick func() (*Instance, error), report func(*Instance, bool)) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		in, err := pick()
		if err != nil {
			t.Fatalf("pick: %v", err)
		}
		seen[in.Addr]++
		report(in, true)
	}
	return seen
}

// fail reports n failed requests to inst, as if each had been picked.
func fail(p *Pool, inst *Instance, n int) {
	for range n {
		p.stateOf(inst).inflight.Add(1)
		p.Report(inst, false)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func addrOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

func hostStats(h *Health, addr string) (HostStats, bool) {
	for _, s := range h.Snapshot() {
		if s.Addr == addr {
			return s, true
		}
	}
	return HostStats{}, false
}
