package limit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentRefusalsCostNothing: requests refused at the same moment
// must not spend tokens. The clock stands still within each step, and 8
// goroutines ask 25 times each at once; between steps it moves by one
// token's worth. Exactly the burst, then one request per step, must be
// admitted, and every refusal's wait must be at most one token's time.
// Reserving a token and cancelling the reservation when it must wait lets
// concurrent refusals leave the bucket in debt: fewer are admitted and
// Retry-After grows with the debt.
func TestConcurrentRefusalsCostNothing(t *testing.T) {
	for _, perIdentity := range []bool{false, true} {
		var now atomic.Pointer[time.Time]
		t0 := time.Unix(1000, 0)
		now.Store(&t0)
		l := New(Config{RPS: 100, Burst: 10, PerIdentity: perIdentity}, func() time.Time { return *now.Load() })
		const steps, workers, calls = 40, 8, 25
		admitted := 0
		var maxWait atomic.Int64
		for step := range steps {
			var n atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range calls {
						ok, d := l.Allow("alice")
						if ok {
							n.Add(1)
							continue
						}
						for {
							m := maxWait.Load()
							if int64(d) <= m || maxWait.CompareAndSwap(m, int64(d)) {
								break
							}
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			want := int64(1)
			if step == 0 {
				want = 10
			}
			if n.Load() != want {
				t.Errorf("per_identity %v: step %d admitted %d, want %d", perIdentity, step, n.Load(), want)
			}
			admitted += int(n.Load())
			next := now.Load().Add(10 * time.Millisecond)
			now.Store(&next)
		}
		if want := 10 + steps - 1; admitted != want {
			t.Errorf("per_identity %v: admitted %d over %d steps of one token, want %d", perIdentity, admitted, steps, want)
		}
		if w := time.Duration(maxWait.Load()); w > 10*time.Millisecond {
			t.Errorf("per_identity %v: a refusal was told to wait %v, want at most 10ms (one token at 100 rps)", perIdentity, w)
		}
	}
}

// TestRetryAfter: the wait a refusal reports is the time until the next
// whole token, for slow and fast rates.
func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name    string
		rps     float64
		elapsed time.Duration // since the bucket was emptied
		want    time.Duration
	}{
		{"one per 10s", 0.1, 0, 10 * time.Second},
		{"one per 10s, 4s later", 0.1, 4 * time.Second, 6 * time.Second},
		{"two per second", 2, 0, 500 * time.Millisecond},
		{"100 per second, 3ms later", 100, 3 * time.Millisecond, 7 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			l := New(Config{RPS: tt.rps, Burst: 1}, c.now)
			if ok, _ := l.Allow(""); !ok {
				t.Fatal("first request refused")
			}
			c.t = c.t.Add(tt.elapsed)
			ok, d := l.Allow("")
			if ok {
				t.Fatal("second request admitted")
			}
			if diff := d - tt.want; diff < -time.Microsecond || diff > time.Microsecond {
				t.Errorf("Allow after %v at %v rps: wait %v, want %v", tt.elapsed, tt.rps, d, tt.want)
			}
			// The refusal took nothing: the token is there at the promised time.
			c.t = c.t.Add(d)
			if ok, _ := l.Allow(""); !ok {
				t.Errorf("refused again %v later, when the wait was over", d)
			}
		})
	}
}
