package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/graygate/graygate/internal/store"
)

const (
	defaultHistoryLimit  = 100
	defaultDialTimeout   = 2 * time.Second
	defaultWriteTimeout  = 2 * time.Second
	defaultProbeInterval = time.Second
	defaultMaxBackoff    = 3 * time.Second
	// defaultMaxRequestBytes is etcd's default --max-request-bytes.
	defaultMaxRequestBytes = 1536 << 10
)

// Options tunes a Store. The zero value is usable; durations that are zero
// take their defaults.
type Options struct {
	// DataDir holds the cache file, the last state read from etcd, which
	// lets a gateway start and serve while etcd is down. Empty disables
	// the cache: Open then fails while etcd is unreachable. One store
	// (one prefix) per directory.
	DataDir string
	// HistoryLimit is how many changes are kept per key (and for the
	// global flag); older ones are pruned in the transaction that adds
	// the newest, by the writer's limit, so gateways that share a prefix
	// should agree on it. Default 100, at most store.MaxHistoryLimit.
	HistoryLimit int
	// DialTimeout bounds the first read at Open and each resync attempt
	// (and, with authentication, fetching the token). Default 2s.
	DialTimeout time.Duration
	// WriteTimeout bounds a whole write (Put, Delete, SetRollback) and a
	// History read, so that callers fail fast with store.ErrUnavailable
	// while etcd is unreachable. Default 2s.
	WriteTimeout time.Duration
	// ProbeInterval is how often a quorum read checks that etcd answers
	// and that the watch is not behind. An unanswered probe (within
	// ProbeTimeout) marks the store unsynced. Default 1s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default: ProbeInterval.
	ProbeTimeout time.Duration
	// MaxBackoff caps the wait between reconnection attempts, both ours
	// and gRPC's. Default 3s.
	MaxBackoff time.Duration
	// MaxRequestBytes is the largest transaction the cluster accepts:
	// etcd's --max-request-bytes (default 1.5 MiB). A write whose entry
	// and history record would exceed it fails with store.ErrInvalid
	// before it is sent.
	MaxRequestBytes int
	// Now is the clock that stamps changes (Change.At, Entry.UpdatedAt).
	// Default time.Now. LastSync and PropagationLag read the wall clock:
	// they compare with etcd's activity and with other hosts' stamps.
	Now func() time.Time
	// Logger receives outages, resyncs and skipped data. Default: discard.
	Logger *slog.Logger
	// LookupEnv reads Config.PasswordEnv. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// StartWithoutState lets Open succeed when etcd is unreachable and
	// DataDir holds no usable cache: the store then holds no state (Load
	// and Get fail with store.ErrUnavailable, and StateErr says why) until
	// it first reaches etcd, which it keeps trying in the background. A
	// gateway uses it to run and report itself not ready, rather than exit.
	StartWithoutState bool

	// watchHook, when set by tests, runs in the watch goroutine before
	// each watch is created, with the revision it will start from. If it
	// returns a channel, the store uses it instead of a real watch.
	watchHook func(from int64) clientv3.WatchChan
	// commitHook, when set by tests, runs before each write's transaction
	// is sent, after the read it is decided on.
	commitHook func()
}

func (o *Options) provision() error {
	var errs []error
	if o.HistoryLimit < 0 {
		errs = append(errs, fmt.Errorf("HistoryLimit %d is negative", o.HistoryLimit))
	}
	if o.HistoryLimit > store.MaxHistoryLimit {
		errs = append(errs, fmt.Errorf("HistoryLimit %d is above the maximum %d", o.HistoryLimit, store.MaxHistoryLimit))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"DialTimeout", o.DialTimeout}, {"WriteTimeout", o.WriteTimeout}, {"ProbeInterval", o.ProbeInterval}, {"ProbeTimeout", o.ProbeTimeout}, {"MaxBackoff", o.MaxBackoff}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", d.name, d.v))
		}
	}
	if o.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxRequestBytes %d is negative", o.MaxRequestBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", err, store.ErrInvalid)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.HistoryLimit == 0 {
		o.HistoryLimit = defaultHistoryLimit
	}
	def(&o.DialTimeout, defaultDialTimeout)
	def(&o.WriteTimeout, defaultWriteTimeout)
	def(&o.ProbeInterval, defaultProbeInterval)
	def(&o.ProbeTimeout, o.ProbeInterval)
	def(&o.MaxBackoff, defaultMaxBackoff)
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = defaultMaxRequestBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	return nil
}

