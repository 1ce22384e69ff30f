package upstream

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestBalancerDistribution(t *testing.T) {
	tests := []struct {
		name    string
		bal     Balancer
		weights []int
		down    []int // indexes ejected before picking
		picks   int
		want    []float64 // expected share per instance
		tol     float64   // absolute tolerance on the share
	}{
		{"round robin is exact", RoundRobin, []int{1, 1, 1}, nil, 3000, []float64{1. / 3, 1. / 3, 1. / 3}, 0},
		{"round robin ignores weights", RoundRobin, []int{1, 3}, nil, 4000, []float64{.5, .5}, 0},
		{"round robin spreads a down instance's share", RoundRobin, []int{1, 1, 1, 1}, []int{1}, 3000, []float64{1. / 3, 0, 1. / 3, 1. / 3}, 0.01},
		{"weighted 1:3", Weighted, []int{1, 3}, nil, 4000, []float64{.25, .75}, 0.01},
		{"weighted 0 counts as 1", Weighted, []int{0, 1, 2}, nil, 4000, []float64{.25, .25, .5}, 0.01},
		{"weighted skips a down instance", Weighted, []int{1, 3, 4}, []int{2}, 4000, []float64{.25, .75, 0}, 0.01},
		{"least request without load is uniform", LeastRequest, []int{1, 1, 1, 1}, nil, 4000, []float64{.25, .25, .25, .25}, 0.03},
		{"least request ignores weights", LeastRequest, []int{1, 9}, nil, 4000, []float64{.5, .5}, 0.03},
		{"least request skips a down instance", LeastRequest, []int{1, 1, 1}, []int{0}, 4000, []float64{0, .5, .5}, 0.03},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			h := NewHealth(HealthOptions{Now: clk.Now})
			insts := weighted(tt.weights...)
			r := rand.New(rand.NewPCG(1, 2))
			p := mustPool(t, "svc", insts, PoolOptions{Balancer: tt.bal, Health: h, Passive: &PassiveHealth{ConsecutiveFailures: 1}, Random: r.Uint64})
			for _, i := range tt.down {
				fail(p, insts[i], 1)
			}
			seen := count(t, tt.picks, p.Pick, p.Report)
			for i, in := range insts {
				got := float64(seen[in.Addr]) / float64(tt.picks)
				if math.Abs(got-tt.want[i]) > tt.tol+1e-9 {
					t.Errorf("%s share of %s = %.4f, want %.4f±%.2f (counts %v)", tt.bal, in.Addr, got, tt.want[i], tt.tol, seen)
				}
			}
		})
	}
}

// TestSmoothWeighted checks nginx's published sequence for weights 5, 1, 1:
// the heavy instance is spread out, not sent five requests in a row.
func TestSmoothWeighted(t *testing.T) {
	p := mustPool(t, "svc", weighted(5, 1, 1), PoolOptions{Balancer: Weighted})
	var got strings.Builder
	for range 14 {
		in, err := p.Pick()
		if err != nil {
			t.Fatal(err)
		}
		got.WriteByte(in.Addr[0])
		p.Report(in, true)
	}
	if want := "aabacaa" + "aabacaa"; got.String() != want {
		t.Errorf("weighted 5:1:1 sequence = %s, want %s", got.String(), want)
	}
}

func TestLeastRequestPrefersFewerInFlight(t *testing.T) {
	tests := []struct {
		name     string
		inflight []int64
		want     []float64
	}{
		// Every pair but (b, c) holds a loaded a, which loses; (b, c) ties.
		{"loaded instance starves", []int64{5, 0, 0}, []float64{0, .5, .5}},
		// c beats both others; b beats a: pairs ab→b, ac→c, bc→c.
		{"ordered load", []int64{5, 1, 0}, []float64{0, 1. / 3, 2. / 3}},
		{"two instances", []int64{3, 2}, []float64{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			insts := weighted(make([]int, len(tt.inflight))...)
			r := rand.New(rand.NewPCG(3, 4))
			p := mustPool(t, "svc", insts, PoolOptions{Balancer: LeastRequest, Random: r.Uint64})
			for i, n := range tt.inflight {
				p.hosts[i].inflight.Store(n)
			}
			const picks = 3000
			seen := count(t, picks, p.Pick, p.Report)
			for i, in := range insts {
				got := float64(seen[in.Addr]) / picks
				if math.Abs(got-tt.want[i]) > 0.03 {
					t.Errorf("share of %s = %.3f, want %.3f (counts %v)", in.Addr, got, tt.want[i], seen)
				}
			}
			for i, n := range tt.inflight {
				if got := p.hosts[i].inflight.Load(); got != n {
					t.Errorf("in-flight of %s after paired Pick/Report = %d, want %d", insts[i].Addr, got, n)
				}
			}
		})
	}
}

func TestPickCountsInFlight(t *testing.T) {
	for _, bal := range []Balancer{RoundRobin, Weighted, LeastRequest} {
		t.Run(string(bal), func(t *testing.T) {
			p := mustPool(t, "svc", weighted(1, 1), PoolOptions{Balancer: bal})
			var held []*Instance
			for range 10 {
				in, err := p.Pick()
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, in)
			}
			if st := p.Stats(); st.InFlight != 10 {
				t.Fatalf("in flight after 10 picks = %d, want 10", st.InFlight)
			}
			if bal == LeastRequest {
				if a, b := p.hosts[0].inflight.Load(), p.hosts[1].inflight.Load(); a != 5 || b != 5 {
					t.Errorf("least_request with held requests = %d/%d, want 5/5", a, b)
				}
			}
			for _, in := range held {
				p.Report(in, true)
			}
			if st := p.Stats(); st.InFlight != 0 {
				t.Errorf("in flight after reports = %d, want 0", st.InFlight)
			}
		})
	}
}

func TestPair(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for m := 2; m < 9; m++ {
		seen := map[[2]int]int{}
		for range 20000 {
			a, b := pair(r.Uint64(), m)
			if a == b || a < 0 || b < 0 || a >= m || b >= m {
				t.Fatalf("pair(m=%d) = %d, %d", m, a, b)
			}
			seen[[2]int{a, b}]++
		}
		if len(seen) != m*(m-1) {
			t.Errorf("pair(m=%d) produced %d ordered pairs, want %d", m, len(seen), m*(m-1))
		}
	}
}
