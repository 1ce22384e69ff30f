package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a settable clock, safe for concurrent use.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newSet(t testing.TB, c *clock, opts Options) *Set {
	t.Helper()
	opts.Now = c.Now
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLatencyBounds(t *testing.T) {
	b := LatencyBounds()
	if len(b) != NumLatencyBuckets-1 {
		t.Fatalf("len(LatencyBounds()) = %d, want %d", len(b), NumLatencyBuckets-1)
	}
	if b[0] != 128*time.Microsecond || b[len(b)-1] != 29360128*time.Microsecond {
		t.Errorf("bounds run from %v to %v, want 128µs to 29.360128s", b[0], b[len(b)-1])
	}
	for i := 1; i < len(b); i++ {
		r := float64(b[i]) / float64(b[i-1])
		if r <= 1 || r > 1.25+1e-9 {
			t.Errorf("bound %d / bound %d = %.4f, want in (1, 1.25]", i, i-1, r)
		}
	}
}

func TestLatencyIndex(t *testing.T) {
	bounds := LatencyBounds()
	tests := []struct {
		name string
		d    time.Duration
		want int
	}{
		{"negative", -time.Second, 0},
		{"zero", 0, 0},
		{"1µs", time.Microsecond, 0},
		{"128µs exactly", 128 * time.Microsecond, 0},
		{"just over 128µs", 128*time.Microsecond + 1, 1},
		{"160µs", 160 * time.Microsecond, 1},
		{"161µs", 161 * time.Microsecond, 2},
		{"256µs", 256 * time.Microsecond, 4},
		{"257µs", 257 * time.Microsecond, 5},
		{"1ms", time.Millisecond, 12},
		{"1s", time.Second, 52},
		{"last bound", 29360128 * time.Microsecond, 71},
		{"over the last bound", 29360129 * time.Microsecond, 72},
		{"an hour", time.Hour, 72},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := latencyIndex(tt.d); got != tt.want {
				t.Errorf("latencyIndex(%v) = %d, want %d", tt.d, got, tt.want)
			}
		})
	}
	// Every latency lands in the bucket whose bounds enclose it.
	for d := time.Duration(0); d < 40*time.Second; d = d*21/20 + 997 {
		i := latencyIndex(d)
		lo, hi := time.Duration(0), time.Duration(math.MaxInt64)
		if i > 0 {
			lo = bounds[i-1]
		}
		if i < len(bounds) {
			hi = bounds[i]
		}
		if d > hi || (i > 0 && d <= lo) {
			t.Fatalf("latencyIndex(%v) = %d, whose bounds are (%v, %v]", d, i, lo, hi)
		}
	}
}