// Store is the etcd implementation of store.Store. It is safe for
// concurrent use.
//
// Reads of the current rules (Load, Get) are served from an in-memory
// snapshot that one goroutine keeps current by watching etcd; a snapshot is
// published whole, at a revision boundary, and never modified afterwards.
// Writes and History go to etcd. A write returns only after the watch has
// applied it, so a process reads its own writes.
type Store struct {
	cfg   Config
	opts  Options
	log   *slog.Logger
	keys  layout
	where string // "etcd at 127.0.0.1:2379", for messages

	ccfg  clientv3.Config
	cli   atomic.Pointer[clientv3.Client]
	cache *cacheFile // nil without a DataDir

	// snap is the published state; amu and applied let writers wait for
	// the snapshot to reach a revision: applied is closed and replaced on
	// every publication.
	snap    atomic.Pointer[snapshot]
	amu     sync.Mutex
	applied chan struct{}

	changes chan int64
	// resync asks the watch loop to re-read etcd: a writer found that
	// etcd's history is not the one the snapshot comes from.
	resync chan struct{}

	synced   atomic.Bool
	stale    atomic.Bool
	lastSync atomic.Int64 // unix nanoseconds; 0 = never
	// syncSince is when synced last changed (or Open served the cache),
	// unix nanoseconds.
	syncSince atomic.Int64
	// noState says why there is no state yet (StartWithoutState); nil
	// once one is published.
	noState  atomic.Pointer[error]
	lastLag  atomic.Int64 // nanoseconds
	restarts atomic.Int64
	resets   atomic.Int64 // history resets so far: the epoch of the next state published
	gens     atomic.Int64 // resyncs (connects) so far

	// ctx lives until Close; every call and goroutine is bound to it.
	ctx     context.Context
	cancel  context.CancelFunc
	bg      sync.WaitGroup // the watch loop and its probes
	cacheWG sync.WaitGroup // the cache writer, stopped after the watch loop
	ops     sync.WaitGroup // calls in flight

	mu     sync.Mutex // guards closed against ops.Add
	closed bool
}

// snapshot is one published state: everything under meta/ and rules/ as of
// etcd revision etcdRev. It must not be modified after publication.
type snapshot struct {
	state   store.State // Rules sorted by key
	etcdRev int64
	// counterMod is the etcd revision at which state.Revision was
	// committed (0 if none, or unknown in an old cache file).
	counterMod int64
	// gen is the resync the state comes from (0: the cache file).
	gen int64
}

func (s *snapshot) pos() position {
	return position{etcdRev: s.etcdRev, storeRev: s.state.Revision, counterMod: s.counterMod}
}

// revisionRecord is the value of PREFIX/meta/revision: the store revision
// and what the change that set it did.
type revisionRecord struct {
	Revision int64     `json:"revision"`
	Key      string    `json:"key"`
	Op       string    `json:"op"`
	Version  int64     `json:"version"`
	At       time.Time `json:"at"`
	// Follows is the etcd revision of the change this one follows, which
	// the write compared: the watch checks that the changes it applies
	// chain. 0 for the first change (and in records written before it
	// was kept).
	Follows int64 `json:"follows,omitempty"`
}

// globalRecord is the value of PREFIX/meta/global.
type globalRecord struct {
	RolledBack bool  `json:"rolled_back"`
	Version    int64 `json:"version"`
}

var _ store.Store = (*Store)(nil)

