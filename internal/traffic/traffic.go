// Package traffic keeps live request counters per rule and group in fixed
// time buckets: request count, error count and a latency histogram. The
// console's overview reads rates, error rates and p99 latencies from it,
// and progressive rollouts compare groups over windows of it.
//
// Each (rule, group) series is a ring of buckets (1 s wide, 3 minutes kept
// by default), each bucket a set of atomic counters, so Record takes no
// lock and allocates nothing once its series exists; a bucket is zeroed
// under the series' mutex once per lap, by the first request that finds it
// holding an old second. The latency histogram has fixed, log-spaced
// bounds (LatencyBounds: 128 µs to 29.36 s, four buckets per octave), so
// histograms from different gateways add bucket by bucket: a fleet sums
// its gateways' Exports with Merge and reads quantiles from the sum. A
// p99 read from the histogram is the upper bound of its bucket: never
// below the true value, at most 25% above it.
//
// Buckets are numbered by wall-clock time at New plus the monotonic time
// since, so gateways with synchronized clocks agree on bucket starts, and
// a clock step does not scramble the ring. Reading the clock can cost
// more than the rest of Record together (BenchmarkRecordClock against
// BenchmarkRecord: 89–305 ns against 34–55 ns on this project's loaded
// machine), so while Run runs, Record reads the bucket number Run keeps
// instead, refreshed every tenth of a bucket (at most 100 ms): a request
// may land in the previous bucket for that long after a boundary.
//
// Memory: a series holds (Span/Width + 1) buckets of 308 bytes (55 KiB at
// the defaults). Series exist only for pairs that saw traffic; a series
// without requests for Span is forgotten, and Retain forgets the rules the
// gateway no longer has.
package traffic

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Options.
const (
	DefaultWidth = time.Second
	DefaultSpan  = 3 * time.Minute
)

// Options configure New.
type Options struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Width is the bucket width, a whole number of milliseconds
	// (default 1 s).
	Width time.Duration
	// Span is how far back windows reach (default 3 minutes).
	Span time.Duration
	// IsError says which requests count as errors; nil counts a failed
	// request (a transport failure) and every 5xx answer.
	IsError func(status int, failed bool) bool
}

// Set holds the series of a gateway. It is safe for concurrent use.
type Set struct {
	now     func() time.Time
	isError func(status int, failed bool) bool
	width   int64 // ns
	slots   int64
	base    time.Time
	baseNs  int64 // base as Unix nanoseconds

	// rules is copy-on-write: readers load it without a lock, writers
	// (new series, forgetting) replace it under mu.
	rules     atomic.Pointer[map[string]*ruleSeries]
	cached    atomic.Int64 // the bucket number Run keeps; -1 when Run is not running
	mu        sync.Mutex
	lastSweep int64 // bucket number of the last idle sweep; guarded by mu
}

type ruleSeries struct {
	groups atomic.Pointer[[]*series] // copy-on-write, replaced under Set.mu
}

type series struct {
	group string
	born  int64      // the bucket number at creation
	mu    sync.Mutex // serializes bucket resets
	ring  []bucket
}

type bucket struct {
	epoch    atomic.Int64 // the bucket number the counters belong to
	requests atomic.Uint32
	errors   atomic.Uint32
	latency  [NumLatencyBuckets]atomic.Uint32
}

// New returns an empty Set.
func New(opts Options) (*Set, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Width == 0 {
		opts.Width = DefaultWidth
	}
	if opts.Span == 0 {
		opts.Span = DefaultSpan
	}
	if opts.Width < time.Millisecond || opts.Width%time.Millisecond != 0 {
		return nil, fmt.Errorf("traffic width: must be a positive whole number of milliseconds, got %v", opts.Width)
	}
	if opts.Span < opts.Width {
		return nil, fmt.Errorf("traffic span: must be at least the width %v, got %v", opts.Width, opts.Span)
	}
	if opts.IsError == nil {
		opts.IsError = func(status int, failed bool) bool { return failed || status >= 500 }
	}
	base := opts.Now()
	s := &Set{now: opts.Now, isError: opts.IsError, width: int64(opts.Width),
		slots: int64((opts.Span+opts.Width-1)/opts.Width) + 1, base: base, baseNs: base.UnixNano()}
	s.rules.Store(&map[string]*ruleSeries{})
	s.cached.Store(-1)
	s.lastSweep = s.epoch()
	return s, nil
}