func TestQuantile(t *testing.T) {
	hist := func(pairs ...any) Counts {
		var c Counts
		for i := 0; i < len(pairs); i += 2 {
			n, d := pairs[i].(int), pairs[i+1].(time.Duration)
			for range n {
				idx := latencyIndex(d)
				for len(c.Latency) <= idx {
					c.Latency = append(c.Latency, 0)
				}
				c.Latency[idx]++
				c.Requests++
			}
		}
		return c
	}
	tests := []struct {
		name string
		c    Counts
		q    float64
		want time.Duration
	}{
		{"empty", Counts{}, 0.99, 0},
		{"one request", hist(1, 3*time.Millisecond), 0.99, 3072 * time.Microsecond},
		{"99 fast, 1 slow", hist(99, time.Millisecond, 1, time.Second), 0.99, 1024 * time.Microsecond},
		{"98 fast, 2 slow", hist(98, time.Millisecond, 2, time.Second), 0.99, 1048576 * time.Microsecond},
		{"median", hist(50, time.Millisecond, 50, time.Second), 0.5, 1024 * time.Microsecond},
		{"max", hist(50, time.Millisecond, 50, time.Second), 1, 1048576 * time.Microsecond},
		{"over the top bound", hist(1, time.Minute), 0.99, 29360128 * time.Microsecond},
		{"sub-128µs", hist(10, 20*time.Microsecond), 0.99, 128 * time.Microsecond},
		{"q of zero", hist(1, time.Second), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Quantile(tt.q); got != tt.want {
				t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

// TestQuantileResolution checks the documented resolution: the p99 read
// from the histogram is never below the true p99 and at most 25% above it.
func TestQuantileResolution(t *testing.T) {
	for _, base := range []time.Duration{200 * time.Microsecond, 3 * time.Millisecond, 47 * time.Millisecond, 900 * time.Millisecond, 7 * time.Second} {
		var c Counts
		c.Latency = make([]uint64, NumLatencyBuckets)
		lat := make([]time.Duration, 1000)
		for i := range lat {
			lat[i] = base + time.Duration(i)*base/500 // base .. 3×base, uniform
			c.Latency[latencyIndex(lat[i])]++
		}
		truth := lat[989] // the 990th smallest: ⌈0.99 × 1000⌉
		got := c.Quantile(0.99)
		if got < truth || float64(got) > 1.25*float64(truth) {
			t.Errorf("base %v: p99 from the histogram %v, true %v: want within [1, 1.25]×", base, got, truth)
		}
	}
}

func TestWindow(t *testing.T) {
	c := newClock()
	s := newSet(t, c, Options{})
	// Second 0: 8 gray requests, 2 of them 5xx, one a transport failure.
	for i := range 8 {
		status := 200
		if i < 2 {
			status = 503
		}
		s.Record("canary", "gray", status, false, 2*time.Millisecond)
	}
	s.Record("canary", "gray", 0, true, 40*time.Millisecond)
	s.Record("canary", "stable", 200, false, time.Millisecond)
	s.Record("canary", "stable", 404, false, time.Millisecond) // 4xx is not an error
	c.Advance(time.Second)
	// Second 1: 1 gray request; second 2 (current, incomplete): 5 more.
	s.Record("canary", "gray", 200, false, 500*time.Millisecond)
	c.Advance(time.Second)
	for range 5 {
		s.Record("canary", "gray", 200, false, time.Millisecond)
	}

	tests := []struct {
		name, rule, group string
		d                 time.Duration
		want              Stats
	}{
		{"gray over 10s", "canary", "gray", 10 * time.Second,
			Stats{Requests: 10, Errors: 3, Seconds: 10, RPS: 1, ErrorRate: 0.3, P99Ms: 524.288}},
		{"gray over the last second only", "canary", "gray", time.Second,
			Stats{Requests: 1, Errors: 0, Seconds: 1, RPS: 1, ErrorRate: 0, P99Ms: 524.288}},
		{"a window rounds up to whole buckets", "canary", "gray", 1500 * time.Millisecond,
			Stats{Requests: 10, Errors: 3, Seconds: 2, RPS: 5, ErrorRate: 0.3, P99Ms: 524.288}},
		{"stable", "canary", "stable", time.Minute,
			Stats{Requests: 2, Errors: 0, Seconds: 60, RPS: 2.0 / 60, ErrorRate: 0, P99Ms: 1.024}},
		{"unknown group", "canary", "nope", time.Minute, Stats{Seconds: 60}},
		{"unknown rule", "other", "gray", time.Minute, Stats{Seconds: 60}},
		{"windows stop at the span", "canary", "gray", time.Hour,
			Stats{Requests: 10, Errors: 3, Seconds: 180, RPS: 10.0 / 180, ErrorRate: 0.3, P99Ms: 524.288}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.Window(tt.rule, tt.group, tt.d)
			got.Counts = Counts{}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Window(%q, %q, %v) = %+v, want %+v", tt.rule, tt.group, tt.d, got, tt.want)
			}
		})
	}

	// The incomplete second counts once it is over; the oldest seconds
	// leave the window as the clock moves on.
	c.Advance(time.Second)
	if got := s.Window("canary", "gray", 2*time.Second).Requests; got != 6 {
		t.Errorf("after a second: Window(2s).Requests = %d, want 6", got)
	}
	c.Advance(3 * time.Minute)
	if got := s.Window("canary", "gray", 3*time.Minute).Requests; got != 0 {
		t.Errorf("after the span: Window(3m).Requests = %d, want 0", got)
	}
}

// TestRingReuse drives one series through several laps of its ring: each
// bucket is zeroed when a new second takes it, and never mixes seconds.
func TestRingReuse(t *testing.T) {
	c := newClock()
	s := newSet(t, c, Options{Width: time.Second, Span: 5 * time.Second}) // 6 slots
	for sec := range 20 {
		for range sec + 1 {
			s.Record("r", "g", 200, false, time.Millisecond)
		}
		c.Advance(time.Second)
		// The last 5 complete seconds hold sec-4 .. sec, each with n+1 requests.
		want := uint64(0)
		for k := max(0, sec-4); k <= sec; k++ {
			want += uint64(k + 1)
		}
		if got := s.Window("r", "g", 5*time.Second).Requests; got != want {
			t.Fatalf("after second %d: Window(5s).Requests = %d, want %d", sec, got, want)
		}
	}
	// A clock that skips several laps at once leaves no old second behind.
	c.Advance(time.Minute)
	s.Record("r", "g", 200, false, time.Millisecond)
	c.Advance(time.Second)
	if got := s.Window("r", "g", 5*time.Second).Requests; got != 1 {
		t.Errorf("after a minute's gap: Window(5s).Requests = %d, want 1", got)
	}
}

func TestIsError(t *testing.T) {
	c := newClock()
	s := newSet(t, c, Options{IsError: func(status int, failed bool) bool { return failed || status == 429 || status >= 500 }})
	for _, st := range []int{200, 429, 500, 404, 0} {
		s.Record("r", "g", st, st == 0, time.Millisecond)
	}
	c.Advance(time.Second)
	if got := s.Window("r", "g", time.Second); got.Requests != 5 || got.Errors != 3 {
		t.Errorf("Window = %d requests, %d errors; want 5 and 3", got.Requests, got.Errors)
	}
}

func TestNewOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"sub-millisecond width", Options{Width: time.Microsecond}, "traffic width"},
		{"fractional milliseconds", Options{Width: 1500 * time.Microsecond}, "traffic width"},
		{"negative width", Options{Width: -time.Second}, "traffic width"},
		{"span below width", Options{Width: time.Second, Span: time.Millisecond}, "traffic span"},
		{"defaults", Options{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.opts)
			if tt.want == "" {
				if err != nil || s.Width() != DefaultWidth || s.Span() != DefaultSpan {
					t.Fatalf("New(%+v) = %v, %v; want the defaults", tt.opts, s, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%+v) error = %v, want one naming %q", tt.opts, err, tt.want)
			}
		})
	}
}