// Open connects to the cluster cfg names and reads the rules under its
// prefix. ctx bounds only the opening; the store lives until Close.
//
// If etcd cannot be reached within opts.DialTimeout, Open still succeeds
// when opts.DataDir holds a cached state for the same prefix: the store
// serves it, Stale and not Synced, and keeps reconnecting in the background.
// Without a usable cache it fails with an error wrapping
// store.ErrUnavailable, because a gateway that starts with no rules would
// route differently from the gateways that share the prefix, unless
// opts.StartWithoutState asks for a store without state instead. Any other
// failure (bad config, authentication refused) fails Open.
func Open(ctx context.Context, cfg Config, opts Options) (*Store, error) {
	if err := opts.provision(); err != nil {
		return nil, fmt.Errorf("open etcd store: %w", err)
	}
	ccfg, err := clientConfig(cfg, &opts)
	if err != nil {
		return nil, fmt.Errorf("open etcd store: %w: %w", err, store.ErrInvalid)
	}
	cfg.Prefix = normalizePrefix(cfg.Prefix)
	s := &Store{
		cfg:     cfg,
		opts:    opts,
		keys:    newLayout(cfg.Prefix),
		where:   cfg.Where(),
		ccfg:    ccfg,
		applied: make(chan struct{}),
		changes: make(chan int64, 1),
		resync:  make(chan struct{}, 1),
	}
	s.log = opts.Logger.With("component", "store", "store", "etcd", "endpoints", strings.Join(cfg.Endpoints, ","), "prefix", cfg.Prefix)
	if opts.DataDir != "" {
		s.cache = newCacheFile(opts.DataDir, cfg, s.log)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())

	v, err := s.connect(ctx, false, false)
	if err != nil {
		if ctx.Err() != nil || !unreachable(err) {
			s.shutdown()
			return nil, fmt.Errorf("open etcd store: %s: %w", s.where, err)
		}
		snap, at, cerr := s.loadCache()
		switch {
		case cerr == nil:
			s.publish(snap, false)
			s.stale.Store(true)
			s.lastSync.Store(at.UnixNano())
			s.log.Warn("etcd is unreachable: serving the rules cached in the data dir until it answers", "error", err,
				"revision", snap.state.Revision, "synced_at", at, "cache", s.cache.path)
		case opts.StartWithoutState:
			why := fmt.Errorf("%s is unreachable (%v) and %w", s.where, err, cerr)
			s.noState.Store(&why)
			s.stale.Store(true)
			s.log.Error("etcd is unreachable and there is no cached state: no rules to serve, and /readyz fails, until etcd answers", "error", why)
		default:
			s.shutdown()
			return nil, fmt.Errorf("open etcd store: %s is unreachable (%v) and %w: %w", s.where, err, cerr, store.ErrUnavailable)
		}
		s.syncSince.Store(time.Now().UnixNano())
	}
	s.bg.Add(1)
	go s.run(v)
	if s.cache != nil {
		s.cacheWG.Go(s.cache.run)
	}
	return s, nil
}

// connect creates the client if needed and reads the whole state once,
// within DialTimeout: one range read, so one etcd revision. On success the
// state is published (and notified if asked) and the store is synced; the
// view is returned for the watch loop to continue from.
//
// If the state read cannot follow the published one in one etcd history
// (position.leadsTo), or replaced says the watch found that it does not,
// etcd's history was replaced: restored from a backup, most likely, and
// the operator who restored it made it the truth. The state read is
// published all the same, in a new epoch (store.State.Epoch), so that a
// reader who never goes back to a lower revision within an epoch takes it;
// the reset is logged and counted (HistoryResets).
func (s *Store) connect(ctx context.Context, notify, replaced bool) (*view, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	cli := s.cli.Load()
	if cli == nil {
		// Without authentication this does not touch the network; with
		// it, the client fetches a token and fails while etcd is down,
		// so it is created again on every attempt until it works.
		ccfg := s.ccfg
		ccfg.Context = s.ctx
		c, err := clientv3.New(ccfg)
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		s.cli.Store(c)
		cli = c
	}
	// A request made before this read is answered by it.
	select {
	case <-s.resync:
	default:
	}
	resp, err := cli.Get(ctx, s.keys.viewStart, clientv3.WithRange(s.keys.viewEnd))
	if err != nil {
		if ctx.Err() != nil && s.ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v: %w", s.opts.DialTimeout, err)
		}
		return nil, fmt.Errorf("read %s: %w", s.keys.prefix, err)
	}
	v := newView(s.keys)
	for _, kv := range resp.Kvs {
		if err := v.put(kv.Key, kv.Value, kv.ModRevision); err != nil {
			s.log.Error("skipping unreadable key", "key", string(kv.Key), "error", err)
		}
	}
	v.etcdRev = resp.Header.Revision
	v.gen = s.gens.Add(1)
	v.epoch = s.resets.Load()
	if old := s.snap.Load(); old != nil && (replaced || !old.pos().leadsTo(v.pos())) {
		v.epoch = s.resets.Add(1)
		s.log.Warn("etcd's history was replaced (restored from a backup?): serving what etcd holds now",
			"revision", v.revision, "was", old.state.Revision, "etcd_revision", v.etcdRev, "was_etcd_revision", old.etcdRev,
			"history_resets", v.epoch)
	}
	snap := v.snapshot()
	// Synced before the notification goes out: a reader woken by it (a
	// gateway whose seeding waits for the store) must find the store
	// writable.
	s.noState.Store(nil)
	s.markSynced()
	s.stale.Store(false)
	s.publish(snap, notify)
	if s.cache != nil {
		s.cache.save(snap)
	}
	return v, nil
}

