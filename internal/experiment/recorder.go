package experiment

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/router"
)

// MaxUnitBytes bounds the unit ids the recorder takes; longer ones are
// not recorded and counted as DropUnitTooLong (identity.max_length, 256
// by default, refuses them before routing unless raised past this).
const MaxUnitBytes = 1024

// Defaults of Options.
const (
	DefaultFlushInterval = time.Second
	DefaultMaxUnits      = 5_000_000
	DefaultBufferEvents  = 100_000
)

// ErrClosed is returned by calls on a closed Recorder.
var ErrClosed = errors.New("experiment recorder closed")

// ErrUnknown is returned for a key that names no ab rule or experiment.
var ErrUnknown = errors.New("no such experiment")

// ErrUnavailable wraps a store that cannot be read.
var ErrUnavailable = errors.New("experiment store unavailable")

// Options configure a Recorder.
type Options struct {
	// Store is "" for the data-dir store in Dir, or a redis:// URL.
	Store string
	// Dir is the data-dir store's directory (<data_dir>/experiments).
	Dir string
	// FlushInterval is how often queued events are written to the store
	// (default 1s); a queue that is half full is written at once.
	FlushInterval time.Duration
	// MaxUnits bounds the units the data-dir store holds (default 5M).
	MaxUnits int
	// BufferEvents bounds the events held while Redis is unreachable
	// (default 100,000); the oldest are dropped beyond it.
	BufferEvents int
	// CompactBytes is the journal size that triggers a snapshot (default
	// 64 MiB).
	CompactBytes int64
	// ExposureLog, when set, is a file that gets one JSON line per first
	// exposure.
	ExposureLog string
	// Gateway names this gateway in exposure log lines (default: the host
	// name).
	Gateway string
	// OnSRM, when set, is called once each time an experiment's split is
	// found mismatched (stats.SRM.Alert). It runs on the writer's
	// goroutine and must not block.
	OnSRM func(SRMAlert)
	// Freeze rolls rule back (one-click rollback) with reason recorded in
	// its history, if the rule's stored version is still version, and
	// otherwise fails with ErrRuleChanged; the recorder calls it on a
	// mismatch when the catalog says so (experiments.srm_action: freeze),
	// on a goroutine of its own.
	Freeze func(ctx context.Context, rule string, version int64, reason string) error
	Logger *slog.Logger
	// Now dates posted events that carry no ts and times how long a
	// conversion waits for its exposure; requests are dated by their start
	// (see Observe). Default time.Now.
	Now func() time.Time
}

// Recorder records exposures and conversions and serves results. Observe
// is the request path: it never blocks on the store, takes one of 64
// shard locks, and does not allocate. One writer goroutine moves what it
// queues to the store every flush interval. All methods are safe for
// concurrent use.
type Recorder struct {
	opts  Options
	log   *slog.Logger
	store backend
	cat   atomic.Pointer[Catalog]

	shards  [shards]shard
	dropped [len(dropReasons)]atomic.Uint64

	wake   chan struct{}
	quit   chan struct{}
	done   chan struct{}
	closed atomic.Bool

	// subs are the submissions (posted events, Flush) waiting for the
	// writer, which takes them all at its next flush; subEvents counts
	// their events, bounded by Options.BufferEvents so that a writer stuck
	// on an unanswering store never makes a submission wait for room.
	subMu     sync.Mutex
	subs      []*submission
	subEvents int
	subClosed bool // the writer took its last submissions (Close)

	storeErrors atomic.Uint64
	backlogLen  atomic.Int64
	// storeDown is set while the store's writes fail; storeCall is when
	// the writer's store call in progress began (Unix ns, 0: none). Posted
	// events do not wait for a store that is down or stalled.
	storeDown atomic.Bool
	storeCall atomic.Int64

	// owned by the writer goroutine
	batch    []Event
	backlog  []Event
	st       []status
	failing  bool
	expFile  *os.File
	expLog   *bufio.Writer
	expEnc   *json.Encoder
	gateway  string
	lastSRM  time.Time
	freezing sync.Map // rule → struct{}: a freeze in flight
	froze    sync.Map // rule → frozeAt: a freeze made, for the phase

	mu     sync.Mutex
	health map[string]*health // by rule key, for metrics and SRM edges
}

// ErrRuleChanged is Freeze's error for a rule whose version is no longer
// the one whose split was judged.
var ErrRuleChanged = errors.New("the rule changed since its split was judged")

