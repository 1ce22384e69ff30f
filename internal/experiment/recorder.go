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

	"github.com/graygate/graygate/internal/router"
)

// MaxUnitBytes bounds the unit ids the recorder takes; longer ones are
// ignored (identity.max_length refuses them before routing by default).
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
	submit chan *submission
	quit   chan struct{}
	done   chan struct{}
	closed atomic.Bool

	storeErrors atomic.Uint64
	backlogLen  atomic.Int64

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
}

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
		submit: make(chan *submission), quit: make(chan struct{}), done: make(chan struct{}), health: map[string]*health{}}
	r.gateway = o.Gateway
	if r.gateway == "" {
		r.gateway, _ = os.Hostname()
	}
	var err error
	if o.Store != "" {
		r.store, err = openRedis(o.Store)
	} else {
		r.store, err = openLocal(localOptions{Dir: o.Dir, MaxUnits: o.MaxUnits, CompactBytes: o.CompactBytes, Logger: r.log, Now: o.Now})
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
	if unit == "" || len(unit) > MaxUnitBytes {
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
		if u == 0 {
			continue
		}
		if sp.Metrics[mi].Binomial {
			u = 1
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
// once it is there (or, with Redis down, in the bounded buffer).
func (r *Recorder) Flush(ctx context.Context) error { return r.record(ctx, nil) }

// record hands events to the writer, which applies them after what the
// request path queued before, and waits until they are applied.
func (r *Recorder) record(ctx context.Context, events []Event) error {
	if r.closed.Load() {
		return ErrClosed
	}
	sub := &submission{events: events, done: make(chan error, 1)}
	select {
	case r.submit <- sub:
	case <-r.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-sub.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

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
		var sub *submission
		select {
		case <-r.quit:
			r.flush(nil)
			if n := len(r.backlog); n > 0 { // Redis is down at shutdown
				r.dropped[indexOf(DropStoreUnavailable)].Add(uint64(n))
				r.log.Error("experiment store unreachable at shutdown: buffered events are lost", "events", n)
			}
			return
		case <-t.C:
		case <-r.wake:
		case sub = <-r.submit:
		}
		r.flush(sub)
	}
}

// flush moves the queued events (and a submission's) to the store, writes
// the exposure log lines of first exposures, and checks the experiments'
// health when it is due.
func (r *Recorder) flush(sub *submission) {
	ctx := context.Background()
	events := r.drain(r.batch[:0])
	if sub != nil {
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
		if over := len(r.backlog) - r.opts.BufferEvents; over > 0 {
			r.dropped[indexOf(DropStoreUnavailable)].Add(uint64(over))
			r.backlog = slices.Delete(r.backlog, 0, over)
		}
		pending = r.backlog
	}
	if len(pending) > 0 {
		r.st = slices.Grow(r.st[:0], len(pending))[:len(pending)]
		n, err := r.store.apply(ctx, pending, window, r.st)
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
	}
	r.backlogLen.Store(int64(len(r.backlog)))
	clear(events)
	r.batch = events[:0]
	if sub != nil {
		sub.done <- nil
	}
	if now := time.Now(); now.Sub(r.lastSRM) >= max(r.opts.FlushInterval, 250*time.Millisecond) {
		r.lastSRM = now
		r.checkHealth(ctx)
	}
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
		e.Group, e.Version = sp.Groups[s.group], sp.Version
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

func slowMicro(b []byte) (int64, bool) {
	f, err := strconv.ParseFloat(b2s(b), 64)
	if err != nil {
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
