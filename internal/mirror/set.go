package mirror

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Header is one header field of a Request or a Response.
type Header struct{ Name, Value string }

// Request is the data plane's copy of a request to mirror. Set.Mirror
// takes ownership: nothing in it may alias a buffer the data plane reuses
// (fasthttp's request buffers), and the data plane must not change it
// afterwards.
type Request struct {
	// Method and URI are the request line: URI is the request-target in
	// origin form ("/api/user?id=1"), as sent to the primary.
	Method, URI string
	// Host is the Host the primary request carried upstream; the mirror
	// gets it with the spec's HostSuffix.
	Host string
	// Header holds the request's header fields as sent to the primary
	// (Host excepted). Hop-by-hop fields, the framing fields and Expect
	// are dropped again here, and X-Gray-Mirror: 1 is added.
	Header []Header
	// Body is the request body, at most the spec's MaxBody bytes.
	Body []byte
	// Trailer holds the trailer fields sent to the primary after its
	// chunked body. With them, the copy's body goes chunked too, and they
	// follow it: an upstream that reads them answers the copy as it
	// answered the primary.
	Trailer []Header
	// BodyTruncated says the body was longer than MaxBody (or of unknown
	// length beyond it): the request is not mirrored, and is counted as
	// dropped.
	BodyTruncated bool
}

// Response is the data plane's copy of the primary's answer, with the same
// ownership rule as Request.
type Response struct {
	// Status is the primary's status code.
	Status int
	// Header holds the upstream's response header fields, before the
	// gateway added its own (X-Gray-*, Via).
	Header []Header
	// Body is the beginning of the response body, at most
	// Options.MaxResponseBody bytes (Set.MaxResponseBody).
	Body []byte
	// BodyTruncated says the body was longer: bodies are then not
	// compared, only status and headers.
	BodyTruncated bool
}

// Options configure a Set. Zero fields take the defaults named.
type Options struct {
	// Workers is how many copies of one mirror are in flight at once
	// (default 4); each has its own connection to the target.
	Workers int
	// Queue is how many copies of one mirror may wait for a worker
	// (default 64). A copy that finds the queue full is dropped.
	Queue int
	// MaxQueuedBytes bounds the bodies held by every queue together
	// (default 32 MiB); over it copies are dropped.
	MaxQueuedBytes int64
	// Timeout bounds one exchange with a mirror target, from dialing to
	// the last byte of the answer read (default 5s).
	Timeout time.Duration
	// DialTimeout bounds connecting to a mirror target (default 1s).
	DialTimeout time.Duration
	// MaxResponseBody is how much of each answer is read and compared
	// (default 256 KiB); the data plane tees at most this much of the
	// primary's answer.
	MaxResponseBody int64
	// MaxFields bounds the fields whose differences a mirror tracks
	// (default 256); differences in further fields are only counted.
	MaxFields int
	// MaxExamples is how many examples a field keeps (default 3), each
	// value cut to ExampleBytes (default 200).
	MaxExamples  int
	ExampleBytes int
	// Thresholds decide regressions (default DefaultThresholds).
	Thresholds *Thresholds
	// Transport overrides the mirror's own HTTP transport (tests).
	Transport http.RoundTripper
	Logger    *slog.Logger
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Queue <= 0 {
		o.Queue = 64
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = 32 << 20
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = time.Second
	}
	if o.MaxResponseBody <= 0 {
		o.MaxResponseBody = 256 << 10
	}
	if o.MaxFields <= 0 {
		o.MaxFields = 256
	}
	if o.MaxExamples <= 0 {
		o.MaxExamples = 3
	}
	if o.ExampleBytes <= 0 {
		o.ExampleBytes = 200
	}
	if o.Thresholds == nil {
		t := DefaultThresholds
		o.Thresholds = &t
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Set holds the mirrors of a gateway, one per rule, with their queues,
// workers, counters and diff statistics. They live outside the rule
// snapshots, like breakers (breaker.Set), so that they survive reloads:
// the reloader calls Sync with the specs of every new snapshot before
// publishing it. A mirror is keyed by Spec.Key (rule, targets, ignore
// list): changing any of them starts its diff over; the counters are kept
// per rule. A Set is safe for concurrent use.
type Set struct {
	opts   Options
	client *http.Client
	queued atomic.Int64 // bytes held by every queue

	mu       sync.Mutex
	states   map[string]*state
	counters map[string]*counters // by rule
	closed   bool
}

// counters are one rule's mirror totals, exported as metrics.
type counters struct {
	sent, failed, dropped atomic.Uint64
}

// New returns an empty Set with its own HTTP transport: its own connection
// pool and timeouts, never the data plane's nor http.DefaultTransport.
func New(opts Options) *Set {
	opts.defaults()
	rt := opts.Transport
	if rt == nil {
		d := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
		rt = &http.Transport{
			Proxy:                 nil, // never an environment proxy
			DialContext:           d.DialContext,
			MaxIdleConnsPerHost:   opts.Workers,
			MaxConnsPerHost:       2 * opts.Workers,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: opts.Timeout,
			TLSHandshakeTimeout:   opts.DialTimeout,
			ExpectContinueTimeout: 0,
			DisableCompression:    true, // compare the bytes as sent
			ForceAttemptHTTP2:     false,
		}
	}
	return &Set{
		opts: opts,
		client: &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is an answer to compare
		}},
		states:   map[string]*state{},
		counters: map[string]*counters{},
	}
}