func TestRetain(t *testing.T) {
	c := newClock()
	s := newSet(t, c, Options{Span: time.Minute})
	s.Record("keep", "gray", 200, false, time.Millisecond)
	s.Record("keep", "stable", 200, false, time.Millisecond)
	s.Record("gone", "gray", 200, false, time.Millisecond)
	s.Record("", "default", 200, false, time.Millisecond)
	if s.Len() != 4 {
		t.Fatalf("Len() = %d, want 4", s.Len())
	}
	s.Retain(func(rule string) bool { return rule == "keep" })
	if s.Len() != 3 || s.lookup("gone", "gray") != nil {
		t.Fatalf("after Retain(keep): Len() = %d, gone/gray present %v; want 3 series without it", s.Len(), s.lookup("gone", "gray") != nil)
	}
	// A series idle for the span is forgotten; an active one stays.
	c.Advance(50 * time.Second)
	s.Record("keep", "gray", 200, false, time.Millisecond)
	c.Advance(20 * time.Second)
	s.Retain(func(string) bool { return true })
	if s.Len() != 1 || s.lookup("keep", "gray") == nil {
		t.Errorf("after 70s: Len() = %d, keep/gray present %v; want only keep/gray", s.Len(), s.lookup("keep", "gray") != nil)
	}
	c.Advance(time.Second)
	if got := s.Window("keep", "gray", time.Minute).Requests; got != 1 {
		t.Errorf("keep/gray Window(1m).Requests = %d after Retain, want 1", got)
	}
}

// TestIdleSeriesForgotten checks that memory stays bounded without Retain:
// creating a series forgets those idle for the span.
func TestIdleSeriesForgotten(t *testing.T) {
	c := newClock()
	s := newSet(t, c, Options{Span: 10 * time.Second})
	for round := range 50 {
		for g := range 10 {
			s.Record(fmt.Sprintf("rule-%d", round), fmt.Sprint(g), 200, false, time.Millisecond)
		}
		c.Advance(5 * time.Second)
	}
	// Only the rounds of the last ~span can be held: 10 s of 5 s rounds is
	// 2–4 rounds of 10 groups.
	if n := s.Len(); n > 40 {
		t.Errorf("after 50 rounds of new series, Len() = %d, want at most 40", n)
	}
}

