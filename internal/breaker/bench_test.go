package breaker

import (
	"testing"
	"time"
)

// benchOutcome returns the i-th outcome of a healthy mix: latencies from
// 1ms to 64ms and one failure in a hundred, well below every threshold.
func benchOutcome(i int, end time.Time) Outcome {
	return Outcome{Latency: time.Duration(1+i%64) * time.Millisecond, Failed: i%100 == 0, End: end}
}

func benchBreaker(b *testing.B) *Breaker {
	br, err := New(Config{}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return br
}

// BenchmarkAllowRecordClosed is the per-request cost on the hot path: Allow
// and Record on a closed breaker, the end time supplied by the caller as
// the proxy does. The end time advances 1µs per request, so the window
// rotates every million requests.
func BenchmarkAllowRecordClosed(b *testing.B) {
	br := benchBreaker(b)
	end := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		end = end.Add(time.Microsecond)
		t, ok := br.Allow()
		if !ok {
			b.Fatal("breaker opened")
		}
		br.Record(t, benchOutcome(i, end))
		i++
	}
}

// BenchmarkAllowRecordClosedClock is the same with Outcome.End left zero,
// so the breaker reads the clock itself; the difference is the host's cost
// of time.Now.
func BenchmarkAllowRecordClosedClock(b *testing.B) {
	br := benchBreaker(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t, ok := br.Allow()
		if !ok {
			b.Fatal("breaker opened")
		}
		br.Record(t, benchOutcome(i, time.Time{}))
		i++
	}
}

// BenchmarkAllowRecordClosedParallel runs the hot path from all CPUs on one
// breaker, the contended case of a popular gray target. Each goroutine
// reads the real clock once per 256 requests for the end times.
func BenchmarkAllowRecordClosedParallel(b *testing.B) {
	br := benchBreaker(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var end time.Time
		i := 0
		for pb.Next() {
			if i%256 == 0 {
				end = time.Now()
			}
			t, ok := br.Allow()
			if !ok {
				b.Error("breaker opened")
				return
			}
			br.Record(t, benchOutcome(i, end))
			i++
		}
	})
}

// BenchmarkAllowOpen is the cost of refusing a request while open, which
// reads the clock.
func BenchmarkAllowOpen(b *testing.B) {
	br := benchBreaker(b)
	for range 20 {
		t, _ := br.Allow()
		br.Record(t, Outcome{Failed: true})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := br.Allow(); ok {
			b.Fatal("open breaker allowed a request")
		}
	}
}

// BenchmarkSnapshot is the cost of one status entry.
func BenchmarkSnapshot(b *testing.B) {
	br := benchBreaker(b)
	end := time.Now()
	for i := range 100_000 {
		t, _ := br.Allow()
		br.Record(t, benchOutcome(i, end.Add(time.Duration(i)*200*time.Microsecond)))
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = br.Snapshot()
	}
}