// health is the last SRM check of one experiment.
type health struct {
	id      string
	units   map[string]int64
	p, seqP *float64
	flagged bool
	since   int64 // the phase flagged belongs to
}

// submission is events handed to the writer (posted events, or none for
// Flush); done gets the outcome once they are applied.
type submission struct {
	events []Event
	done   chan error
}

// New opens the store and starts the writer. The Recorder serves no
// experiment until SetCatalog gives it some. Close releases it.
func New(o Options) (*Recorder, error) {
	o.FlushInterval = cmp.Or(o.FlushInterval, DefaultFlushInterval)
	o.MaxUnits = cmp.Or(o.MaxUnits, DefaultMaxUnits)
	o.BufferEvents = cmp.Or(o.BufferEvents, DefaultBufferEvents)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Recorder{opts: o, log: o.Logger.With("component", "experiment"), wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{}), health: map[string]*health{}}
	r.gateway = o.Gateway
	if r.gateway == "" {
		r.gateway, _ = os.Hostname()
	}
	var err error
	expired := func(n int) { r.dropped[indexOf(DropNoExposure)].Add(uint64(n)) }
	if o.Store != "" {
		r.store, err = openRedis(o.Store, o.Now, expired)
	} else {
		r.store, err = openLocal(localOptions{Dir: o.Dir, MaxUnits: o.MaxUnits, CompactBytes: o.CompactBytes, Logger: r.log, Now: o.Now, Expired: expired})
	}
	if err != nil {
		return nil, err
	}
	if o.ExposureLog != "" {
		f, err := os.OpenFile(o.ExposureLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			_ = r.store.close()
			return nil, fmt.Errorf("experiments.exposure_log: %w", err)
		}
		r.expFile, r.expLog = f, bufio.NewWriterSize(f, 64<<10)
		r.expEnc = json.NewEncoder(r.expLog)
		r.expEnc.SetEscapeHTML(false)
	}
	r.cat.Store(NewCatalog(nil, Settings{}))
	go r.run()
	return r, nil
}

// SetCatalog makes c the experiments the recorder serves; the gateway
// calls it with each published snapshot.
func (r *Recorder) SetCatalog(c *Catalog) { r.cat.Store(c) }

// Catalog returns the experiments the recorder serves.
func (r *Recorder) Catalog() *Catalog { return r.cat.Load() }

// StoreKind names the store: "file" or "redis".
func (r *Recorder) StoreKind() string { return r.store.kind() }

// Observe records what one finished request means for the experiments:
// the first exposure of its unit when an ab rule claimed it (unless the
// rule is rolled back: those units were not randomized), the values its
// upstream reported in the rule's from_header metrics, and a conversion
// for every metric whose match the request meets. d, method, path and
// reported are only read during the call; start (the request's start, by
// the recorder's clock) dates what is queued. Observe is called from the
// data plane's OnDone only, so explain and dry runs never expose anyone.
// It reads no clock, does not allocate (a malformed reported value aside)
// and never waits on the store.
func (r *Recorder) Observe(d *router.Decision, status int, method, path string, reported [][]byte, start time.Time) {
	cat := r.cat.Load()
	var sp *Spec
	if d.Experiment != "" {
		sp = cat.byRule[d.Rule]
	}
	if sp == nil && len(cat.matchers) == 0 {
		return
	}
	unit := d.Identity.Value
	if unit == "" {
		return
	}
	if len(unit) > MaxUnitBytes {
		// identity.max_length may let longer ids through to routing than
		// the recorder keeps: such a unit is served but never exposed or
		// converted, which must show somewhere rather than bias results
		// silently (long ids are not a random subset of users).
		r.dropped[indexOf(DropUnitTooLong)].Add(1)
		return
	}
	uh := xxhash.Sum64String(unit)
	ts := start.UnixMilli()
	// The events of the claiming experiment share one key, so they go to
	// one shard together: one lock and one copy of the unit's id.
	var b batch
	exposes := false // the request itself exposes its unit to sp
	if sp != nil {
		b.key = key(uh, sp)
		if !sp.RolledBack {
			if g := sp.group(d.Group); g >= 0 && g < 256 {
				exposes = true
				b.dedup = true
				b.add(r, slot{spec: sp, ts: ts, kind: Exposure, group: uint8(g)}, unit)
			}
		}
		if len(reported) > 0 && d.Report != nil {
			r.reported(sp, d.Report, reported, &b, unit, ts, exposes)
		}
	}
	for i := range cat.matchers {
		m := &cat.matchers[i]
		if !m.m.Matches(method, path, status) {
			continue
		}
		v := int64(1)
		if !m.spec.Metrics[m.metric].Binomial {
			v = 1e6
		}
		s := slot{spec: m.spec, ts: ts, kind: Conversion, metric: m.metric, value: v, exposes: exposes && m.spec == sp}
		if m.spec == sp {
			b.add(r, s, unit)
			continue
		}
		one := batch{key: key(uh, m.spec), n: 1}
		one.s[0] = s
		r.push(&one, unit)
	}
	if b.n > 0 {
		r.push(&b, unit)
	}
}

