package upstream

import (
	"errors"
	"testing"
	"time"
)

func TestPassiveEjectionBackoff(t *testing.T) {
	tests := []struct {
		name    string
		passive PassiveHealth
		// Each step ejects the instance (after the threshold of failures),
		// checks it stays out for exactly want, and optionally reports a
		// success once it is back.
		steps []struct {
			want    time.Duration
			success bool
		}
	}{
		{
			name:    "defaults double up to the cap",
			passive: PassiveHealth{},
			steps: []struct {
				want    time.Duration
				success bool
			}{{10 * time.Second, false}, {20 * time.Second, false}, {40 * time.Second, false}, {80 * time.Second, false}, {160 * time.Second, false}, {5 * time.Minute, false}, {5 * time.Minute, false}},
		},
		{
			name:    "cap that is not a power of two",
			passive: PassiveHealth{ConsecutiveFailures: 2, BaseEjection: Duration(10 * time.Second), MaxEjection: Duration(25 * time.Second)},
			steps: []struct {
				want    time.Duration
				success bool
			}{{10 * time.Second, false}, {20 * time.Second, false}, {25 * time.Second, false}, {25 * time.Second, false}},
		},
		{
			name:    "a success resets the backoff",
			passive: PassiveHealth{ConsecutiveFailures: 3},
			steps: []struct {
				want    time.Duration
				success bool
			}{{10 * time.Second, false}, {20 * time.Second, true}, {10 * time.Second, false}, {20 * time.Second, false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			h := NewHealth(HealthOptions{Now: clk.Now})
			insts := weighted(1, 1)
			a := insts[0]
			p := mustPool(t, "svc", insts, PoolOptions{Health: h, Passive: &tt.passive})
			n := tt.passive.withDefaults().ConsecutiveFailures
			for i, step := range tt.steps {
				fail(p, a, n-1)
				if st := p.Stats(); st.Ejected != 0 {
					t.Fatalf("step %d: ejected after %d failures, threshold %d", i, n-1, n)
				}
				fail(p, a, 1)
				hs, _ := hostStats(h, a.Addr)
				if !hs.Ejected || hs.Ejections != uint64(i+1) {
					t.Fatalf("step %d: after %d failures stats = %+v, want ejected (ejection %d)", i, n, hs, i+1)
				}
				if got := hs.EjectedUntil.Sub(clk.Now()); got != step.want {
					t.Errorf("step %d: ejected for %v, want %v", i, got, step.want)
				}
				for range 4 {
					in, err := p.Pick()
					if err != nil || in != insts[1] {
						t.Fatalf("step %d: Pick while a is ejected = %v, %v", i, in, err)
					}
					p.Report(in, true)
				}
				clk.Advance(step.want - time.Nanosecond)
				if st := p.Stats(); st.Ejected != 1 {
					t.Fatalf("step %d: back %v early", i, time.Nanosecond)
				}
				clk.Advance(time.Nanosecond)
				if st := p.Stats(); st.Ejected != 0 || st.Healthy != 2 {
					t.Fatalf("step %d: not back after %v: %+v", i, step.want, st)
				}
				if step.success {
					p.Report(a, true)
				}
			}
		})
	}
}

func TestPassiveCounting(t *testing.T) {
	clk := newClock()
	h := NewHealth(HealthOptions{Now: clk.Now})
	insts := weighted(1, 1)
	a := insts[0]
	p := mustPool(t, "svc", insts, PoolOptions{Health: h, Passive: &PassiveHealth{}})
	ejected := func() bool { return p.Stats().Ejected == 1 }

	fail(p, a, 4)
	p.Report(a, true)
	fail(p, a, 4)
	if ejected() {
		t.Fatal("a success must break the run of failures")
	}
	fail(p, a, 1)
	if !ejected() {
		t.Fatal("5 consecutive failures must eject")
	}
	// Requests picked before the ejection report late: they neither count
	// towards the next ejection nor extend this one.
	fail(p, a, 20)
	hs, _ := hostStats(h, a.Addr)
	if got := hs.EjectedUntil.Sub(clk.Now()); got != 10*time.Second || hs.Ejections != 1 || hs.ConsecutiveFailures != 0 {
		t.Fatalf("late failures changed the ejection: %+v", hs)
	}
	clk.Advance(10 * time.Second)
	fail(p, a, 1)
	if ejected() {
		t.Fatal("one failure after the return must not eject again")
	}
	// Without passive health, failures only end the request.
	q := mustPool(t, "plain", []*Instance{{Addr: "q:1"}}, PoolOptions{Health: h})
	for range 100 {
		in, _ := q.Pick()
		q.Report(in, false)
	}
	if st := q.Stats(); st.Healthy != 1 || st.InFlight != 0 {
		t.Errorf("pool without passive health: %+v, want healthy, nothing in flight", st)
	}
}

func TestAllDownNamesPool(t *testing.T) {
	clk := newClock()
	h := NewHealth(HealthOptions{Now: clk.Now})
	insts := weighted(1, 1, 1)
	for _, bal := range []Balancer{RoundRobin, Weighted, LeastRequest} {
		t.Run(string(bal), func(t *testing.T) {
			p := mustPool(t, "user-center", insts, PoolOptions{Balancer: bal, Health: h, Passive: &PassiveHealth{ConsecutiveFailures: 1}})
			defer p.Close()
			for _, in := range insts {
				fail(p, in, 1)
			}
			for _, pick := range []func() (*Instance, error){p.Pick, func() (*Instance, error) { return p.PickVersion("2") }} {
				in, err := pick()
				if in != nil || !errors.Is(err, ErrNoInstance) {
					t.Fatalf("Pick with every instance ejected = %v, %v", in, err)
				}
				if want := `pool "user-center": no healthy instance (3 ejected)`; err.Error() != want {
					t.Errorf("error = %q, want %q", err, want)
				}
			}
			clk.Advance(10 * time.Second) // everyone back for the next balancer
		})
	}
}

func TestNoInstanceErrorMessages(t *testing.T) {
	tests := []struct {
		err  NoInstanceError
		want string
	}{
		{NoInstanceError{Pool: "p", Size: 3, Ejected: 3}, `pool "p": no healthy instance (3 ejected)`},
		{NoInstanceError{Pool: "p", Size: 3, Ejected: 1, Failing: 2}, `pool "p": no healthy instance (1 ejected, 2 failing health checks)`},
		{NoInstanceError{Pool: "p", Size: 2, Failing: 2}, `pool "p": no healthy instance (2 failing health checks)`},
		{NoInstanceError{Pool: "p"}, `pool "p": no healthy instance (no instances)`},
		{NoInstanceError{Pool: "p@version=2", Selector: "version=2"}, `pool "p@version=2": no healthy instance (no instance has version=2)`},
		{NoInstanceError{Pool: "p", Size: 2}, `pool "p": no healthy instance (2 unavailable)`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q, want %q", tt.err, got, tt.want)
		}
		if !errors.Is(&tt.err, ErrNoInstance) {
			t.Errorf("%+v does not wrap ErrNoInstance", tt.err)
		}
	}
	if _, err := NewPool("empty", nil).Pick(); err == nil || err.Error() != `pool "empty": no healthy instance (no instances)` {
		t.Errorf("empty pool: %v", err)
	}
}

// TestHealthSurvivesRebuild rebuilds a pool from fresh Instance values, as a
// config reload does, and checks ejection and in-flight counts carry over
// while an address stays in some pool, and are forgotten once none holds it.
func TestHealthSurvivesRebuild(t *testing.T) {
	clk := newClock()
	h := NewHealth(HealthOptions{Now: clk.Now})
	opts := PoolOptions{Health: h, Passive: &PassiveHealth{}}
	v1 := weighted(1, 1)
	p1 := mustPool(t, "svc", v1, opts)
	fail(p1, v1[0], 5)
	held, err := p1.Pick() // a request in flight across the reload
	if err != nil || held != v1[1] {
		t.Fatalf("Pick = %v, %v; want b", held, err)
	}

	v2 := weighted(1, 1, 1)
	p2 := mustPool(t, "svc", v2, opts)
	if st := p2.Stats(); st.Ejected != 1 || st.Healthy != 2 || st.InFlight != 1 {
		t.Fatalf("rebuilt pool stats = %+v, want a ejected and one request in flight", st)
	}
	p1.Close()
	p1.Close() // idempotent
	for range 6 {
		in, err := p2.Pick()
		if err != nil || in.Addr == "a:1" {
			t.Fatalf("rebuilt pool picked %v, %v while a is ejected", in, err)
		}
		p2.Report(in, true)
	}
	p1.Report(held, true) // the old pool reports after the swap
	if hs, _ := hostStats(h, "b:1"); hs.InFlight != 0 || hs.Pools != 1 {
		t.Errorf("b after the old pool reported = %+v, want 0 in flight, 1 pool", hs)
	}
	if hs, _ := hostStats(h, "a:1"); !hs.Ejected || hs.Ejections != 1 {
		t.Errorf("a after rebuild = %+v, want still ejected", hs)
	}

	// The old pool still serves a stale snapshot after Close.
	if _, err := p1.Pick(); err != nil {
		t.Errorf("closed pool Pick: %v", err)
	} else {
		p1.Report(v1[1], true)
	}

	// A pool that drops a forgets it; bringing it back starts fresh.
	p3 := mustPool(t, "svc", weighted(0, 1, 1)[1:], opts)
	p2.Close()
	if _, ok := hostStats(h, "a:1"); ok {
		t.Fatal("a is in no pool but still in the snapshot")
	}
	p4 := mustPool(t, "svc", weighted(1, 1, 1), opts)
	p3.Close()
	if st := p4.Stats(); st.Ejected != 0 || st.Healthy != 3 {
		t.Errorf("a re-added = %+v, want fresh state", st)
	}
	p4.Close()
	if n := len(h.Snapshot()); n != 0 {
		t.Errorf("%d addresses left after every pool closed", n)
	}
}

func TestReportUnknownInstance(t *testing.T) {
	p := mustPool(t, "svc", weighted(1, 1), PoolOptions{Passive: &PassiveHealth{ConsecutiveFailures: 1}})
	p.Report(nil, false)
	p.Report(&Instance{Addr: "z:1"}, false)
	if st := p.Stats(); st.Healthy != 2 || st.InFlight != 0 {
		t.Errorf("reports for unknown instances changed the pool: %+v", st)
	}
	// Another Instance value with a known address is that address.
	fail(p, &Instance{Addr: "a:1"}, 1)
	if st := p.Stats(); st.Ejected != 1 || st.InFlight != 0 {
		t.Errorf("report by address did not count: %+v", st)
	}
}

func TestNewPoolWithErrors(t *testing.T) {
	h := NewHealth(HealthOptions{})
	tests := []struct {
		name  string
		insts []*Instance
		opts  PoolOptions
		want  string
	}{
		{"unknown balancer", weighted(1), PoolOptions{Balancer: "random"}, `pool "p": balancer: unknown balancer "random" (want "round_robin", "weighted" or "least_request")`},
		{"active without health", weighted(1), PoolOptions{Active: &ActiveHealth{}}, `pool "p": active health needs a shared Health registry`},
		{"nil instance", []*Instance{nil}, PoolOptions{Health: h}, `pool "p": instances[0] is nil`},
		{"bad passive", weighted(1), PoolOptions{Passive: &PassiveHealth{ConsecutiveFailures: -1}}, `pool "p": passive_health.consecutive_failures: must be 1..1000, got -1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPoolWith("p", tt.insts, tt.opts)
			if err == nil || err.Error() != tt.want {
				t.Errorf("NewPoolWith = %v, %v; want error %q", p, err, tt.want)
			}
		})
	}
	if n := len(h.Snapshot()); n != 0 {
		t.Errorf("failed NewPoolWith left %d references", n)
	}
}
