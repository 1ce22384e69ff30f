package breaker

import (
	"slices"
	"strconv"
	"time"
)

// Snapshot is the observable state of a breaker, shaped for JSON (the
// status API and explain output).
type Snapshot struct {
	Name    string `json:"name,omitempty"`
	State   State  `json:"state"`
	Enabled bool   `json:"enabled"`
	// Since is when the breaker entered State, and Reason why.
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
	// OpenUntil is when an open breaker starts probing.
	OpenUntil time.Time `json:"open_until,omitzero"`
	// Probes is set while half-open.
	Probes *Probes `json:"probes,omitempty"`
	// Window describes the requests the trip conditions look at now.
	Window WindowStats `json:"window"`
	// Config is the configuration in force, defaults filled in.
	Config Config `json:"config"`
	// Transitions are the most recent transitions, oldest first (at most 20).
	Transitions []Transition `json:"transitions"`
}

// Probes counts the probes of the current half-open period.
type Probes struct {
	Limit     uint64 `json:"limit"`
	Admitted  uint64 `json:"admitted"`
	Succeeded uint64 `json:"succeeded"`
}

// WindowStats summarises the sliding window.
type WindowStats struct {
	Length   Duration `json:"length"`
	Requests uint64   `json:"requests"`
	Failures uint64   `json:"failures"`
	// ErrorRate is the failure percentage, 0 without requests.
	ErrorRate float64 `json:"error_rate"`
	// Slow counts the requests slower than p99_latency.
	Slow uint64 `json:"slow"`
	// P99 is estimated from the histogram to within 12.5%, and is above
	// p99_latency exactly when the latency condition holds.
	P99 Duration `json:"p99"`
}

// Transition is one change of state.
type Transition struct {
	At     time.Time `json:"at"`
	From   State     `json:"from"`
	To     State     `json:"to"`
	Reason string    `json:"reason"`
}

// Snapshot returns the breaker's state, window and recent transitions. Like
// State, it first makes any transition that is due by the clock.
func (b *Breaker) Snapshot() Snapshot {
	now := b.clock()
	b.mu.Lock()
	b.advanceLocked(now)
	w := b.word.Load()
	s := b.set.Load()
	win := b.win.Load()
	snap := Snapshot{
		Name:        b.name,
		State:       State(w & stateMask),
		Enabled:     s.enabled,
		Since:       b.timeAt(b.since),
		Reason:      b.reason,
		Config:      s.cfg.WithDefaults(),
		Transitions: slices.Clone(b.history),
	}
	switch snap.State {
	case Open:
		snap.OpenUntil = b.timeAt(b.openUntil.Load())
	case HalfOpen:
		snap.Probes = &Probes{Limit: s.probes, Admitted: (w & admitMask) >> admitShift, Succeeded: b.probeOK}
	}
	b.mu.Unlock()
	b.deliver()

	if snap.Transitions == nil {
		snap.Transitions = []Transition{}
	}
	var h [histBins]uint64
	var t totals
	if win != nil {
		t = win.at(max(now, win.cur.Load().start.Load()), &h)
	}
	snap.Window = WindowStats{
		Length:   Duration(s.window),
		Requests: t.requests,
		Failures: t.failures,
		Slow:     t.slow,
		P99:      Duration(estimateP99(&h, t.requests, t.slow, s.p99)),
	}
	if t.requests > 0 {
		snap.Window.ErrorRate = 100 * float64(t.failures) / float64(t.requests)
	}
	return snap
}

// formatPercent writes v as a percentage with as few decimals as it takes
// to show that v is above threshold when it is, so a reason never reads
// "20% > 20%". A threshold of 0 means v is itself a threshold, written
// exactly.
func formatPercent(v, threshold float64) string {
	if threshold == 0 {
		return strconv.FormatFloat(v, 'f', -1, 64) + "%"
	}
	var s string
	for prec := 0; prec <= 4; prec++ {
		s = strconv.FormatFloat(v, 'f', prec, 64)
		if r, _ := strconv.ParseFloat(s, 64); r > threshold || v <= threshold {
			break
		}
	}
	return s + "%"
}

// formatLatency rounds d to the millisecond (the microsecond below 1ms),
// or finer if rounding would hide that d is above threshold.
func formatLatency(d, threshold time.Duration) string {
	for _, unit := range []time.Duration{time.Millisecond, time.Microsecond, 1} {
		if d < unit && unit > 1 {
			continue
		}
		if r := d.Round(unit); r > threshold || d <= threshold {
			return r.String()
		}
	}
	return d.String()
}