// batch is up to 4 events of one request with one key, queued together.
// It lives on the request's stack.
type batch struct {
	key uint64
	// dedup says s[0] is an exposure, to queue only if the shard has not
	// seen the key.
	dedup bool
	n     int
	s     [4]slot
}

// add appends s, queueing the batch first when it is full.
func (b *batch) add(r *Recorder, s slot, unit string) {
	if b.n == len(b.s) {
		r.push(b, unit)
		b.n, b.dedup = 0, false
	}
	b.s[b.n] = s
	b.n++
}

// key is the (experiment, unit) key: the unit's hash mixed with the
// experiment's, never 0 (the seen set's empty slot).
func key(uh uint64, sp *Spec) uint64 { return max(mix(uh^sp.seed), 1) }

// reported queues the values the upstream reported for sp's from_header
// metrics. rep is the decision's Report; when it is not the catalog's
// (the snapshot changed under the request), headers are matched by name.
func (r *Recorder) reported(sp *Spec, rep *router.Report, vals [][]byte, b *batch, unit string, ts int64, exposes bool) {
	for i, v := range vals {
		if v == nil {
			continue
		}
		mi := -1
		if rep == sp.report {
			for j := range sp.Metrics {
				if sp.Metrics[j].Header == i {
					mi = j
					break
				}
			}
		} else if i < len(rep.Headers) {
			mi = sp.headerMetric(rep.Headers[i])
		}
		if mi < 0 {
			continue
		}
		u, ok := parseMicro(trimSpace(v))
		if !ok {
			r.dropped[indexOf(DropBadValue)].Add(1)
			continue
		}
		if sp.Metrics[mi].Binomial {
			// Any value but 0 converts, however small ("1e-7" rounds
			// to 0 µ-units).
			if u == 0 && !nonZero(trimSpace(v)) {
				continue
			}
			u = 1
		} else if u == 0 {
			continue
		}
		b.add(r, slot{spec: sp, ts: ts, kind: Conversion, metric: uint8(mi), value: u, exposes: exposes}, unit)
	}
}

// push queues a batch in its shard, with one copy of the unit's id. An
// exposure at its head is queued only the first time the shard sees the
// key; a batch that does not fit is dropped whole and counted.
func (r *Recorder) push(b *batch, unit string) {
	sh := &r.shards[b.key>>(64-shardBits)]
	sh.mu.Lock()
	s := b.s[:b.n]
	fresh := b.dedup && !sh.seenOrAdd(b.key)
	if b.dedup && !fresh {
		s = s[1:]
	}
	if len(s) == 0 {
		sh.mu.Unlock()
		return
	}
	if sh.queue == nil {
		sh.queue, sh.arena = make([]slot, 0, queueSlots), make([]byte, 0, arenaBytes)
	}
	if len(sh.queue)+len(s) > cap(sh.queue) || len(sh.arena)+len(unit) > cap(sh.arena) {
		if fresh {
			sh.forget(b.key)
		}
		sh.mu.Unlock()
		r.dropped[indexOf(DropQueueFull)].Add(uint64(len(s)))
		r.kick()
		return
	}
	off := uint32(len(sh.arena))
	sh.arena = append(sh.arena, unit...)
	for i := range s {
		s[i].off, s[i].n = off, uint16(len(unit))
	}
	sh.queue = append(sh.queue, s...)
	n := len(sh.queue)
	sh.mu.Unlock()
	if n >= queueSlots/2 && n-len(s) < queueSlots/2 {
		r.kick()
	}
}