// Width returns the bucket width.
func (s *Set) Width() time.Duration { return time.Duration(s.width) }

// Span returns the longest window the Set answers for.
func (s *Set) Span() time.Duration { return time.Duration((s.slots - 1) * s.width) }

// epoch returns the number of the bucket that holds the present moment.
func (s *Set) epoch() int64 {
	ns := s.baseNs + int64(s.now().Sub(s.base))
	if ns < 0 {
		return 0
	}
	return ns / s.width
}

// current returns the number of the bucket requests go to now: the one
// Run keeps, or the clock's when Run is not running.
func (s *Set) current() int64 {
	if e := s.cached.Load(); e >= 0 {
		return e
	}
	return s.epoch()
}

// Run keeps the current bucket number for Record until ctx ends, so that
// Record reads no clock. Call it once, in its own goroutine.
func (s *Set) Run(ctx context.Context) {
	tick := min(max(time.Duration(s.width)/10, time.Millisecond), 100*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	s.cached.Store(s.epoch())
	defer s.cached.Store(-1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.cached.Store(s.epoch())
		}
	}
}

// Record counts one finished request of group of rule ("" when no rule
// claimed it): its status, whether it failed without an answer, and how
// long it took. It takes no lock, reads no clock while Run runs, and does
// not allocate, except to create the series on the first request of a
// (rule, group).
func (s *Set) Record(rule, group string, status int, failed bool, latency time.Duration) {
	se := s.lookup(rule, group)
	if se == nil {
		se = s.create(rule, group)
	}
	ep := s.current()
	b := &se.ring[ep%s.slots]
	if e := b.epoch.Load(); e != ep {
		if e > ep {
			return // this request was held up for a whole lap: its bucket is gone
		}
		se.reset(b, ep)
	}
	b.requests.Add(1)
	if s.isError(status, failed) {
		b.errors.Add(1)
	}
	b.latency[latencyIndex(latency)].Add(1)
}

func (s *Set) lookup(rule, group string) *series {
	rs := (*s.rules.Load())[rule]
	if rs == nil {
		return nil
	}
	for _, se := range *rs.groups.Load() {
		if se.group == group {
			return se
		}
	}
	return nil
}

// create adds the series of (rule, group), or returns the one another
// goroutine added first; it also forgets idle series once per Span.
func (s *Set) create(rule, group string) *series {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se := s.lookup(rule, group); se != nil {
		return se
	}
	now := s.current()
	if now-s.lastSweep >= s.slots {
		s.retainLocked(func(string) bool { return true }, now)
	}
	old := *s.rules.Load()
	m := make(map[string]*ruleSeries, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	rs := m[rule]
	var groups []*series
	if rs == nil {
		rs = &ruleSeries{}
		m[rule] = rs
	} else {
		groups = *rs.groups.Load()
	}
	se := &series{group: group, born: now, ring: make([]bucket, s.slots)}
	for i := range se.ring {
		se.ring[i].epoch.Store(-1)
	}
	ng := append(slices.Clip(groups), se)
	rs.groups.Store(&ng)
	s.rules.Store(&m)
	return se
}

// reset makes b the bucket of ep, zeroed, unless another request already
// did. Counters are zeroed before the epoch is published, so no request of
// ep adds to them before they are clear.
func (se *series) reset(b *bucket, ep int64) {
	se.mu.Lock()
	defer se.mu.Unlock()
	if b.epoch.Load() >= ep {
		return
	}
	b.requests.Store(0)
	b.errors.Store(0)
	for i := range b.latency {
		b.latency[i].Store(0)
	}
	b.epoch.Store(ep)
}

// read adds b's counters to c if b belongs to a bucket in [from, to].
func (b *bucket) read(c *Counts, from, to int64) bool {
	e := b.epoch.Load()
	if e < from || e > to {
		return false
	}
	var lat [NumLatencyBuckets]uint64
	requests, errs := uint64(b.requests.Load()), uint64(b.errors.Load())
	for i := range b.latency {
		lat[i] = uint64(b.latency[i].Load())
	}
	if b.epoch.Load() != e { // reset while we read: a newer second, not ours
		return false
	}
	if len(c.Latency) < NumLatencyBuckets {
		c.Latency = append(c.Latency, make([]uint64, NumLatencyBuckets-len(c.Latency))...)
	}
	c.Requests += requests
	c.Errors += errs
	for i, n := range lat {
		c.Latency[i] += n
	}
	return true
}

// bucketsFor returns the bucket numbers of a window of length d that ends
// where the current, incomplete bucket starts, and its length.
func (s *Set) bucketsFor(d time.Duration) (from, to int64, window time.Duration) {
	n := (int64(d) + s.width - 1) / s.width
	n = max(1, min(n, s.slots-1))
	to = s.current() - 1
	return to - n + 1, to, time.Duration(n * s.width)
}

// Window sums the last d of (rule, group): the whole buckets before the
// current one, d rounded up to the bucket width and at most Span.
func (s *Set) Window(rule, group string, d time.Duration) Stats {
	from, to, window := s.bucketsFor(d)
	var c Counts
	if se := s.lookup(rule, group); se != nil {
		for i := range se.ring {
			se.ring[i].read(&c, from, to)
		}
	}
	return statsOf(c.trimmed(), window)
}

// SeriesStats are the Stats of one series.
type SeriesStats struct {
	Rule  string `json:"rule"`
	Group string `json:"group"`
	Stats
}

// Windows returns the Window of every series, sorted by rule and group,
// leaving out series without requests in the window.
func (s *Set) Windows(d time.Duration) []SeriesStats {
	from, to, window := s.bucketsFor(d)
	var out []SeriesStats
	s.each(func(rule string, se *series) {
		var c Counts
		for i := range se.ring {
			se.ring[i].read(&c, from, to)
		}
		if c.Requests > 0 {
			out = append(out, SeriesStats{Rule: rule, Group: se.group, Stats: statsOf(c.trimmed(), window)})
		}
	})
	slices.SortFunc(out, func(a, b SeriesStats) int { return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Group, b.Group)) })
	return out
}