// MaxResponseBody is how much of the primary's answer the data plane must
// copy into Response.Body.
func (s *Set) MaxResponseBody() int64 { return s.opts.MaxResponseBody }

// Sync makes specs the mirrors of the set: a spec whose key is known gets
// the running mirror (its statistics and queue), a new key starts one, and
// mirrors whose keys are not in specs stop (their queued copies are
// dropped, their workers end after the copy in hand). Sync must run before
// the snapshot holding specs is published; a spec of an older snapshot
// that Sync no longer lists is dropped by Mirror.
func (s *Set) Sync(specs []*Spec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	keep := make(map[string]bool, len(specs))
	rules := make(map[string]bool, len(specs))
	for _, sp := range specs {
		st, ok := s.states[sp.Key]
		if !ok {
			st = s.start(sp)
			s.states[sp.Key] = st
		}
		st.spec.Store(sp)
		sp.state.Store(st)
		keep[sp.Key], rules[sp.Rule] = true, true
	}
	for k, st := range s.states {
		if !keep[k] {
			st.stop()
			delete(s.states, k)
		}
	}
	for r := range s.counters {
		if !rules[r] {
			delete(s.counters, r)
		}
	}
}

// countersOf returns the rule's counters; the caller holds s.mu.
func (s *Set) countersOf(rule string) *counters {
	c := s.counters[rule]
	if c == nil {
		c = &counters{}
		s.counters[rule] = c
	}
	return c
}

// Mirror queues a shadow copy of req, with the primary's answer to compare
// the mirror's with, and returns at once: it never waits for a worker, the
// network or a lock held across I/O. It returns false when the copy was
// dropped (counted in graygate_mirror_dropped_total): the queue or the
// byte budget is full, the body is over the spec's MaxBody, or the spec's
// mirror is no longer synced. It takes ownership of req and primary.
// Mirror is safe for concurrent use.
func (s *Set) Mirror(sp *Spec, req Request, primary Response) bool {
	st := sp.state.Load()
	if st == nil || st.set != s || st.stopped.Load() {
		s.mu.Lock()
		s.countersOf(sp.Rule).dropped.Add(1)
		s.mu.Unlock()
		return false
	}
	if req.BodyTruncated || int64(len(req.Body)) > sp.MaxBody {
		st.ctr.dropped.Add(1)
		return false
	}
	size := int64(len(req.Body)+len(primary.Body)+len(req.URI)) + headerBytes(req.Header) + headerBytes(req.Trailer) + headerBytes(primary.Header)
	if s.queued.Add(size) > s.opts.MaxQueuedBytes {
		s.queued.Add(-size)
		st.ctr.dropped.Add(1)
		return false
	}
	select {
	case st.queue <- job{spec: sp, req: req, primary: primary, size: size}:
		if st.stopped.Load() {
			st.drain() // stopped meanwhile: its workers may be gone
		}
		return true
	default:
		s.queued.Add(-size)
		st.ctr.dropped.Add(1)
		return false
	}
}