func TestWindowsAndExport(t *testing.T) {
	c := newClock()
	s := newSet(t, c, Options{})
	for sec := range 4 {
		for i := range 10 {
			status := 200
			if i == 0 {
				status = 500
			}
			s.Record("canary", "gray", status, false, time.Duration(i+1)*time.Millisecond)
			s.Record("canary", "stable", 200, false, time.Millisecond)
		}
		if sec == 2 {
			s.Record("", "default", 200, false, time.Millisecond)
		}
		c.Advance(time.Second)
	}
	ws := s.Windows(10 * time.Second)
	var names []string
	for _, w := range ws {
		names = append(names, w.Rule+"/"+w.Group)
	}
	if want := []string{"/default", "canary/gray", "canary/stable"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("Windows series = %v, want %v", names, want)
	}
	exp := s.Export(10 * time.Second)
	if exp.Schema != LatencySchema || exp.WidthMs != 1000 || len(exp.Series) != 3 || len(exp.Series[1].Buckets) != 4 {
		t.Fatalf("Export = schema %d width %d, %d series, %d gray buckets; want 1, 1000, 3, 4",
			exp.Schema, exp.WidthMs, len(exp.Series), len(exp.Series[1].Buckets))
	}
	end := c.Now().Truncate(time.Second)
	if exp.End != end.UnixMilli() {
		t.Errorf("Export.End = %d, want %d (the start of the current second)", exp.End, end.UnixMilli())
	}
	for _, w := range ws {
		got := exp.Window(w.Rule, w.Group, end, 10*time.Second)
		if got.Requests != w.Requests || got.Errors != w.Errors || got.P99Ms != w.P99Ms || got.RPS != w.RPS {
			t.Errorf("%s/%s: Export.Window = %+v, Set.Windows = %+v", w.Rule, w.Group, got, w.Stats)
		}
	}
	// The export survives JSON, as it will between gateways.
	raw, err := json.Marshal(exp)
	if err != nil {
		t.Fatal(err)
	}
	var back Export
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, exp) {
		t.Errorf("Export after a JSON round trip differs:\n%s", raw)
	}
}

