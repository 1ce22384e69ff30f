package breaker

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrent runs many goroutines through Allow and Record while time
// advances through good and bad phases and another goroutine reconfigures
// and reads the breaker. Run with -race. It checks that transitions form a
// valid sequence, that the hook saw them in order, and that no half-open
// period admitted more than its probes.
func TestConcurrent(t *testing.T) {
	const (
		workers = 8
		iters   = 3000
		probes  = 3
	)
	clk := newClock()
	t0 := clk.Now()
	var (
		hookMu sync.Mutex
		hooked []Transition
	)
	cfg := Config{Window: Duration(time.Second), OpenFor: Duration(time.Second), MinRequests: 10, HalfOpenProbes: probes}
	b, err := New(cfg, Options{Now: clk.Now, OnTransition: func(from, to State, reason string) {
		hookMu.Lock()
		hooked = append(hooked, Transition{From: from, To: to, Reason: reason})
		hookMu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}

	// bad reports whether the gray target is failing at time now: it fails
	// for 2s out of every 4s.
	bad := func(now time.Time) bool { return now.Sub(t0)/(2*time.Second)%2 == 1 }

	admitted := make([]map[uint64]int, workers) // half-open generation → probes admitted
	var recorded atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		admitted[w] = map[uint64]int{}
		wg.Go(func() {
			for i := range iters {
				if i%10 == 0 {
					clk.Advance(10 * time.Millisecond)
				}
				tk, ok := b.Allow()
				if !ok {
					continue
				}
				if State(tk.w&stateMask) == HalfOpen {
					admitted[w][tk.w>>genShift]++
				}
				now := clk.Now()
				o := Outcome{Latency: time.Duration(1+i%20) * time.Millisecond, End: now}
				if bad(now) {
					o.Failed = i%2 == 0
					o.Latency = slow
				}
				b.Record(tk, o)
				recorded.Add(1)
			}
		})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			c := cfg
			if i%2 == 1 {
				c.ErrorRate, c.P99Latency = 30, Duration(400*time.Millisecond)
			}
			if err := b.Configure(c); err != nil {
				t.Error(err)
				return
			}
			snap := b.Snapshot()
			if snap.Window.Requests > uint64(recorded.Load())+workers {
				t.Errorf("window holds %d requests, only %d recorded", snap.Window.Requests, recorded.Load())
			}
			_ = b.State()
			runtime.Gosched()
		}
	})
	wg.Wait()
	close(done)
	readers.Wait()

	hookMu.Lock()
	defer hookMu.Unlock()
	if len(hooked) < 6 {
		t.Fatalf("only %d transitions in %v of alternating failure; the test did not exercise the state machine", len(hooked), clk.Now().Sub(t0))
	}
	valid := map[[2]State]bool{{Closed, Open}: true, {Open, HalfOpen}: true, {HalfOpen, Open}: true, {HalfOpen, Closed}: true}
	prev := Closed
	closes := 0
	for i, tr := range hooked {
		if tr.From != prev || !valid[[2]State{tr.From, tr.To}] {
			t.Fatalf("transition %d: %v→%v after reaching %v", i, tr.From, tr.To, prev)
		}
		if tr.To == Closed {
			closes++
		}
		prev = tr.To
	}
	if closes == 0 {
		t.Error("the breaker never closed again in the good phases")
	}
	history := b.Snapshot().Transitions
	tail := hooked[max(0, len(hooked)-len(history)):]
	for i := range history {
		if history[i].From != tail[i].From || history[i].To != tail[i].To || history[i].Reason != tail[i].Reason {
			t.Fatalf("history[%d] = %+v, hook saw %+v", i, history[i], tail[i])
		}
	}
	perGen := map[uint64]int{}
	for _, m := range admitted {
		for g, n := range m {
			perGen[g] += n
		}
	}
	for g, n := range perGen {
		if n > probes {
			t.Errorf("half-open generation %d admitted %d probes, want at most %d", g, n, probes)
		}
	}
	t.Logf("%d transitions (%d closes), %d half-open periods, %d requests recorded over %v",
		len(hooked), closes, len(perGen), recorded.Load(), clk.Now().Sub(t0))
}
