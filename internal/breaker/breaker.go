package breaker

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// State is where a breaker is: Closed lets requests through, Open sends
// them to stable, HalfOpen lets a few probes through.
type State uint8

// The states of a breaker.
const (
	Closed State = iota
	Open
	HalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText writes the state as String does.
func (s State) MarshalText() ([]byte, error) {
	if s > HalfOpen {
		return nil, fmt.Errorf("invalid breaker state %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText parses "closed", "open" or "half-open".
func (s *State) UnmarshalText(b []byte) error {
	for _, c := range []State{Closed, Open, HalfOpen} {
		if string(b) == c.String() {
			*s = c
			return nil
		}
	}
	return fmt.Errorf(`expected "closed", "open" or "half-open", got %q`, b)
}

// Ticket ties the outcome of a request to the breaker state that let it
// through, so that a request admitted while closed and finishing after the
// breaker has tripped and gone half-open is not mistaken for a probe. The
// zero Ticket is never current. A Ticket belongs to the breaker that issued
// it.
type Ticket struct{ w uint64 }

// Outcome is how one request went. The caller classifies: connection
// failures, timeouts and responses whose status IsErrorStatus are Failed.
type Outcome struct {
	// Latency is how long the request took; every outcome, failed or not,
	// counts towards the p99.
	Latency time.Duration
	// Failed marks a failure for the error rate.
	Failed bool
	// End is when the request finished. Callers that measured Latency
	// already hold it, and passing it saves the breaker a clock read, which
	// costs from 20 ns to several hundred depending on the host. The zero
	// value means the breaker reads its clock.
	End time.Time
	// Status, GRPCStatus and Err say what failed, for the reason of a
	// failed half-open probe ("probe failed: status 503"): the answer's
	// HTTP status (0 when none came), its gRPC status (-1 when none), and
	// the failure to get or finish the answer (nil when it came whole).
	Status     int
	GRPCStatus int
	Err        error
}

// failure describes what made a failed outcome fail, "" when o does not
// say.
func (s *settings) failure(o Outcome) string {
	switch {
	case o.Err != nil:
		return o.Err.Error()
	case o.Status != 0 && s.statuses.Contains(o.Status):
		return fmt.Sprintf("status %d", o.Status)
	case s.grpc.contains(o.GRPCStatus) && o.GRPCStatus < len(grpcNames):
		return fmt.Sprintf("grpc-status %d (%s)", o.GRPCStatus, grpcNames[o.GRPCStatus])
	case o.Status != 0:
		return fmt.Sprintf("status %d", o.Status)
	}
	return ""
}

// probeFailed is the reason of a transition after a failed probe.
func (s *settings) probeFailed(o Outcome) string {
	if what := s.failure(o); what != "" {
		return "probe failed: " + what
	}
	return "probe failed"
}

// Options are the parts of a breaker that are not rule configuration.
type Options struct {
	// Name appears in snapshots, typically the Set key.
	Name string
	// Now is the clock (default time.Now). Tests inject a fake one.
	Now func() time.Time
	// OnTransition is called once for every change of state, in order, with
	// the reason (for example "error rate 34.2% > 20% over 30s (41 of 120
	// requests)"). It runs on the goroutine whose call caused the change,
	// after the breaker's lock is released, so it may call Snapshot or
	// State; it should be quick.
	OnTransition func(from, to State, reason string)
}

// maxTransitions is how many transitions a breaker remembers for Snapshot.
const maxTransitions = 20

// The breaker's state word packs the state, the number of probes admitted
// in the current half-open period and a generation that grows on every
// transition, so that Allow is one atomic load when closed and a probe is
// admitted with one compare-and-swap that cannot succeed across a
// transition.
const (
	stateBits  = 2
	stateMask  = 1<<stateBits - 1
	admitShift = stateBits
	admitBits  = 16
	admitOne   = 1 << admitShift
	admitMask  = (1<<admitBits - 1) << admitShift
	genShift   = admitShift + admitBits
)

// Breaker is a circuit breaker for one gray target. It is safe for
// concurrent use. Times inside it are nanoseconds since its creation (its
// epoch), measured with the injected clock.
type Breaker struct {
	// Read by every request.
	word      atomic.Uint64
	set       atomic.Pointer[settings]
	win       atomic.Pointer[window] // nil until a request is recorded (startWindow)
	openUntil atomic.Int64           // while open: when it may go half-open
	lastProbe atomic.Int64           // while half-open: when the last probe was admitted
	_         [cacheLine]byte

	name         string
	now          func() time.Time
	epoch        time.Time
	onTransition func(from, to State, reason string)

	mu         sync.Mutex
	since      int64
	reason     string
	probeOK    uint64
	history    []Transition
	pending    []Transition
	delivering atomic.Bool
}

// New returns a closed breaker. It reports an invalid cfg as Validate does.
func New(cfg Config, opts Options) (*Breaker, error) {
	if err := cfg.Validate(""); err != nil {
		return nil, err
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	b := &Breaker{name: opts.Name, now: now, epoch: now(), onTransition: opts.OnTransition}
	s := newSettings(cfg)
	b.set.Store(s)
	b.word.Store(1<<genShift | uint64(Closed))
	return b, nil
}

// Name returns Options.Name.
func (b *Breaker) Name() string { return b.name }

// Config returns the configuration in force, with defaults filled in.
func (b *Breaker) Config() Config { return b.set.Load().cfg.WithDefaults() }

// IsErrorStatus reports whether a response status counts as a failure
// under the configured error_statuses.
func (b *Breaker) IsErrorStatus(code int) bool { return b.set.Load().statuses.Contains(code) }

// IsErrorGRPC reports whether a gRPC status code (grpc-status) counts as a
// failure under the configured grpc_error_codes. A negative code (none
// was seen) never does.
func (b *Breaker) IsErrorGRPC(code int) bool { return b.set.Load().grpc.contains(code) }

func (b *Breaker) clock() int64 { return int64(b.now().Sub(b.epoch)) }

func (b *Breaker) timeAt(at int64) time.Time { return b.epoch.Add(time.Duration(at)).Round(0) }

// Allow reports whether a request may go to the gray target; if not, the
// caller sends it to stable. Every allowed request must be followed by one
// Record with the returned Ticket; a request that is not allowed must not be
// recorded. When closed, Allow is a single atomic load.
func (b *Breaker) Allow() (Ticket, bool) {
	w := b.word.Load()
	if State(w&stateMask) == Closed {
		return Ticket{w}, true
	}
	return b.allowSlow(w)
}

func (b *Breaker) allowSlow(w uint64) (Ticket, bool) {
	for {
		switch State(w & stateMask) {
		case Closed:
			return Ticket{w}, true
		case Open:
			now := b.clock()
			if now < b.openUntil.Load() {
				return Ticket{}, false
			}
			b.advance(now)
		case HalfOpen:
			s := b.set.Load()
			now := b.clock()
			if (w&admitMask)>>admitShift >= s.probes {
				// Every probe is out. Refuse, unless the last one has been
				// out so long that a result was evidently lost.
				if now-b.lastProbe.Load() < int64(s.probeTimeout) {
					return Ticket{}, false
				}
				b.advance(now)
				break
			}
			b.lastProbe.Store(now)
			if b.word.CompareAndSwap(w, w+admitOne) {
				return Ticket{w + admitOne}, true
			}
		}
		w = b.word.Load()
	}
}

// Record reports the outcome of a request that Allow let through. Outcomes
// whose Ticket is from an earlier state are ignored. In the closed state it
// costs a few atomic adds and no allocation.
func (b *Breaker) Record(t Ticket, o Outcome) {
	w := b.word.Load()
	if w>>genShift != t.w>>genShift {
		return
	}
	switch State(w & stateMask) {
	case Closed:
		b.recordClosed(o)
	case HalfOpen:
		b.recordProbe(t, o)
	}
}

func (b *Breaker) recordClosed(o Outcome) {
	s := b.set.Load()
	if !s.enabled {
		return
	}
	var at int64
	if o.End.IsZero() {
		at = b.clock()
	} else {
		at = int64(o.End.Sub(b.epoch))
	}
	w := b.win.Load()
	if w == nil {
		w = b.startWindow(at)
	}
	sl := w.cur.Load()
	if st := sl.start.Load(); at < st || at-st >= w.width {
		if sl = b.rotate(w, at); sl == nil {
			return
		}
	}
	inc := uint64(1)
	if o.Failed {
		inc += failureOne
	}
	c := sl.counts.Add(inc)
	slow := o.Latency > s.p99
	var slowN uint64
	if slow {
		slowN = sl.slow.Add(1)
	}
	sl.hist[binOf(o.Latency)].Add(1)

	// Within a slot the error rate can only cross its threshold on a
	// failure and the p99 only on a slow request (floor(n/100) never falls
	// as n grows), and either only once the window reaches min_requests;
	// the p99 also only from latency_min_requests on, so the request that
	// reaches that count is checked too. Rotation, which ages requests
	// out, evaluates on its own.
	n := c&(failureOne-1) + w.pastRequests.Load()
	if n < s.minRequests || (!o.Failed && !slow && n != s.minRequests && n != s.latencyMin) {
		return
	}
	failures := c>>32 + w.pastFailures.Load()
	if !slow {
		slowN = sl.slow.Load()
	}
	slowN += w.pastSlow.Load()
	if failures*10000 > s.rateBP*n || s.slowTrips(n, slowN) {
		b.trip(w, at)
	}
}

// startWindow returns the breaker's window, made first if it has none. A
// breaker gets its window (about 20 KB) with the first request it records,
// so that a config with thousands of gray rules pays only for the rules
// that see traffic.
func (b *Breaker) startWindow(at int64) *window {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.win.Load()
	if w == nil {
		w = newWindow(b.set.Load().window, at)
		b.win.Store(w)
	}
	return w
}

// rotate returns the slot for at, starting a new one if at is past the
// current slot. It returns nil for a request that finished before the
// oldest slot still held.
func (b *Breaker) rotate(w *window, at int64) *slot {
	b.mu.Lock()
	sl := b.rotateLocked(w, at)
	b.mu.Unlock()
	b.deliver()
	return sl
}

func (b *Breaker) rotateLocked(w *window, at int64) *slot {
	cur := w.cur.Load()
	cs := cur.start.Load()
	if at >= cs && at-cs < w.width {
		return cur // another goroutine rotated first
	}
	start := w.startOf(at)
	sl := w.slotFor(at)
	if start < cs {
		// A request that finished in an earlier slot, reported late.
		if sl.start.Load() == start {
			return sl
		}
		return nil
	}
	sl.reset(start)
	w.cur.Store(sl)
	w.refreshPast()
	// Requests just aged out, which can raise the error rate or the p99.
	if State(b.word.Load()&stateMask) == Closed && b.win.Load() == w {
		b.evaluateLocked(w, at)
	}
	return sl
}

// refreshPast recomputes the totals of the slots before the current one.
func (w *window) refreshPast() {
	start := w.cur.Load().start.Load()
	t := w.sum(start-(numSlots-1)*w.width, start-1, nil)
	w.pastRequests.Store(t.requests)
	w.pastFailures.Store(t.failures)
	w.pastSlow.Store(t.slow)
}

// trip re-evaluates the window under the lock, where the hot path's check
// was made on counters that other goroutines keep moving.
func (b *Breaker) trip(w *window, at int64) {
	b.mu.Lock()
	if State(b.word.Load()&stateMask) == Closed && b.win.Load() == w {
		b.evaluateLocked(w, at)
	}
	b.mu.Unlock()
	b.deliver()
}

// evaluateLocked opens the breaker if the window ending at at (or at the
// current slot, if that is later) meets a trip condition.
func (b *Breaker) evaluateLocked(w *window, at int64) {
	s := b.set.Load()
	if !s.enabled {
		return
	}
	at = max(at, w.cur.Load().start.Load())
	t := w.at(at, nil)
	if t.requests < s.minRequests || !s.trips(t) {
		return
	}
	// Sum again with the histogram, so that the numbers in the reason come
	// from one pass.
	var h [histBins]uint64
	t = w.at(at, &h)
	if t.requests < s.minRequests || !s.trips(t) {
		return
	}
	var reasons []string
	if t.failures*10000 > s.rateBP*t.requests {
		rate := 100 * float64(t.failures) / float64(t.requests)
		reasons = append(reasons, fmt.Sprintf("error rate %s > %s over %s (%d of %d requests)",
			formatPercent(rate, s.cfg.ErrorRate), formatPercent(s.cfg.ErrorRate, 0), w.length, t.failures, t.requests))
	}
	if s.slowTrips(t.requests, t.slow) {
		p := estimateP99(&h, t.requests, t.slow, s.p99)
		reasons = append(reasons, fmt.Sprintf("p99 latency %s > %s over %s (%d requests)",
			formatLatency(p, s.p99), s.p99, w.length, t.requests))
	}
	b.transitionLocked(Open, at, strings.Join(reasons, "; "))
}

func (s *settings) trips(t totals) bool {
	return t.failures*10000 > s.rateBP*t.requests || s.slowTrips(t.requests, t.slow)
}

// slowTrips reports whether n requests, slow of which exceeded p99_latency,
// trip the latency condition: only with latency_min_requests of them, so
// that a percentile is judged on enough samples to be one.
func (s *settings) slowTrips(n, slow uint64) bool {
	return n >= s.latencyMin && p99Exceeds(n, slow)
}

func (b *Breaker) recordProbe(t Ticket, o Outcome) {
	b.mu.Lock()
	s := b.set.Load()
	w := b.word.Load()
	if w>>genShift != t.w>>genShift || State(w&stateMask) != HalfOpen {
		b.mu.Unlock()
		return
	}
	var at int64
	if o.End.IsZero() {
		at = b.clock()
	} else {
		at = int64(o.End.Sub(b.epoch))
	}
	switch {
	case o.Failed:
		b.transitionLocked(Open, at, s.probeFailed(o))
	case o.Latency > s.p99:
		b.transitionLocked(Open, at, fmt.Sprintf("probe latency %s > %s", formatLatency(o.Latency, s.p99), s.p99))
	default:
		b.probeOK++
		if b.probeOK >= s.probes {
			b.transitionLocked(Closed, at, fmt.Sprintf("%d of %d probes succeeded", b.probeOK, b.probeOK))
		}
	}
	b.mu.Unlock()
	b.deliver()
}

// State returns the current state. An open breaker whose open period is
// over reports (and becomes) half-open, as the next Allow would make it.
func (b *Breaker) State() State {
	if st := State(b.word.Load() & stateMask); st == Closed {
		return st
	}
	b.advance(b.clock())
	return State(b.word.Load() & stateMask)
}

// advance makes the transitions that are due by the clock alone: open to
// half-open after open_for, and half-open back to open when every probe has
// been admitted and none has reported for probeTimeout.
func (b *Breaker) advance(now int64) {
	b.mu.Lock()
	b.advanceLocked(now)
	b.mu.Unlock()
	b.deliver()
}

func (b *Breaker) advanceLocked(now int64) {
	w := b.word.Load()
	s := b.set.Load()
	switch State(w & stateMask) {
	case Open:
		if until := b.openUntil.Load(); now >= until {
			b.transitionLocked(HalfOpen, until, fmt.Sprintf("open for %s; letting %d probes through", s.openFor, s.probes))
		}
	case HalfOpen:
		admitted := (w & admitMask) >> admitShift
		if admitted >= s.probes && now-b.lastProbe.Load() >= int64(s.probeTimeout) {
			b.transitionLocked(Open, now, fmt.Sprintf("%d of %d probes did not report within %s",
				admitted-min(admitted, b.probeOK), admitted, s.probeTimeout))
		}
	}
}

// transitionLocked moves to state to at time at. It must be called with
// b.mu held; the hook runs later, in deliver.
func (b *Breaker) transitionLocked(to State, at int64, reason string) {
	w := b.word.Load()
	from := State(w & stateMask)
	s := b.set.Load()
	switch to {
	case Open:
		b.openUntil.Store(at + int64(s.openFor))
	case HalfOpen:
		b.probeOK = 0
		b.lastProbe.Store(at)
	case Closed:
		// The window that tripped the breaker describes the old fault;
		// counting starts over, in a window made by the next request.
		b.win.Store(nil)
	}
	b.word.Store((w>>genShift+1)<<genShift | uint64(to))
	b.since, b.reason = at, reason
	tr := Transition{At: b.timeAt(at), From: from, To: to, Reason: reason}
	if len(b.history) == maxTransitions {
		b.history = append(b.history[:0], b.history[1:]...)
	}
	b.history = append(b.history, tr)
	if b.onTransition != nil {
		b.pending = append(b.pending, tr)
	}
}

// deliver calls OnTransition for pending transitions, in order, outside
// the lock. Only one goroutine delivers at a time; a transition caused from
// inside the hook is queued and delivered when the hook returns, so the
// hook may call back into the breaker without deadlock.
func (b *Breaker) deliver() {
	if b.onTransition == nil {
		return
	}
	for b.delivering.CompareAndSwap(false, true) {
		for {
			b.mu.Lock()
			if len(b.pending) == 0 {
				b.mu.Unlock()
				break
			}
			tr := b.pending[0]
			b.pending = b.pending[1:]
			b.mu.Unlock()
			b.callHook(tr)
		}
		b.delivering.Store(false)
		// A transition queued between the last check and the Store above
		// saw delivering set and left it to us.
		b.mu.Lock()
		more := len(b.pending) > 0
		b.mu.Unlock()
		if !more {
			return
		}
	}
}

func (b *Breaker) callHook(tr Transition) {
	defer func() {
		if r := recover(); r != nil {
			b.delivering.Store(false)
			panic(r)
		}
	}()
	b.onTransition(tr.From, tr.To, tr.Reason)
}

// Configure applies a changed configuration without resetting the state:
// an open breaker stays open (for the new open_for, counted from when it
// opened), a half-open one keeps its probes, and the window keeps its counts
// unless its length changed, in which case counting starts over because old
// buckets do not fit the new ones. A lowered threshold that the window
// already exceeds trips the breaker at once, and a half-open breaker whose
// half_open_probes is lowered to no more than its probes that already
// succeeded closes at once. Disabling closes the breaker.
func (b *Breaker) Configure(cfg Config) error {
	if err := cfg.Validate(""); err != nil {
		return err
	}
	ns := newSettings(cfg)
	b.mu.Lock()
	b.configureLocked(ns)
	b.mu.Unlock()
	b.deliver()
	return nil
}

func (b *Breaker) configureLocked(ns *settings) {
	old := b.set.Load()
	if old.cfg.equal(ns.cfg) {
		return
	}
	now := b.clock()
	b.set.Store(ns)
	st := State(b.word.Load() & stateMask)
	switch {
	case ns.window != old.window || (ns.enabled && !old.enabled):
		b.win.Store(nil) // counting starts over with the next request
	case ns.p99 != old.p99:
		if w := b.win.Load(); w != nil {
			w.reclassify(ns.p99)
			w.refreshPast()
		}
	}
	switch {
	case !ns.enabled:
		if st != Closed {
			b.transitionLocked(Closed, now, "disabled by config")
		}
	case st == Open && ns.openFor != old.openFor:
		b.openUntil.Store(b.since + int64(ns.openFor))
	case st == HalfOpen && b.probeOK >= ns.probes:
		// half_open_probes was lowered to what has already succeeded: no
		// probe is left to report, so waiting would only end in a false
		// "did not report" reopening.
		b.transitionLocked(Closed, now, fmt.Sprintf("%d of %d probes succeeded", b.probeOK, b.probeOK))
	case st == Closed:
		if w := b.win.Load(); w != nil {
			b.evaluateLocked(w, now)
		}
	}
}
