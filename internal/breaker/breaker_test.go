package breaker

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const (
	fast = 10 * time.Millisecond
	slow = 812 * time.Millisecond
)

// send offers n requests to b and records the allowed ones with the given
// outcome, ending now. It returns how many were allowed.
func send(b *Breaker, clk *fakeClock, n int, failed bool, latency time.Duration) int {
	allowed := 0
	for range n {
		t, ok := b.Allow()
		if !ok {
			continue
		}
		allowed++
		b.Record(t, Outcome{Latency: latency, Failed: failed, End: clk.Now()})
	}
	return allowed
}

func newTestBreaker(t *testing.T, cfg Config, clk *fakeClock) *Breaker {
	t.Helper()
	b, err := New(cfg, Options{Name: "test", Now: clk.Now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// tripped returns a breaker that the error rate has just opened.
func tripped(t *testing.T, cfg Config, clk *fakeClock) *Breaker {
	t.Helper()
	b := newTestBreaker(t, cfg, clk)
	send(b, clk, 20, true, fast)
	if got := b.State(); got != Open {
		t.Fatalf("after 20 failures: State() = %v, want open", got)
	}
	return b
}

func TestTransitions(t *testing.T) {
	type step struct {
		advance time.Duration
		n       int
		failed  bool
		latency time.Duration
		// wantAllowed is how many of the n requests Allow let through
		// (-1: don't check).
		wantAllowed int
		want        State
		wantReason  string
	}
	const any = -1
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "error rate above threshold opens",
			steps: []step{
				{n: 80, latency: fast, wantAllowed: 80, want: Closed},
				// 20 of 100 is 20%, which does not exceed 20%.
				{n: 20, failed: true, latency: fast, wantAllowed: 20, want: Closed},
				{n: 1, failed: true, latency: fast, wantAllowed: 1, want: Open,
					wantReason: "error rate 21% > 20% over 30s (21 of 101 requests)"},
				{n: 10, latency: fast, wantAllowed: 0, want: Open},
			},
		},
		{
			name: "p99 latency alone opens",
			steps: []step{
				{n: 200, latency: fast, wantAllowed: 200, want: Closed},
				// 2 slow of 202: the 200th of 202 is still fast.
				{n: 2, latency: slow, wantAllowed: 2, want: Closed},
				{n: 1, latency: slow, wantAllowed: 1, want: Open,
					wantReason: "p99 latency 816ms > 500ms over 30s (203 requests)"},
			},
		},
		{
			name: "latency at the threshold is not above it",
			steps: []step{
				{n: 100, latency: 500 * time.Millisecond, wantAllowed: 100, want: Closed},
				{n: 1, latency: 500*time.Millisecond + time.Microsecond, wantAllowed: 1, want: Closed},
				{n: 1, latency: 500*time.Millisecond + time.Microsecond, wantAllowed: 1, want: Open,
					wantReason: "p99 latency 501ms > 500ms over 30s (102 requests)"},
			},
		},
		{
			name: "no trip below min_requests",
			steps: []step{
				{n: 19, failed: true, latency: fast, wantAllowed: 19, want: Closed},
				{n: 1, failed: true, latency: fast, wantAllowed: 1, want: Open,
					wantReason: "error rate 100% > 20% over 30s (20 of 20 requests)"},
			},
		},
		{
			name: "reaching min_requests with a success trips an already bad window",
			steps: []step{
				{n: 10, failed: true, latency: fast, wantAllowed: 10, want: Closed},
				{n: 9, latency: fast, wantAllowed: 9, want: Closed},
				{n: 1, latency: fast, wantAllowed: 1, want: Open,
					wantReason: "error rate 50% > 20% over 30s (10 of 20 requests)"},
			},
		},
		{
			// Issue 12, item 8: with min_requests 20, one slow request used
			// to be "the p99" and opened the breaker for 60s.
			name: "one slow request at low traffic does not open",
			steps: []step{
				{n: 19, latency: fast, wantAllowed: 19, want: Closed},
				{n: 1, latency: slow, wantAllowed: 1, want: Closed},
				{n: 79, latency: fast, wantAllowed: 79, want: Closed},
				// 100 requests, 1 slow: the p99 (rank 99) is fast.
				{n: 1, latency: fast, wantAllowed: 1, want: Closed},
			},
		},
		{
			name: "slow requests below latency_min_requests are judged when the window reaches it",
			steps: []step{
				{n: 60, latency: slow, wantAllowed: 60, want: Closed},
				{n: 39, latency: fast, wantAllowed: 39, want: Closed},
				// The 100th request is fast, but it makes the window big
				// enough to judge, and 60 of 100 were slow.
				{n: 1, latency: fast, wantAllowed: 1, want: Open,
					wantReason: "p99 latency 871ms > 500ms over 30s (100 requests)"},
			},
		},
		{
			name: "the error rate is judged from min_requests, below latency_min_requests",
			steps: []step{
				{n: 16, latency: slow, wantAllowed: 16, want: Closed},
				{n: 4, failed: true, latency: slow, wantAllowed: 4, want: Closed},
				// Every request was slow, but only the error rate is judged.
				{n: 1, failed: true, latency: slow, wantAllowed: 1, want: Open,
					wantReason: "error rate 24% > 20% over 30s (5 of 21 requests)"},
			},
		},
		{
			name: "a lower latency_min_requests judges fewer samples",
			cfg:  Config{LatencyMinRequests: 20},
			steps: []step{
				{n: 19, latency: fast, wantAllowed: 19, want: Closed},
				{n: 1, latency: slow, wantAllowed: 1, want: Open,
					wantReason: "p99 latency 839ms > 500ms over 30s (20 requests)"},
			},
		},
		{
			name: "latency_min_requests ages out with the window",
			steps: []step{
				// 1 slow of 151: the p99 (rank 150) is fast.
				{n: 150, latency: fast, wantAllowed: 150, want: Closed},
				{n: 1, latency: slow, wantAllowed: 1, want: Closed},
				// Everything ages out; 50 slow in a fresh window of 50
				// are not judged.
				{advance: 31 * time.Second, n: 50, latency: slow, wantAllowed: 50, want: Closed},
			},
		},
		{
			name: "custom thresholds",
			cfg:  Config{ErrorRate: 50, P99Latency: Duration(time.Second), MinRequests: 4, Window: Duration(10 * time.Second)},
			steps: []step{
				{n: 2, failed: true, latency: slow, wantAllowed: 2, want: Closed},
				{n: 2, latency: slow, wantAllowed: 2, want: Closed},
				{n: 1, failed: true, latency: fast, wantAllowed: 1, want: Open,
					wantReason: "error rate 60% > 50% over 10s (3 of 5 requests)"},
			},
		},
		{
			name: "open refuses until open_for has passed, then half-open admits probes",
			steps: []step{
				{n: 20, failed: true, latency: fast, wantAllowed: 20, want: Open},
				{advance: 59*time.Second + 999*time.Millisecond, n: 3, wantAllowed: 0, want: Open},
				{advance: time.Millisecond, n: 2, latency: fast, wantAllowed: 2, want: HalfOpen,
					wantReason: "open for 1m0s; letting 5 probes through"},
			},
		},
		{
			name: "all probes succeed: closed",
			steps: []step{
				{n: 20, failed: true, latency: fast, want: Open, wantAllowed: any},
				{advance: time.Minute, n: 4, latency: fast, wantAllowed: 4, want: HalfOpen},
				{n: 1, latency: fast, wantAllowed: 1, want: Closed, wantReason: "5 of 5 probes succeeded"},
				// Closing starts an empty window: the old failures are gone.
				{n: 19, failed: true, latency: fast, wantAllowed: 19, want: Closed},
			},
		},
		{
			name: "a failed probe reopens",
			steps: []step{
				{n: 20, failed: true, latency: fast, want: Open, wantAllowed: any},
				{advance: time.Minute, n: 2, latency: fast, wantAllowed: 2, want: HalfOpen},
				{n: 1, failed: true, latency: fast, wantAllowed: 1, want: Open, wantReason: "probe failed"}, // the outcome says nothing more
				// A fresh open period, counted from the failure.
				{advance: 59 * time.Second, n: 1, wantAllowed: 0, want: Open},
				{advance: time.Second, n: 5, latency: fast, wantAllowed: 5, want: Closed},
			},
		},
		{
			name: "a slow probe reopens",
			steps: []step{
				{n: 20, failed: true, latency: fast, want: Open, wantAllowed: any},
				{advance: time.Minute, n: 1, latency: slow, wantAllowed: 1, want: Open,
					wantReason: "probe latency 812ms > 500ms"},
			},
		},
		{
			name: "custom probes and open period",
			cfg:  Config{OpenFor: Duration(5 * time.Second), HalfOpenProbes: 2},
			steps: []step{
				{n: 20, failed: true, latency: fast, want: Open, wantAllowed: any},
				{advance: 5 * time.Second, n: 1, latency: fast, wantAllowed: 1, want: HalfOpen,
					wantReason: "open for 5s; letting 2 probes through"},
				{n: 1, latency: fast, wantAllowed: 1, want: Closed, wantReason: "2 of 2 probes succeeded"},
				// The 20 failures that tripped it are 5s old, well inside the
				// 30s window, but closing starts the window over.
				{n: 1, failed: true, latency: fast, wantAllowed: 1, want: Closed},
			},
		},
		{
			name: "old failures age out of the window",
			steps: []step{
				{n: 15, failed: true, latency: fast, wantAllowed: 15, want: Closed},
				{advance: 30 * time.Second, n: 20, latency: fast, wantAllowed: 20, want: Closed},
				{n: 5, failed: true, latency: fast, wantAllowed: 5, want: Closed},
			},
		},
		{
			name: "failures still in the window count",
			steps: []step{
				{n: 15, failed: true, latency: fast, wantAllowed: 15, want: Closed},
				// The fifth success brings the window to min_requests.
				{advance: 29 * time.Second, n: 20, latency: fast, wantAllowed: 5, want: Open,
					wantReason: "error rate 75% > 20% over 30s (15 of 20 requests)"},
			},
		},
		{
			name: "successes ageing out trip the breaker when the window moves",
			steps: []step{
				{n: 100, latency: fast, wantAllowed: 100, want: Closed},
				{advance: 15 * time.Second, n: 21, failed: true, latency: fast, wantAllowed: 21, want: Closed},
				// The first slot leaves the window; what remains is all failures.
				{advance: 16 * time.Second, n: 1, latency: fast, wantAllowed: 1, want: Open,
					wantReason: "error rate 100% > 20% over 30s (21 of 21 requests)"},
			},
		},
		{
			name: "slow requests ageing out of the window",
			steps: []step{
				{n: 1, latency: slow, wantAllowed: 1, want: Closed},
				{advance: 30 * time.Second, n: 19, latency: fast, wantAllowed: 19, want: Closed},
				{n: 1, latency: fast, wantAllowed: 1, want: Closed},
			},
		},
		{
			name: "disabled never trips",
			cfg:  Config{Enabled: new(false)},
			steps: []step{
				{n: 100, failed: true, latency: slow, wantAllowed: 100, want: Closed},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := newTestBreaker(t, tt.cfg, clk)
			for i, st := range tt.steps {
				clk.Advance(st.advance)
				got := send(b, clk, st.n, st.failed, st.latency)
				if st.wantAllowed != any && got != st.wantAllowed {
					t.Errorf("step %d: %d of %d requests allowed, want %d", i, got, st.n, st.wantAllowed)
				}
				if s := b.State(); s != st.want {
					t.Fatalf("step %d: State() = %v, want %v (reason %q)", i, s, st.want, b.Snapshot().Reason)
				}
				if st.wantReason != "" {
					if r := b.Snapshot().Reason; r != st.wantReason {
						t.Errorf("step %d: reason = %q, want %q", i, r, st.wantReason)
					}
				}
			}
		})
	}
}

func TestHalfOpenRefusesBeyondProbesInFlight(t *testing.T) {
	clk := newClock()
	b := tripped(t, Config{}, clk)
	clk.Advance(time.Minute)
	var probes []Ticket
	for range 5 {
		tk, ok := b.Allow()
		if !ok {
			t.Fatalf("probe %d refused", len(probes)+1)
		}
		probes = append(probes, tk)
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("Allow() with 5 probes in flight = true, want false")
	}
	// Results coming in do not free a probe slot: five probes per period.
	for _, tk := range probes[:4] {
		b.Record(tk, Outcome{Latency: fast, End: clk.Now()})
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("Allow() after 4 of 5 probes reported = true, want false")
	}
	snap := b.Snapshot()
	if snap.Probes == nil || *snap.Probes != (Probes{Limit: 5, Admitted: 5, Succeeded: 4}) {
		t.Errorf("Snapshot().Probes = %+v, want 5 admitted, 4 succeeded", snap.Probes)
	}
	b.Record(probes[4], Outcome{Latency: fast, End: clk.Now()})
	if got := b.State(); got != Closed {
		t.Fatalf("State() = %v, want closed", got)
	}
	// A ticket is good for one result only.
	b.Record(probes[0], Outcome{Failed: true, End: clk.Now()})
	if got := b.Snapshot().Window.Requests; got != 0 {
		t.Errorf("a probe ticket recorded into the closed window: %d requests", got)
	}
}

func TestStaleTicketIsNotAProbe(t *testing.T) {
	clk := newClock()
	b := newTestBreaker(t, Config{}, clk)
	early, ok := b.Allow() // a slow request admitted while closed
	if !ok {
		t.Fatal("Allow() on a new breaker = false")
	}
	send(b, clk, 20, true, fast)
	clk.Advance(time.Minute)
	if _, ok := b.Allow(); !ok {
		t.Fatal("first probe refused")
	}
	// The early request finally finishes, successfully.
	b.Record(early, Outcome{Latency: time.Minute, End: clk.Now()})
	if p := b.Snapshot().Probes; p == nil || p.Succeeded != 0 {
		t.Errorf("a closed-state ticket counted as a probe: %+v", p)
	}
	// A failure on a stale ticket does not reopen either.
	b.Record(early, Outcome{Failed: true, End: clk.Now()})
	if got := b.State(); got != HalfOpen {
		t.Errorf("State() = %v after a stale failure, want half-open", got)
	}
	// Nor does the zero Ticket count.
	b.Record(Ticket{}, Outcome{Failed: true, End: clk.Now()})
	if got := b.State(); got != HalfOpen {
		t.Errorf("State() = %v after a zero Ticket, want half-open", got)
	}
}

func TestLostProbesReopen(t *testing.T) {
	clk := newClock()
	b := tripped(t, Config{}, clk)
	clk.Advance(time.Minute)
	for i := range 5 {
		if _, ok := b.Allow(); !ok {
			t.Fatalf("probe %d refused", i+1)
		}
	}
	clk.Advance(59 * time.Second)
	if _, ok := b.Allow(); ok || b.State() != HalfOpen {
		t.Fatalf("59s after the last probe: Allow() = %v, State() = %v; want refused, half-open", ok, b.State())
	}
	clk.Advance(time.Second)
	if _, ok := b.Allow(); ok {
		t.Fatal("Allow() after the probe timeout = true, want false")
	}
	snap := b.Snapshot()
	if snap.State != Open || snap.Reason != "5 of 5 probes did not report within 1m0s" {
		t.Errorf("after the probe timeout: %v %q, want open with the lost-probe reason", snap.State, snap.Reason)
	}
	if want := clk.Now().Add(time.Minute); !snap.OpenUntil.Equal(want) {
		t.Errorf("OpenUntil = %v, want %v", snap.OpenUntil, want)
	}
}

func TestRecordWithoutEndReadsTheClock(t *testing.T) {
	clk := newClock()
	b := newTestBreaker(t, Config{}, clk)
	for range 15 {
		tk, _ := b.Allow()
		b.Record(tk, Outcome{Latency: fast, Failed: true})
	}
	clk.Advance(30 * time.Second)
	for range 20 {
		tk, _ := b.Allow()
		b.Record(tk, Outcome{Latency: fast})
	}
	// Had the breaker not read the (advanced) clock, the 15 failures would
	// still be in the window: 15 of 35 is above 20%.
	if snap := b.Snapshot(); snap.State != Closed || snap.Window.Requests != 20 || snap.Window.Failures != 0 {
		t.Errorf("state %v, window %d requests %d failures; want closed, 20, 0", snap.State, snap.Window.Requests, snap.Window.Failures)
	}
}

func TestLateRecords(t *testing.T) {
	clk := newClock()
	b := newTestBreaker(t, Config{}, clk)
	start := clk.Now()
	send(b, clk, 5, false, fast)
	clk.Advance(2 * time.Second)
	send(b, clk, 5, false, fast)
	// A request that ended in the first slot reports after the window moved.
	tk, _ := b.Allow()
	b.Record(tk, Outcome{Latency: fast, Failed: true, End: start})
	// One that ended before the window is dropped.
	tk, _ = b.Allow()
	b.Record(tk, Outcome{Latency: fast, Failed: true, End: start.Add(-time.Minute)})
	w := b.Snapshot().Window
	if w.Requests != 11 || w.Failures != 1 {
		t.Errorf("window = %d requests, %d failures; want 11, 1", w.Requests, w.Failures)
	}
}

func TestTransitionHistoryAndHook(t *testing.T) {
	clk := newClock()
	type call struct {
		from, to State
		reason   string
	}
	var calls []call
	var b *Breaker
	b, err := New(Config{}, Options{Name: "r1|10.0.0.2:8080", Now: clk.Now, OnTransition: func(from, to State, reason string) {
		calls = append(calls, call{from, to, reason})
		// The hook may look at the breaker.
		if s := b.Snapshot(); s.State != to || s.Reason != reason {
			t.Errorf("hook sees %v %q, want %v %q", s.State, s.Reason, to, reason)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := clk.Now()
	send(b, clk, 20, true, fast)
	clk.Advance(time.Minute)
	send(b, clk, 1, true, fast)
	clk.Advance(time.Minute)
	send(b, clk, 5, false, fast)

	want := []Transition{
		{At: t0, From: Closed, To: Open, Reason: "error rate 100% > 20% over 30s (20 of 20 requests)"},
		{At: t0.Add(time.Minute), From: Open, To: HalfOpen, Reason: "open for 1m0s; letting 5 probes through"},
		{At: t0.Add(time.Minute), From: HalfOpen, To: Open, Reason: "probe failed"},
		{At: t0.Add(2 * time.Minute), From: Open, To: HalfOpen, Reason: "open for 1m0s; letting 5 probes through"},
		{At: t0.Add(2 * time.Minute), From: HalfOpen, To: Closed, Reason: "5 of 5 probes succeeded"},
	}
	snap := b.Snapshot()
	if !slices.EqualFunc(snap.Transitions, want, func(a, b Transition) bool {
		return a.At.Equal(b.At) && a.From == b.From && a.To == b.To && a.Reason == b.Reason
	}) {
		t.Errorf("Transitions =\n%v\nwant\n%v", snap.Transitions, want)
	}
	if len(calls) != len(want) {
		t.Fatalf("hook called %d times, want %d", len(calls), len(want))
	}
	for i, c := range calls {
		if c.from != want[i].From || c.to != want[i].To || c.reason != want[i].Reason {
			t.Errorf("hook call %d = %v→%v %q, want %v→%v %q", i, c.from, c.to, c.reason, want[i].From, want[i].To, want[i].Reason)
		}
	}
	if snap.Name != "r1|10.0.0.2:8080" || !snap.Since.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("Name, Since = %q, %v", snap.Name, snap.Since)
	}
}

func TestTransitionHistoryIsBounded(t *testing.T) {
	clk := newClock()
	b := tripped(t, Config{}, clk)
	for range 15 { // two transitions each
		clk.Advance(time.Minute)
		send(b, clk, 1, true, fast)
	}
	tr := b.Snapshot().Transitions
	if len(tr) != maxTransitions {
		t.Fatalf("len(Transitions) = %d, want %d", len(tr), maxTransitions)
	}
	if last := tr[len(tr)-1]; last.To != Open || last.Reason != "probe failed" {
		t.Errorf("last transition = %+v, want the latest probe failure", last)
	}
	if first := tr[0]; first.From == Closed {
		t.Errorf("the oldest transitions were kept: %+v", first)
	}
}

func TestSnapshotJSON(t *testing.T) {
	clk := newClock()
	b := newTestBreaker(t, Config{}, clk)
	send(b, clk, 150, false, fast)
	send(b, clk, 41, true, fast) // trips at the 38th failure: 38 of 188 > 20%
	snap := b.Snapshot()
	if snap.Window.Requests != 188 || snap.Window.Failures != 38 {
		t.Fatalf("window = %+v", snap.Window)
	}
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	window := got["window"].(map[string]any)
	config := got["config"].(map[string]any)
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"state", got["state"], "open"},
		{"reason", got["reason"], "error rate 20.2% > 20% over 30s (38 of 188 requests)"},
		{"open_until", got["open_until"], "2025-03-01T12:01:00Z"},
		{"window.length", window["length"], "30s"},
		{"window.requests", window["requests"], 188.0},
		// 188 samples at 10ms share bin [9.437ms, 10.486ms); rank 187 interpolates to 99.2% of it.
		{"window.p99", window["p99"], "10.477393ms"},
		{"config.p99_latency", config["p99_latency"], "500ms"},
		{"config.error_statuses", config["error_statuses"], []any{"500-599"}},
		{"transitions[0].to", got["transitions"].([]any)[0].(map[string]any)["to"], "open"},
	}
	for _, c := range checks {
		if g, _ := json.Marshal(c.got); string(g) != mustJSON(t, c.want) {
			t.Errorf("%s = %s, want %s", c.name, g, mustJSON(t, c.want))
		}
	}
	if _, ok := got["probes"]; ok {
		t.Error("probes present while open")
	}
	var back Snapshot
	if err := json.Unmarshal(data, &back); err != nil || back.State != Open {
		t.Errorf("Snapshot does not round-trip: %v, state %v", err, back.State)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStateText(t *testing.T) {
	for _, s := range []State{Closed, Open, HalfOpen} {
		text, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Errorf("State %v round-trips to %v, %v", s, back, err)
		}
	}
	if _, err := State(7).MarshalText(); err == nil {
		t.Error("State(7).MarshalText() succeeded")
	}
	var s State
	if err := s.UnmarshalText([]byte("ajar")); err == nil || !strings.Contains(err.Error(), `"ajar"`) {
		t.Errorf(`UnmarshalText("ajar") = %v`, err)
	}
}

func TestConfigure(t *testing.T) {
	t.Run("keeps an open breaker open, with the new open_for", func(t *testing.T) {
		clk := newClock()
		b := tripped(t, Config{}, clk)
		since := b.Snapshot().Since
		clk.Advance(10 * time.Second)
		if err := b.Configure(Config{ErrorRate: 50, OpenFor: Duration(20 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		snap := b.Snapshot()
		if snap.State != Open || !snap.Since.Equal(since) || snap.Config.ErrorRate != 50 {
			t.Fatalf("after Configure: %v since %v, error_rate %v", snap.State, snap.Since, snap.Config.ErrorRate)
		}
		if want := since.Add(20 * time.Second); !snap.OpenUntil.Equal(want) {
			t.Errorf("OpenUntil = %v, want %v", snap.OpenUntil, want)
		}
		clk.Advance(10 * time.Second)
		if got := b.State(); got != HalfOpen {
			t.Errorf("State() 20s after opening = %v, want half-open", got)
		}
	})
	t.Run("a lowered threshold the window exceeds trips at once", func(t *testing.T) {
		clk := newClock()
		b := newTestBreaker(t, Config{}, clk)
		send(b, clk, 10, true, fast)
		send(b, clk, 5, false, slow)
		if err := b.Configure(Config{MinRequests: 10, LatencyMinRequests: 10}); err != nil {
			t.Fatal(err)
		}
		want := "error rate 67% > 20% over 30s (10 of 15 requests); p99 latency 866ms > 500ms over 30s (15 requests)"
		if snap := b.Snapshot(); snap.State != Open || snap.Reason != want {
			t.Errorf("after Configure: %v %q, want open %q", snap.State, snap.Reason, want)
		}
	})
	t.Run("a new p99 threshold reclassifies the window", func(t *testing.T) {
		clk := newClock()
		b := newTestBreaker(t, Config{}, clk)
		send(b, clk, 100, false, 300*time.Millisecond)
		if got := b.Snapshot().Window.Slow; got != 0 {
			t.Fatalf("Slow = %d under 500ms, want 0", got)
		}
		if err := b.Configure(Config{P99Latency: Duration(250 * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		snap := b.Snapshot()
		// All 100 samples are in bin [268ms, 302ms), above the new threshold.
		if want := "p99 latency 301ms > 250ms over 30s (100 requests)"; snap.State != Open || snap.Reason != want {
			t.Errorf("after lowering p99_latency: %v %q", snap.State, snap.Reason)
		}
		if snap.Window.Slow != 100 {
			t.Errorf("Slow = %d, want 100", snap.Window.Slow)
		}
	})
	t.Run("a new p99 threshold reaches the older buckets the hot path sums", func(t *testing.T) {
		clk := newClock()
		b := newTestBreaker(t, Config{MinRequests: 300}, clk)
		send(b, clk, 100, false, 300*time.Millisecond)
		clk.Advance(2 * time.Second)
		send(b, clk, 1, false, fast) // a new bucket: the first one is now in the past
		if err := b.Configure(Config{MinRequests: 300, P99Latency: Duration(250 * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		if got := b.State(); got != Closed {
			t.Fatalf("State() = %v below min_requests, want closed", got)
		}
		// The request that reaches min_requests must see the 100 requests
		// that the new threshold made slow.
		send(b, clk, 199, false, fast)
		if got := b.State(); got != Open {
			t.Errorf("State() = %v with 100 of 300 requests over p99_latency, want open", got)
		}
	})
	t.Run("an unrelated change keeps the window", func(t *testing.T) {
		clk := newClock()
		b := newTestBreaker(t, Config{}, clk)
		send(b, clk, 15, true, fast)
		if err := b.Configure(Config{HalfOpenProbes: 3}); err != nil {
			t.Fatal(err)
		}
		if got := b.Snapshot().Window.Failures; got != 15 {
			t.Errorf("Failures = %d after Configure, want 15", got)
		}
		send(b, clk, 5, true, fast)
		if got := b.State(); got != Open {
			t.Errorf("State() = %v, want open", got)
		}
	})
	t.Run("a new window length starts counting over", func(t *testing.T) {
		clk := newClock()
		b := newTestBreaker(t, Config{}, clk)
		send(b, clk, 15, true, fast)
		if err := b.Configure(Config{Window: Duration(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		w := b.Snapshot().Window
		if w.Requests != 0 || w.Length != Duration(time.Minute) {
			t.Errorf("window = %+v, want empty, 1m", w)
		}
	})
	t.Run("disabling closes, enabling starts clean", func(t *testing.T) {
		clk := newClock()
		b := tripped(t, Config{}, clk)
		if err := b.Configure(Config{Enabled: new(false)}); err != nil {
			t.Fatal(err)
		}
		if snap := b.Snapshot(); snap.State != Closed || snap.Reason != "disabled by config" || snap.Enabled {
			t.Fatalf("after disabling: %v %q enabled=%v", snap.State, snap.Reason, snap.Enabled)
		}
		if got := send(b, clk, 50, true, fast); got != 50 {
			t.Errorf("a disabled breaker allowed %d of 50", got)
		}
		if err := b.Configure(Config{}); err != nil {
			t.Fatal(err)
		}
		if w := b.Snapshot().Window; w.Requests != 0 {
			t.Errorf("re-enabled window = %+v, want empty", w)
		}
		send(b, clk, 20, true, fast)
		if got := b.State(); got != Open {
			t.Errorf("State() = %v after re-enabling and 20 failures, want open", got)
		}
	})
	t.Run("half_open_probes lowered to the probes that succeeded closes", func(t *testing.T) {
		clk := newClock()
		b := tripped(t, Config{}, clk)
		clk.Advance(60 * time.Second)
		if got := send(b, clk, 3, false, fast); got != 3 {
			t.Fatalf("half-open allowed %d of 3 probes", got)
		}
		if err := b.Configure(Config{HalfOpenProbes: 3}); err != nil {
			t.Fatal(err)
		}
		if snap := b.Snapshot(); snap.State != Closed || snap.Reason != "3 of 3 probes succeeded" {
			t.Fatalf("after lowering half_open_probes to 3 with 3 probes succeeded: %v %q, want closed", snap.State, snap.Reason)
		}
		if got := send(b, clk, 10, false, fast); got != 10 {
			t.Errorf("closed breaker allowed %d of 10", got)
		}
	})
	t.Run("half_open_probes lowered above the successes waits for them", func(t *testing.T) {
		clk := newClock()
		b := tripped(t, Config{}, clk)
		clk.Advance(60 * time.Second)
		send(b, clk, 2, false, fast)
		tk, ok := b.Allow() // a third probe, still out
		if !ok {
			t.Fatal("the third probe was refused")
		}
		if err := b.Configure(Config{HalfOpenProbes: 3}); err != nil {
			t.Fatal(err)
		}
		if got := b.State(); got != HalfOpen {
			t.Fatalf("State() = %v with a probe still out, want half-open", got)
		}
		if _, ok := b.Allow(); ok {
			t.Error("a fourth probe was admitted under half_open_probes 3")
		}
		b.Record(tk, Outcome{Latency: fast, End: clk.Now()})
		if got := b.State(); got != Closed {
			t.Errorf("State() = %v after the third probe succeeded, want closed", got)
		}
	})
	t.Run("an invalid config changes nothing", func(t *testing.T) {
		clk := newClock()
		b := newTestBreaker(t, Config{ErrorRate: 30}, clk)
		if err := b.Configure(Config{ErrorRate: 300}); err == nil {
			t.Fatal("Configure(error_rate 300) succeeded")
		}
		if got := b.Config().ErrorRate; got != 30 {
			t.Errorf("error_rate = %v, want 30", got)
		}
	})
}

func TestIsErrorStatus(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		code int
		want bool
	}{
		{"default 500", Config{}, 500, true},
		{"default 599", Config{}, 599, true},
		{"default 499", Config{}, 499, false},
		{"default 200", Config{}, 200, false},
		{"custom code", Config{ErrorStatuses: []StatusRange{{502, 504}, {429, 429}}}, 429, true},
		{"custom excludes 500", Config{ErrorStatuses: []StatusRange{{502, 504}, {429, 429}}}, 500, false},
		{"empty list: no status fails", Config{ErrorStatuses: []StatusRange{}}, 503, false},
		{"out of range", Config{}, 700, false},
		{"negative", Config{}, -500, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBreaker(t, tt.cfg, newClock())
			if got := b.IsErrorStatus(tt.code); got != tt.want {
				t.Errorf("IsErrorStatus(%d) = %v, want %v", tt.code, got, tt.want)
			}
		})
	}
}

// TestWindowMadeByFirstRequest checks that a breaker holds no window (about
// 20 KB) until it records a request, so idle rules cost little, and that
// its counts and state behave as if the window had always been there.
func TestWindowMadeByFirstRequest(t *testing.T) {
	clk := newClock()
	b := newTestBreaker(t, Config{}, clk)
	if b.win.Load() != nil {
		t.Fatal("a new breaker already has a window")
	}
	if snap := b.Snapshot(); snap.Window.Requests != 0 || snap.Window.Length != Duration(30*time.Second) {
		t.Errorf("idle breaker's window: %+v", snap.Window)
	}
	send(b, clk, 3, false, fast)
	if b.win.Load() == nil {
		t.Fatal("no window after three requests")
	}
	if snap := b.Snapshot(); snap.Window.Requests != 3 {
		t.Errorf("window counts %d requests, want 3", snap.Window.Requests)
	}
	// A new window length starts counting over, in a window made later.
	if err := b.Configure(Config{Window: Duration(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if snap := b.Snapshot(); b.win.Load() != nil || snap.Window.Requests != 0 || snap.Window.Length != Duration(10*time.Second) {
		t.Errorf("after a new window length: window %v, stats %+v", b.win.Load() != nil, snap.Window)
	}
	// Tripping still works from a window made by the first failure.
	send(b, clk, 20, true, fast)
	if b.State() != Open {
		t.Errorf("State() = %v after 20 failures, want open", b.State())
	}
}

func BenchmarkNewBreaker(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(Config{}, Options{Name: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestProbeFailureSaysWhat: a failed half-open probe reopens the breaker
// with what failed, for the notification and the status: the answer's
// status, its gRPC status, or the transport's error. It said only
// "probe failed".
func TestProbeFailureSaysWhat(t *testing.T) {
	tests := []struct {
		name string
		o    Outcome
		want string
	}{
		{"5xx answer", Outcome{Failed: true, Status: 503, GRPCStatus: -1}, "probe failed: status 503"},
		{"gRPC status", Outcome{Failed: true, Status: 200, GRPCStatus: 14}, "probe failed: grpc-status 14 (UNAVAILABLE)"},
		{"transport error", Outcome{Failed: true, GRPCStatus: -1, Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")},
			"probe failed: dial tcp 127.0.0.1:1: connect: connection refused"},
		{"a status outside error_statuses that failed otherwise", Outcome{Failed: true, Status: 200, GRPCStatus: -1}, "probe failed: status 200"},
		{"nothing known", Outcome{Failed: true, GRPCStatus: -1}, "probe failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := newTestBreaker(t, Config{}, clk)
			send(b, clk, 20, true, time.Millisecond)
			clk.Advance(time.Minute)
			tk, ok := b.Allow()
			if !ok || b.State() != HalfOpen {
				t.Fatalf("no probe allowed after open_for (state %v)", b.State())
			}
			tt.o.End = clk.Now()
			b.Record(tk, tt.o)
			if s := b.Snapshot(); s.State != Open || s.Reason != tt.want {
				t.Errorf("after the probe: %v %q, want open %q", s.State, s.Reason, tt.want)
			}
		})
	}
}
