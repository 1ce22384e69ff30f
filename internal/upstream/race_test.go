package upstream

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReloadRace serves from many goroutines while the pool is rebuilt
// from changing instance lists and the old registry retired, as config
// reloads and discovery updates do. Under -race it checks the shared state;
// at the end every in-flight count must be back to zero and every probe
// loop gone.
func TestReloadRace(t *testing.T) {
	backends := make([]*backend, 4)
	for i := range backends {
		backends[i] = newBackend(t)
	}
	backends[3].status.Store(500) // one instance fails its probes throughout
	h := NewHealth(HealthOptions{})
	defer h.Close()

	balancers := []Balancer{RoundRobin, Weighted, LeastRequest}
	build := func(gen int, r *rand.Rand) *Registry {
		var insts []*Instance
		for i, b := range backends {
			if i == 0 || r.IntN(2) == 0 { // backend 0 is always there
				insts = append(insts, &Instance{Addr: addrOf(b.Server), Weight: i + 1,
					Metadata: map[string]string{"version": string(rune('1' + i%2))}})
			}
		}
		p := mustPool(t, "svc", insts, PoolOptions{
			Balancer: balancers[gen%len(balancers)], Health: h, VersionHeader: "version",
			Passive: &PassiveHealth{ConsecutiveFailures: 3, BaseEjection: Duration(time.Millisecond), MaxEjection: Duration(4 * time.Millisecond)},
			Active:  fastProbes,
		})
		return NewRegistry(map[string]*Pool{"svc": p})
	}
	var cur atomic.Pointer[Registry]
	rr := rand.New(rand.NewPCG(7, 8))
	first := build(0, rr)
	cur.Store(first)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served, refused atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			targets := []string{"svc", "svc@version=1", "svc@version=2"}
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := cur.Load().Resolve(targets[r.IntN(len(targets))])
				if err != nil {
					t.Errorf("Resolve: %v", err)
					return
				}
				in, err := p.PickVersion([]string{"", "1", "2", "9"}[r.IntN(4)])
				if err != nil {
					if !errors.Is(err, ErrNoInstance) {
						t.Errorf("Pick: %v", err)
						return
					}
					refused.Add(1)
					continue
				}
				served.Add(1)
				_ = p.Stats()
				p.Report(in, r.IntN(4) != 0)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for gen := 1; gen <= 60; gen++ {
			old := cur.Load()
			next := old.WithNamed(build(gen, rr).named)
			cur.Store(next)
			old.Retire(next)
			_ = h.Snapshot()
		}
		close(stop)
	}()
	wg.Wait()
	if served.Load() == 0 {
		t.Fatal("nothing was served")
	}
	for _, s := range h.Snapshot() {
		if s.InFlight != 0 {
			t.Errorf("%s has %d in flight after every request reported", s.Addr, s.InFlight)
		}
	}
	if got, want := h.ProbeLoops(), len(cur.Load().named["svc"].Instances); got != want {
		t.Errorf("probe loops = %d, want %d (one per address of the live pool)", got, want)
	}
	cur.Load().Close()
	if n := h.ProbeLoops(); n != 0 {
		t.Errorf("probe loops after the last pool closed = %d", n)
	}
	t.Logf("served %d, refused %d", served.Load(), refused.Load())
}