// Export returns the whole buckets of the last d of every series, for
// Merge and Export.Window.
func (s *Set) Export(d time.Duration) Export {
	from, to, _ := s.bucketsFor(d)
	out := Export{Schema: LatencySchema, WidthMs: s.width / int64(time.Millisecond), End: (to + 1) * s.width / int64(time.Millisecond)}
	s.each(func(rule string, se *series) {
		sr := Series{Rule: rule, Group: se.group}
		for ep := from; ep <= to; ep++ {
			var c Counts
			if se.ring[ep%s.slots].read(&c, ep, ep) && c.Requests > 0 {
				sr.Buckets = append(sr.Buckets, Bucket{Start: ep * s.width / int64(time.Millisecond), Counts: c.trimmed()})
			}
		}
		if len(sr.Buckets) > 0 {
			out.Series = append(out.Series, sr)
		}
	})
	slices.SortFunc(out.Series, func(a, b Series) int { return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Group, b.Group)) })
	return out
}

func (s *Set) each(f func(rule string, se *series)) {
	for rule, rs := range *s.rules.Load() {
		for _, se := range *rs.groups.Load() {
			f(rule, se)
		}
	}
}

// Len returns the number of series held.
func (s *Set) Len() int {
	n := 0
	s.each(func(string, *series) { n++ })
	return n
}

// Retain forgets the series of every rule keep rejects, and every series
// without requests for Span. The series of requests no rule claimed (rule
// "") is only forgotten when idle. The gateway calls it after each
// snapshot build with the rules that exist. A request recorded at the
// moment its idle series is forgotten may go uncounted.
func (s *Set) Retain(keep func(rule string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retainLocked(keep, s.current())
}

func (s *Set) retainLocked(keep func(rule string) bool, now int64) {
	s.lastSweep = now
	old := *s.rules.Load()
	m := make(map[string]*ruleSeries, len(old))
	changed := false
	for rule, rs := range old {
		if rule != "" && !keep(rule) {
			changed = true
			continue
		}
		groups := *rs.groups.Load()
		live := make([]*series, 0, len(groups))
		for _, se := range groups {
			if se.lastEpoch() > now-s.slots {
				live = append(live, se)
			}
		}
		switch {
		case len(live) == 0:
			changed = true
			continue
		case len(live) < len(groups):
			changed = true
			nrs := &ruleSeries{}
			nrs.groups.Store(&live)
			rs = nrs
		}
		m[rule] = rs
	}
	if changed {
		s.rules.Store(&m)
	}
}

func (se *series) lastEpoch() int64 {
	last := se.born
	for i := range se.ring {
		last = max(last, se.ring[i].epoch.Load())
	}
	return last
}