func (s *Store) loadCache() (*snapshot, time.Time, error) {
	if s.cache == nil {
		return nil, time.Time{}, errors.New("no DataDir is set for a cache")
	}
	return s.cache.load()
}

// shutdown releases what a failed Open created.
func (s *Store) shutdown() {
	s.cancel()
	if c := s.cli.Load(); c != nil {
		c.Close()
	}
}

// publish makes snap the state that Load returns, notifies Changes if asked
// to, and only then wakes the writers waiting for it, so that a write's
// notification is queued by the time the write returns.
func (s *Store) publish(snap *snapshot, notify bool) {
	s.amu.Lock()
	s.snap.Store(snap)
	if notify {
		store.Notify(s.changes, snap.state.Revision)
	}
	close(s.applied)
	s.applied = make(chan struct{})
	s.amu.Unlock()
}

// waitApplied waits until the published snapshot includes etcd revision
// rev of the history of epoch, a write committed on top of the state read
// at from. It returns nil once it does, an error wrapping errHistory if a
// later epoch is published first whose state does not follow from (the
// revision may not exist in the history etcd holds now), and ctx's error
// if ctx ends first. A later epoch whose state follows from is the history
// the write went into, noticed by the watch after the write read it (etcd
// restored just before): the wait goes on in it.
func (s *Store) waitApplied(ctx context.Context, rev, epoch int64, from position) error {
	for {
		s.amu.Lock()
		snap, ch := s.snap.Load(), s.applied
		s.amu.Unlock()
		if snap != nil {
			if snap.state.Epoch != epoch {
				if !from.leadsTo(snap.pos()) {
					return fmt.Errorf("etcd revision %d: %w", rev, errHistory)
				}
				epoch = snap.state.Epoch
			}
			if snap.etcdRev >= rev {
				return nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// awaitResync asks the watch loop to re-read etcd and waits until it has
// published a state read after was, or ctx ends.
func (s *Store) awaitResync(ctx context.Context, was *snapshot) error {
	select {
	case s.resync <- struct{}{}:
	default:
	}
	for {
		s.amu.Lock()
		snap, ch := s.snap.Load(), s.applied
		s.amu.Unlock()
		if snap.gen > was.gen {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Store) markSynced() {
	now := time.Now().UnixNano()
	s.lastSync.Store(now)
	if !s.synced.Swap(true) {
		s.syncSince.Store(now)
		s.log.Info("in sync with etcd")
	}
}

func (s *Store) markUnsynced(err error) {
	if s.synced.Swap(false) {
		s.syncSince.Store(time.Now().UnixNano())
		s.log.Warn("lost etcd; serving the last state until it is back", "error", err)
	}
}

// begin registers a call in flight, or reports ErrClosed. The caller must
// call the returned function when done.
func (s *Store) begin() (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	s.ops.Add(1)
	return s.ops.Done, nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// errOpTimeout is the cause of an operation context that ran out of
// WriteTimeout, which tells our deadline from the caller's.
var errOpTimeout = errors.New("operation timeout")

// opContext bounds one operation by WriteTimeout and by Close.
func (s *Store) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.opts.WriteTimeout, errOpTimeout)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// Kind returns "etcd".
func (s *Store) Kind() string { return "etcd" }

// Changes returns the notification channel; see store.Store. It receives
// the store revision after every change committed by any process sharing
// the prefix, as the watch applies it, and after every resync that follows
// a lost connection or watch (even if nothing changed meanwhile), so that
// the gateway reloads. The sync done by Open does not notify.
func (s *Store) Changes() <-chan int64 { return s.changes }

// Load returns the whole rule set as of the last revision the watch
// applied: a consistent state at one etcd revision. It is served from
// memory and keeps answering while etcd is unreachable; Synced and Stale
// tell whether it may be behind.
func (s *Store) Load(ctx context.Context) (store.State, error) {
	if err := ctx.Err(); err != nil {
		return store.State{}, fmt.Errorf("load rules: %w", err)
	}
	if s.isClosed() {
		return store.State{}, fmt.Errorf("load rules: %w", store.ErrClosed)
	}
	snap := s.snap.Load()
	if snap == nil {
		return store.State{}, fmt.Errorf("load rules: %w: %w", s.StateErr(), store.ErrUnavailable)
	}
	st := snap.state
	rules := make([]store.Entry, len(st.Rules))
	for i, e := range st.Rules {
		rules[i] = cloneEntry(e)
	}
	st.Rules = rules
	return st, nil
}

// Get returns the current version of key from the same snapshot as Load.
func (s *Store) Get(ctx context.Context, key string) (store.Entry, error) {
	if err := ctx.Err(); err != nil {
		return store.Entry{}, fmt.Errorf("get rule %q: %w", key, err)
	}
	if !validKey(key) {
		return store.Entry{}, fmt.Errorf("get rule %q: key must match %s: %w", key, store.KeyPattern, store.ErrInvalid)
	}
	if s.isClosed() {
		return store.Entry{}, fmt.Errorf("get rule %q: %w", key, store.ErrClosed)
	}
	snap := s.snap.Load()
	if snap == nil {
		return store.Entry{}, fmt.Errorf("get rule %q: %w: %w", key, s.StateErr(), store.ErrUnavailable)
	}
	rules := snap.state.Rules
	i, ok := slices.BinarySearchFunc(rules, key, func(e store.Entry, k string) int { return strings.Compare(e.Key, k) })
	if !ok {
		return store.Entry{}, store.NotFound(key)
	}
	return cloneEntry(rules[i]), nil
}

// Synced reports whether the store is connected to etcd and its watch is
// current, as of the last probe. It is what /readyz should report.
func (s *Store) Synced() bool { return s.synced.Load() }

// Stale reports whether the state served is the cache file read at Open
// (or, with StartWithoutState, that there is none): etcd has not been
// reached since this process opened the store.
func (s *Store) Stale() bool { return s.stale.Load() }

// StateErr reports why the store holds no state: etcd was unreachable at
// Open, there was no usable cache, and Options.StartWithoutState let Open
// succeed. It is nil once a state is held, which is always the case
// without StartWithoutState.
func (s *Store) StateErr() error {
	if p := s.noState.Load(); p != nil {
		return *p
	}
	if s.snap.Load() == nil {
		return errors.New("no state read from etcd yet")
	}
	return nil
}

// SyncSince is when Synced last changed, or when Open served the cache
// (or started without state) because etcd was unreachable. Zero if
// neither has happened. It reads the wall clock, as LastSync does.
func (s *Store) SyncSince() time.Time {
	n := s.syncSince.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// LastSync is the last time etcd confirmed the served state: a resync, a
// watch event or a successful probe. While Stale it is the time the cached
// state was read from etcd. Zero if never.
func (s *Store) LastSync() time.Time {
	n := s.lastSync.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// WatchRestarts counts how often the watch was re-established after
// compaction, a lost connection or a watch that fell behind, for metrics.
func (s *Store) WatchRestarts() int64 { return s.restarts.Load() }

// HistoryResets counts how often the store found that etcd's history had
// been replaced (etcd restored from a backup) and started serving the new
// one: it is the Epoch of the published state (store.State.Epoch), so a
// reader that compares it with a state's Epoch never sees it ahead.
func (s *Store) HistoryResets() int64 {
	if snap := s.snap.Load(); snap != nil {
		return snap.state.Epoch
	}
	return 0
}

// PropagationLag is the time between the last change applied from the
// watch and when it was made: the local clock at application minus the
// writer's clock in the change record (its At). It includes the clock skew
// between the writing host and this one, and is zero before any change
// arrived. Negative differences read as zero.
func (s *Store) PropagationLag() time.Duration { return time.Duration(s.lastLag.Load()) }

// Client returns the etcd client the store uses, for sharing with Register
// and WatchInstances. It is nil only while a store opened with
// authentication against an unreachable cluster has not connected yet. The
// store closes it in Close.
func (s *Store) Client() *clientv3.Client { return s.cli.Load() }

// Prefix returns the normalized key prefix ("/graygate/prod/").
func (s *Store) Prefix() string { return s.keys.prefix }

// Close stops the watch, waits for calls in flight (which it cancels),
// writes the cache a last time, closes the Changes channel and closes the
// client. Closing twice is a no-op.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.ops.Wait()
	s.bg.Wait()
	if s.cache != nil {
		close(s.cache.stop)
		s.cacheWG.Wait()
	}
	close(s.changes)
	if c := s.cli.Load(); c != nil {
		if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("close etcd store: %w", err)
		}
	}
	return nil
}
