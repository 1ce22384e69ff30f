package limit

import (
	"strings"
	"sync"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestRouteLimit(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Config{RPS: 10, Burst: 2}, c.now)
	ok1, _ := l.Allow("a")
	ok2, _ := l.Allow("b")
	ok3, retry := l.Allow("c")
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("burst of 2: %v %v %v", ok1, ok2, ok3)
	}
	if retry <= 0 || retry > 100*time.Millisecond {
		t.Errorf("retry after = %v, want about 100ms", retry)
	}
	c.t = c.t.Add(100 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Error("a token must be back after 100ms at 10 rps")
	}
	// Over one simulated second at 10 rps exactly 10 more are admitted.
	n := 0
	for i := 0; i < 100; i++ {
		c.t = c.t.Add(10 * time.Millisecond)
		if ok, _ := l.Allow("x"); ok {
			n++
		}
	}
	if n != 10 {
		t.Errorf("admitted %d in 1s at 10 rps, want 10", n)
	}
}

func TestPerIdentity(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(Config{RPS: 1, Burst: 1, PerIdentity: true, MaxIdentities: 2}, c.now)
	for _, id := range []string{"a", "b"} {
		if ok, _ := l.Allow(id); !ok {
			t.Errorf("first request of %s refused", id)
		}
	}
	if ok, _ := l.Allow("a"); ok {
		t.Error("a's second request admitted")
	}
	l.Allow("c") // evicts b, the least recently used
	if ok, _ := l.Allow("b"); !ok {
		t.Error("b should have a fresh bucket after eviction")
	}
}

func TestConfigureKeepsState(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := NewSet(c.now)
	l := s.Limiter("api", Config{RPS: 1, Burst: 1})
	l.Allow("")
	if l2 := s.Limiter("api", Config{RPS: 1, Burst: 1}); l2 != l {
		t.Fatal("Set must return the same limiter for a key")
	}
	if ok, _ := l.Allow(""); ok {
		t.Error("reconfiguring refilled the bucket")
	}
	s.Retain(func(string) bool { return false }, func(string) bool { return false })
	if l3 := s.Limiter("api", Config{RPS: 1, Burst: 1}); l3 == l {
		t.Error("Retain did not drop the limiter")
	}
}

func TestValidate(t *testing.T) {
	c := Config{RPS: 0, Burst: -1, MaxIdentities: -2}
	err := c.Validate("routes[0].rate_limit")
	for _, want := range []string{"routes[0].rate_limit.rps: must be a positive number, got 0", "routes[0].rate_limit.burst", "routes[0].rate_limit.max_identities"} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestGate(t *testing.T) {
	s := NewSet(nil)
	g := s.Gate("pool", 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g.Acquire() {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 3 || g.InFlight() != 3 {
		t.Errorf("admitted %d, in flight %d, want 3", admitted, g.InFlight())
	}
	g.Release()
	if !g.Acquire() {
		t.Error("a released slot must be reusable")
	}
	var nilGate *Gate
	if !nilGate.Acquire() {
		t.Error("a nil gate admits everything")
	}
	nilGate.Release()
}

func BenchmarkAllowRoute(b *testing.B) {
	l := New(Config{RPS: 1e9, Burst: 1e9}, nil)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("u")
	}
}