func TestMerge(t *testing.T) {
	// Two gateways with synchronized clocks see different traffic.
	c1, c2 := newClock(), newClock()
	g1, g2 := newSet(t, c1, Options{}), newSet(t, c2, Options{})
	for range 99 {
		g1.Record("canary", "gray", 200, false, time.Millisecond)
	}
	g2.Record("canary", "gray", 502, false, 2*time.Second)
	g2.Record("canary", "gray", 502, false, 2*time.Second)
	g2.Record("canary", "stable", 200, false, time.Millisecond)
	c1.Advance(time.Second)
	c2.Advance(time.Second)
	merged, err := Merge(g1.Export(time.Minute), g2.Export(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	end := c1.Now().Truncate(time.Second)
	if merged.End != end.UnixMilli() {
		t.Errorf("merged End = %d, want %d", merged.End, end.UnixMilli())
	}
	gray := merged.Window("canary", "gray", end, time.Minute)
	// Alone, g1's p99 is 1 ms; the fleet's includes g2's two slow errors.
	if gray.Requests != 101 || gray.Errors != 2 || gray.P99() != 2097152*time.Microsecond {
		t.Errorf("merged gray = %d requests, %d errors, p99 %v; want 101, 2, 2.097152s", gray.Requests, gray.Errors, gray.P99())
	}
	if g1p99 := g1.Window("canary", "gray", time.Minute).P99(); g1p99 != 1024*time.Microsecond {
		t.Errorf("g1 alone: p99 %v, want 1.024ms", g1p99)
	}
	if st := merged.Window("canary", "stable", end, time.Minute); st.Requests != 1 {
		t.Errorf("merged stable = %d requests, want 1", st.Requests)
	}
	// Merging is associative with itself: merging a merge adds again.
	twice, err := Merge(merged, merged)
	if err != nil {
		t.Fatal(err)
	}
	if got := twice.Window("canary", "gray", end, time.Minute).Requests; got != 202 {
		t.Errorf("Merge(merged, merged) gray = %d requests, want 202", got)
	}

	bad := []struct {
		name string
		in   []Export
		want string
	}{
		{"schema", []Export{{Schema: 1, WidthMs: 1000}, {Schema: 2, WidthMs: 1000}}, "exports[1].schema"},
		{"unknown schema", []Export{{Schema: 9, WidthMs: 1000}}, "exports[0].schema"},
		{"width", []Export{{Schema: 1, WidthMs: 1000}, {Schema: 1, WidthMs: 2000}}, "exports[1].width_ms: 2000"},
		{"zero width", []Export{{Schema: 1}}, "exports[0].width_ms"},
		{"too many latency buckets", []Export{{Schema: 1, WidthMs: 1000, Series: []Series{{Rule: "r", Buckets: []Bucket{{Start: 0, Counts: Counts{Latency: make([]uint64, 80)}}}}}}},
			"exports[0].series[0].buckets[0].latency: 80 buckets"},
		{"misaligned start", []Export{{Schema: 1, WidthMs: 1000, Series: []Series{{Rule: "r", Buckets: []Bucket{{Start: 1500}}}}}}, "buckets[0].start: 1500"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Merge(tt.in...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Merge error = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// TestConcurrentRecord races writers against readers, Retain and a clock
// that moves: no request is lost or counted twice while the ring holds it.
func TestConcurrentRecord(t *testing.T) {
	c := newClock()
	s := newSet(t, c, Options{Span: time.Minute})
	const writers, perWriter = 8, 2000
	groups := []string{"gray", "stable", "A", "B"}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.Windows(time.Minute)
			s.Export(10 * time.Second)
			s.Retain(func(string) bool { return true })
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				s.Record(fmt.Sprint("rule-", w%3), groups[i%len(groups)], 200+300*(i%2), false, time.Duration(i)*time.Microsecond)
				if w == 0 && i%100 == 0 {
					c.Advance(time.Second) // 20 s in all, within the span
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	c.Advance(time.Second)
	var total, errs uint64
	for _, w := range s.Windows(time.Minute) {
		total += w.Requests
		errs += w.Errors
	}
	if total != writers*perWriter || errs != writers*perWriter/2 {
		t.Errorf("counted %d requests and %d errors, want %d and %d", total, errs, writers*perWriter, writers*perWriter/2)
	}
}

// TestRun checks that while Run runs, Record takes its bucket from Run
// rather than from the clock, and follows the clock as Run refreshes it.
func TestRun(t *testing.T) {
	c := newClock()
	var reads atomic.Int64
	s, err := New(Options{Now: func() time.Time { reads.Add(1); return c.Now() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("Run to start", func() bool { return s.cached.Load() >= 0 })
	s.Record("r", "g", 200, false, time.Millisecond) // creates the series
	before := reads.Load()
	for range 1000 {
		s.Record("r", "g", 200, false, time.Millisecond)
	}
	// Run's own ticks read the clock, at most every 100 ms.
	if n := reads.Load() - before; n > 50 {
		t.Errorf("1000 Records read the clock %d times while Run runs, want (almost) none", n)
	}
	want := s.epoch() + 1
	c.Advance(time.Second)
	waitFor("Run to see the next second", func() bool { return s.cached.Load() == want })
	s.Record("r", "g", 200, false, time.Millisecond)
	c.Advance(time.Second)
	waitFor("Run to see the second after", func() bool { return s.cached.Load() == want+1 })
	if got := s.Window("r", "g", time.Second).Requests; got != 1 {
		t.Errorf("Window(1s).Requests = %d, want 1 (the request of the second second)", got)
	}
	if got := s.Window("r", "g", 2*time.Second).Requests; got != 1002 {
		t.Errorf("Window(2s).Requests = %d, want 1002", got)
	}
	cancel()
	<-done
	if s.cached.Load() != -1 {
		t.Error("after Run returned, Record still uses its bucket number")
	}
}

func TestRecordAllocs(t *testing.T) {
	c := newClock()
	s := newSet(t, c, Options{})
	s.Record("canary", "gray", 200, false, time.Millisecond)
	allocs := testing.AllocsPerRun(1000, func() {
		s.Record("canary", "gray", 200, false, time.Millisecond)
	})
	if allocs != 0 {
		t.Errorf("Record allocates %v times per call, want 0", allocs)
	}
}

// FuzzMerge feeds Merge exports as another gateway might publish them:
// it must never panic, and what it accepts must read back sane windows.
func FuzzMerge(f *testing.F) {
	f.Add([]byte(`{"schema":1,"width_ms":1000,"series":[{"rule":"r","group":"g","buckets":[{"start":1000,"requests":3,"errors":1,"latency":[1,2]}]}]}`))
	f.Add([]byte(`{"schema":1,"width_ms":1000,"series":[{"rule":"r","group":"g","buckets":[{"start":-1000,"requests":18446744073709551615,"latency":[18446744073709551615,1]}]}]}`))
	f.Add([]byte(`{"schema":2,"width_ms":0}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var e Export
		if err := json.Unmarshal(raw, &e); err != nil {
			return
		}
		m, err := Merge(e, e)
		if err != nil {
			return
		}
		for _, s := range m.Series {
			for _, b := range s.Buckets {
				st := m.Window(s.Rule, s.Group, time.UnixMilli(b.Start+m.WidthMs), time.Duration(m.WidthMs)*time.Millisecond)
				if st.ErrorRate < 0 || math.IsNaN(st.RPS) || st.P99Ms < 0 {
					t.Fatalf("window of an accepted export: %+v", st)
				}
			}
		}
	})
}