func headerBytes(h []Header) int64 {
	n := 0
	for _, f := range h {
		n += len(f.Name) + len(f.Value)
	}
	return int64(n)
}

// Stats are one rule's mirror totals.
type Stats struct {
	Rule                  string
	Sent, Failed, Dropped uint64
}

// Stats returns every rule's totals, sorted by rule, for the metrics:
// Sent counts copies the mirror target answered, Failed those it did not
// (no instance, connection error, timeout), Dropped those never sent.
func (s *Set) Stats() []Stats {
	s.mu.Lock()
	out := make([]Stats, 0, len(s.counters))
	for r, c := range s.counters {
		out = append(out, Stats{Rule: r, Sent: c.sent.Load(), Failed: c.failed.Load(), Dropped: c.dropped.Load()})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Stats) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

// Diff returns the diff document of the rule's mirror, and false when the
// rule has no mirror in the set.
func (s *Set) Diff(rule string) (Document, bool) {
	s.mu.Lock()
	var st *state
	for _, c := range s.states {
		if c.spec.Load().Rule == rule {
			st = c
			break
		}
	}
	s.mu.Unlock()
	if st == nil {
		return Document{}, false
	}
	return st.document(), true
}

// Close stops every mirror and waits for their workers, which cancel the
// exchanges in hand. Mirror drops everything afterwards.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	states := make([]*state, 0, len(s.states))
	for k, st := range s.states {
		states = append(states, st)
		delete(s.states, k)
	}
	s.mu.Unlock()
	for _, st := range states {
		st.stop()
		st.wg.Wait()
	}
	if t, ok := s.client.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// job is one queued copy.
type job struct {
	spec    *Spec
	req     Request
	primary Response
	size    int64
}

// state is one mirror: its queue and workers and its diff statistics.
type state struct {
	set     *Set
	spec    atomic.Pointer[Spec] // the latest synced spec, for the document
	ctr     *counters
	queue   chan job
	ctx     context.Context
	cancel  context.CancelFunc
	stopped atomic.Bool
	wg      sync.WaitGroup

	mu    sync.Mutex // guards stats
	stats stats

	// http10 holds the instances (by address) whose last answer came
	// over HTTP/1.0: a copy with trailer fields goes to them with its
	// length and without the fields, as the data plane's request does
	// (holdForHTTP10), never chunked. It lives as long as the mirror.
	http10 sync.Map
}

// start creates and starts the mirror of sp; the caller holds s.mu.
func (s *Set) start(sp *Spec) *state {
	ctx, cancel := context.WithCancel(context.Background())
	st := &state{set: s, ctr: s.countersOf(sp.Rule), queue: make(chan job, s.opts.Queue), ctx: ctx, cancel: cancel,
		stats: stats{fields: map[string]*field{}}}
	st.spec.Store(sp)
	st.wg.Add(s.opts.Workers)
	for range s.opts.Workers {
		go st.work()
	}
	return st
}

// stop ends the mirror's workers; queued copies are let go.
func (st *state) stop() {
	if st.stopped.Swap(true) {
		return
	}
	st.cancel()
}

func (st *state) work() {
	defer st.wg.Done()
	for {
		select {
		case <-st.ctx.Done():
			st.drain()
			return
		case j := <-st.queue:
			st.process(j)
			st.set.queued.Add(-j.size)
		}
	}
}

// drain gives the byte budget of copies left in a stopped queue back.
func (st *state) drain() {
	for {
		select {
		case j := <-st.queue:
			st.set.queued.Add(-j.size)
		default:
			return
		}
	}
}