// kick asks the writer to flush now.
func (r *Recorder) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func indexOf(reason string) int {
	for i, d := range dropReasons {
		if d == reason {
			return i
		}
	}
	panic("experiment: unknown drop reason " + reason)
}

// Dropped returns how many events were dropped for reason.
func (r *Recorder) Dropped(reason string) uint64 { return r.dropped[indexOf(reason)].Load() }

// Flush writes what the request path has queued to the store and returns
// once it is there (or, with Redis down, in the bounded buffer). Unlike
// posted events it waits for a stalled store.
func (r *Recorder) Flush(ctx context.Context) error {
	sub, err := r.enqueue(nil)
	if err != nil {
		return err
	}
	return r.wait(ctx, sub, false)
}

// Stalls of the store that posted events do not wait out: a store call in
// progress for stallAfter is taken as stalled (Redis hung: its calls time
// out only after redisTimeout, twice), checked every stallPoll.
const (
	stallAfter = 500 * time.Millisecond
	stallPoll  = 50 * time.Millisecond
)

// ErrBusy is wrapped by PostEvents's *BusyError.
var ErrBusy = errors.New("experiment event buffer full")

// BusyError is PostEvents's error when the events cannot be buffered: the
// events already waiting for the writer fill experiments.buffer_events,
// which happens only while the store does not take them. Nothing of the
// submission was recorded; it may be sent again after RetryAfter.
type BusyError struct {
	// Waiting is how many events wait for the writer; Limit the bound.
	Waiting, Limit int
	// Store is the store's kind ("redis").
	Store      string
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("the experiment store (%s) is not taking events: %d events already wait in the buffer of %d (experiments.buffer_events), so none of these was recorded; retry after %s",
		e.Store, e.Waiting, e.Limit, e.RetryAfter)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// enqueue hands events to the writer, which takes them at its next flush,
// after what the request path queued before; it never waits. The events
// already waiting are bounded by Options.BufferEvents (a submission alone
// always fits).
func (r *Recorder) enqueue(events []Event) (*submission, error) {
	r.subMu.Lock()
	if r.subClosed || r.closed.Load() {
		r.subMu.Unlock()
		return nil, ErrClosed
	}
	if r.subEvents > 0 && r.subEvents+len(events) > r.opts.BufferEvents {
		err := &BusyError{Waiting: r.subEvents, Limit: r.opts.BufferEvents, Store: r.store.kind(), RetryAfter: max(r.opts.FlushInterval, time.Second)}
		r.subMu.Unlock()
		return nil, err
	}
	sub := &submission{events: events, done: make(chan error, 1)}
	r.subs = append(r.subs, sub)
	r.subEvents += len(events)
	r.subMu.Unlock()
	r.kick()
	return sub, nil
}

// takeSubs takes the waiting submissions for a flush; the last flush
// (final) closes the door behind them.
func (r *Recorder) takeSubs(final bool) []*submission {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	subs := r.subs
	r.subs, r.subEvents = nil, 0
	r.subClosed = r.subClosed || final
	return subs
}

// wait waits until the writer has applied sub. With buffered (posted
// events on the Redis store), it stops waiting, the events staying in the
// writer's buffer, once the store is down or a store call has been in
// progress for stallAfter: the answer never waits on Redis.
func (r *Recorder) wait(ctx context.Context, sub *submission, buffered bool) error {
	var poll <-chan time.Time
	if buffered {
		if r.storeDown.Load() {
			return nil
		}
		t := time.NewTicker(stallPoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case err := <-sub.done:
			return err
		case <-poll:
			if r.stalled() {
				return nil
			}
		case <-r.done:
			select {
			case err := <-sub.done:
				return err
			default:
				return ErrClosed
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stalled reports whether the store is down or the writer's store call in
// progress has lasted stallAfter.
func (r *Recorder) stalled() bool {
	if r.storeDown.Load() {
		return true
	}
	since := r.storeCall.Load()
	return since != 0 && time.Since(time.Unix(0, since)) >= stallAfter
}

// storeBegin and storeEnd bracket the writer's store calls, for stalled.
func (r *Recorder) storeBegin() { r.storeCall.Store(time.Now().UnixNano()) }
func (r *Recorder) storeEnd()   { r.storeCall.Store(0) }

// Close flushes what is queued, stops the writer and closes the store and
// the exposure log.
func (r *Recorder) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(r.quit)
	<-r.done
	err := r.store.close()
	if r.expFile != nil {
		err = cmp.Or(r.expLog.Flush(), r.expFile.Close(), err)
	}
	return err
}

func (r *Recorder) run() {
	defer close(r.done)
	t := time.NewTicker(r.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			r.flush(true)
			if n := len(r.backlog); n > 0 { // Redis is down at shutdown
				r.dropped[indexOf(DropStoreUnavailable)].Add(uint64(n))
				r.log.Error("experiment store unreachable at shutdown: buffered events are lost", "events", n)
			}
			return
		case <-t.C:
		case <-r.wake:
		}
		r.flush(false)
	}
}

// flush moves the queued events (and the waiting submissions') to the
// store, writes the exposure log lines of first exposures, and checks the
// experiments' health when it is due. The submissions are taken before the
// request path's queues are drained, so that a submission's events come
// after everything the request path queued before it was made.
func (r *Recorder) flush(final bool) {
	ctx := context.Background()
	subs := r.takeSubs(final)
	events := r.drain(r.batch[:0])
	for _, sub := range subs {
		events = append(events, sub.events...)
	}
	// One experiment's events together make fewer Redis calls; the sort is
	// stable, so each unit's events keep their order.
	slices.SortStableFunc(events, func(a, b Event) int { return cmp.Compare(a.Experiment, b.Experiment) })
	window := r.cat.Load().Window.Milliseconds()
	pending := events
	_, buffered := r.store.(*redisStore)
	if buffered {
		r.backlog = append(r.backlog, events...)
		r.backlog = r.dropOldest(r.backlog, r.opts.BufferEvents)
		pending = r.backlog
	}
	if len(pending) > 0 {
		r.st = slices.Grow(r.st[:0], len(pending))[:len(pending)]
		r.storeBegin()
		n, err := r.store.apply(ctx, pending, window, r.st)
		r.storeEnd()
		r.settle(pending[:n], r.st[:n])
		if buffered && n > 0 {
			r.backlog = slices.Delete(r.backlog, 0, n)
		}
		if err != nil {
			r.storeErrors.Add(1)
			if !r.failing {
				r.log.Error("experiment store: writes failing; routing goes on and events wait in a bounded buffer", "store", r.store.kind(), "buffered", len(r.backlog), "err", err)
			}
		} else if r.failing {
			r.log.Info("experiment store: writes work again", "store", r.store.kind())
		}
		r.failing = err != nil
		r.storeDown.Store(r.failing)
	}
	// Waits that ended where no events come are swept too (each store
	// bounds how often; see sweepIdle), not while the store's writes fail,
	// and before the submissions are told, so that a Flush sees what it
	// dropped.
	if !r.failing {
		r.storeBegin()
		err := r.store.sweepIdle(ctx, r.cat.Load().experiments)
		r.storeEnd()
		if err != nil {
			r.storeErrors.Add(1)
		}
	}
	r.backlogLen.Store(int64(len(r.backlog)))
	clear(events)
	r.batch = events[:0]
	for _, sub := range subs {
		sub.done <- nil
	}
	// While the store's writes fail its reads would too, each after a
	// timeout: the check waits for the store to come back.
	if now := time.Now(); !r.failing && now.Sub(r.lastSRM) >= max(r.opts.FlushInterval, 250*time.Millisecond) {
		r.lastSRM = now
		r.checkHealth(ctx)
	}
}

// dropOldest bounds backlog to limit events, dropping (and counting) the
// oldest, but never part of the batch whose reply Redis lost (heading
// the backlog): Redis may have applied it, so it must go again whole,
// under its id. Sent under a new id, what was left of it would count
// twice. When the bound cuts into it, it is dropped whole and forgotten.
func (r *Recorder) dropOldest(backlog []Event, limit int) []Event {
	over := len(backlog) - limit
	if over <= 0 {
		return backlog
	}
	rs := r.store.(*redisStore)
	head := rs.lost.n
	if head > len(backlog) {
		head = 0 // not what heads the backlog; apply will not take it for the lost batch
	}
	from, n := head, over
	if over > len(backlog)-head {
		rs.lost = lostBatch{}
		from, n = 0, max(over, head)
	}
	r.dropped[indexOf(DropStoreUnavailable)].Add(uint64(n))
	return slices.Delete(backlog, from, from+n)
}

// drain takes every shard's queue, swapping in the spare.
func (r *Recorder) drain(dst []Event) []Event {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		q, a := sh.queue, sh.arena
		if len(q) == 0 {
			sh.mu.Unlock()
			continue
		}
		if sh.spareQueue == nil {
			sh.spareQueue, sh.spareArena = make([]slot, 0, queueSlots), make([]byte, 0, arenaBytes)
		}
		sh.queue, sh.arena = sh.spareQueue, sh.spareArena
		sh.mu.Unlock()
		for j := range q {
			dst = append(dst, q[j].event(a))
		}
		clear(q)
		sh.spareQueue, sh.spareArena = q[:0], a[:0]
	}
	return dst
}

func (s *slot) event(arena []byte) Event {
	sp := s.spec
	e := Event{Kind: s.kind, Experiment: sp.ID, Unit: string(arena[s.off : s.off+uint32(s.n)]), TS: s.ts}
	if s.kind == Exposure {
		e.Group, e.Version, e.Alloc = sp.Groups[s.group], sp.Version, sp.alloc
	} else {
		m := &sp.Metrics[s.metric]
		e.Metric, e.Binomial, e.Value, e.Exposes = m.Name, m.Binomial, s.value, s.exposes
	}
	return e
}

// settle logs first exposures and counts what the store refused.
func (r *Recorder) settle(events []Event, st []status) {
	for i := range events {
		switch st[i] {
		case stFresh:
			if r.expEnc != nil {
				e := &events[i]
				_ = r.expEnc.Encode(exposureLine{TS: time.UnixMilli(e.TS).UTC().Format(time.RFC3339Nano), Unit: e.Unit,
					Experiment: e.Experiment, Group: e.Group, RuleVersion: e.Version, Gateway: r.gateway})
			}
		case stMaxUnits:
			r.dropped[indexOf(DropMaxUnits)].Add(1)
		case stPendFull:
			r.dropped[indexOf(DropPendingFull)].Add(1)
		case stOverflow:
			r.dropped[indexOf(DropOverflow)].Add(1)
		}
	}
	if r.expLog != nil {
		if err := r.expLog.Flush(); err != nil {
			r.log.Error("experiments.exposure_log: write failed", "err", err)
		}
	}
}

// exposureLine is one line of experiments.exposure_log.
type exposureLine struct {
	TS          string `json:"ts"`
	Unit        string `json:"unit"`
	Experiment  string `json:"experiment"`
	Group       string `json:"group"`
	RuleVersion int64  `json:"rule_version"`
	Gateway     string `json:"gateway"`
}

// parseMicro reads a reported value as µ-units. A plain decimal with at
// most six fractional digits ("12.34", "-3", "+0.5") is converted exactly
// and without strconv (which costs more than the rest of the request
// path); anything else (exponents, more digits) goes through
// strconv.ParseFloat and is rounded to the nearest µ-unit. ok is false for
// what is not a finite number within ±MaxValue.
func parseMicro(b []byte) (int64, bool) {
	i, neg := 0, false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg, i = b[0] == '-', 1
	}
	var whole, frac int64
	digits, fracDigits := 0, -1
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			if fracDigits < 0 {
				if digits++; digits > 13 {
					return slowMicro(b)
				}
				whole = whole*10 + int64(c-'0')
				continue
			}
			if fracDigits++; fracDigits > 6 {
				return slowMicro(b)
			}
			frac = frac*10 + int64(c-'0')
			digits++
		case c == '.' && fracDigits < 0:
			fracDigits = 0
		default:
			return slowMicro(b)
		}
	}
	if digits == 0 || whole > MaxValue {
		return slowMicro(b)
	}
	for n := max(fracDigits, 0); n < 6; n++ {
		frac *= 10
	}
	u := whole*1e6 + frac
	if neg {
		u = -u
	}
	if u > MaxValue*1e6 || u < -MaxValue*1e6 {
		return 0, false
	}
	return u, true
}

// nonZero reports whether a value parseMicro accepted is not 0, for the
// values that round to 0 µ-units; it is off the common path.
func nonZero(b []byte) bool {
	f, err := strconv.ParseFloat(string(b), 64)
	return err == nil && f != 0
}

func slowMicro(b []byte) (int64, bool) {
	f, ok := attr.ParseDecimal(b2s(b))
	if !ok {
		return 0, false
	}
	return micro(f)
}

func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
