// Package limit holds the state of per-route rate limits and per-pool
// concurrency caps. Both outlive rule and config reloads: a Set hands out
// the same Limiter or Gate for the same key, reconfigured in place, so a
// reload neither resets a token bucket nor forgets requests in flight.
// Retain drops the keys a reload no longer uses, so that state does not
// pile up over reloads and a key that comes back starts afresh.
//
// # Per-identity buckets
//
// A per-identity limit keeps one token bucket per identity, and identities
// come from clients, so the table is bounded twice: in entries
// (Config.MaxIdentities) and in bytes (Config.MaxIdentityBytes), where an
// entry costs the length of its identity plus EntryOverhead, the measured
// size of the rest of it (the bucket, the map slot, the list links; a test
// checks the heap against this accounting). A client that sends long ids
// therefore fills the budget with fewer of them, and the memory bound
// holds whatever their length.
//
// Which bucket goes when the table is full matters as much: under plain LRU
// a client rotating fresh ids pushes out the buckets of everyone else, at
// one id per request, and the users whose limit matters most (the busy
// ones) get a fresh burst. The table is therefore a segmented LRU (SLRU,
// Karedla, Love and Wherry, "Caching strategies to improve disk system
// performance", IEEE Computer 27(3), 1994), as used in front of caches that
// must survive scans: a new identity enters a probation segment; its second
// request promotes it to a protected segment of at most 80% of each bound,
// whose least recently used entry is demoted back to probation's head when
// it overflows. Eviction takes probation's least recently used entry first,
// and protected ones only when probation is empty. An id seen once (a scan,
// or a rotation attack) never leaves probation, so however many of them
// arrive they only evict each other, and an identity that came back at
// least once keeps its bucket. An attacker who sends every fresh id twice
// does reach protected, and is then plain LRU against the users there: an
// identity keeps its bucket while it is used at least once every
// (protected capacity / attacker's rate of new ids) seconds.
//
// SLRU was chosen over CLOCK-Pro and W-TinyLFU because the table is a map
// and two intrusive lists under the Limiter's mutex, which every request
// takes anyway, with O(1) work per request and no second structure (a
// frequency sketch) to size and age; and because admission must never
// refuse a new identity a bucket: a bucket not kept is a rate limit not
// enforced. Losing a bucket is lenient, never strict: the identity starts
// again with a full burst. An entry whose bucket has refilled carries no
// information, so evicting it is free.
package limit

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/graygate/graygate/internal/strict"
)

// Defaults of the per-identity table's bounds.
const (
	DefaultMaxIdentities    = 100000
	DefaultMaxIdentityBytes = 16 << 20
	// MinMaxIdentityBytes is the smallest MaxIdentityBytes accepted: below
	// it a handful of long ids would leave no room for anyone.
	MinMaxIdentityBytes = 64 << 10
	// EntryOverhead is what one per-identity bucket costs besides its
	// identity's bytes: the entry (48 bytes), its rate.Limiter (80), the
	// map slot (24 bytes per slot at a load between 7/16 and 7/8, so up to
	// 55) and the size-class rounding of the identity's copy (up to 1/8 of
	// it, bounded here by that of a 256-byte id, 32 bytes; larger ids are
	// charged their rounding separately, see cost). TestEntryOverhead
	// measures the heap against it.
	EntryOverhead = 240
	// protectedShare is the protected segment's share of each bound, in
	// fifths.
	protectedShare = 4
)

// Config is a token-bucket rate limit.
type Config struct {
	// RPS is the sustained rate in requests per second.
	RPS float64 `json:"rps"`
	// Burst is how many requests may come at once (default: ceil(RPS), at least 1).
	Burst int `json:"burst,omitempty"`
	// PerIdentity gives every user (the resolved identity) a bucket of its
	// own instead of one bucket for the whole route.
	PerIdentity bool `json:"per_identity,omitempty"`
	// MaxIdentities bounds the number of per-identity buckets kept
	// (default DefaultMaxIdentities); see the package doc for which go.
	MaxIdentities int `json:"max_identities,omitempty"`
	// MaxIdentityBytes bounds their memory: each costs its identity's
	// length plus EntryOverhead (default DefaultMaxIdentityBytes, 16 MiB;
	// at least MinMaxIdentityBytes).
	MaxIdentityBytes int64 `json:"max_identity_bytes,omitempty"`
}

// Validate reports every problem under path.
func (c *Config) Validate(path string) error {
	var errs []error
	if c.RPS <= 0 || math.IsNaN(c.RPS) || math.IsInf(c.RPS, 0) {
		errs = append(errs, strict.Errorf(strict.Join(path, "rps"), "must be a positive number, got %v", c.RPS))
	}
	if c.Burst < 0 {
		errs = append(errs, strict.Errorf(strict.Join(path, "burst"), "must not be negative, got %d", c.Burst))
	}
	if c.MaxIdentities < 0 {
		errs = append(errs, strict.Errorf(strict.Join(path, "max_identities"), "must not be negative, got %d", c.MaxIdentities))
	}
	if c.MaxIdentityBytes != 0 && c.MaxIdentityBytes < MinMaxIdentityBytes {
		errs = append(errs, strict.Errorf(strict.Join(path, "max_identity_bytes"), "must be at least %d (64 KiB), got %d", MinMaxIdentityBytes, c.MaxIdentityBytes))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Burst == 0 {
		c.Burst = max(1, int(math.Ceil(c.RPS)))
	}
	if c.MaxIdentities == 0 {
		c.MaxIdentities = DefaultMaxIdentities
	}
	if c.MaxIdentityBytes == 0 {
		c.MaxIdentityBytes = DefaultMaxIdentityBytes
	}
	return c
}

// Limiter is one route's rate limit. It is safe for concurrent use.
type Limiter struct {
	now func() time.Time

	mu    sync.Mutex
	cfg   Config
	route *rate.Limiter
	// users maps an identity to its bucket, which is in exactly one of
	// probation and protected (see the package doc).
	users     map[string]*entry
	probation segment
	protected segment
	evicted   uint64
}

// entry is one identity's bucket and its place in a segment.
type entry struct {
	id         string
	lim        *rate.Limiter
	prev, next *entry
	protected  bool
}

// cost is what e is charged against MaxIdentityBytes: its identity, the
// size-class rounding of an identity longer than 256 bytes (EntryOverhead
// covers that of shorter ones), and EntryOverhead.
func cost(id string) int64 {
	n := int64(len(id))
	if n > 256 {
		n += n / 8
	}
	return n + EntryOverhead
}

// segment is an intrusive doubly linked list, most recently used first,
// with its entry count and cost.
type segment struct {
	root  entry // sentinel: root.next is the front, root.prev the back
	n     int
	bytes int64
}

func (s *segment) init() { s.root.next, s.root.prev, s.n, s.bytes = &s.root, &s.root, 0, 0 }

func (s *segment) pushFront(e *entry) {
	e.prev, e.next = &s.root, s.root.next
	s.root.next.prev = e
	s.root.next = e
	s.n++
	s.bytes += cost(e.id)
}

func (s *segment) remove(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	s.n--
	s.bytes -= cost(e.id)
}

// back returns the least recently used entry, or nil.
func (s *segment) back() *entry {
	if s.n == 0 {
		return nil
	}
	return s.root.prev
}

// New returns a limiter; now is injected for tests (nil means time.Now).
func New(cfg Config, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	l := &Limiter{now: now}
	l.Configure(cfg)
	return l
}

// Configure applies a new config, keeping the tokens already spent and, if
// the bounds shrank, evicting down to them.
func (l *Limiter) Configure(cfg Config) {
	cfg = cfg.withDefaults()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.route == nil {
		l.route = rate.NewLimiter(rate.Limit(cfg.RPS), cfg.Burst)
	} else {
		now := l.now()
		l.route.SetLimitAt(now, rate.Limit(cfg.RPS))
		l.route.SetBurstAt(now, cfg.Burst)
	}
	if l.users == nil {
		l.users = map[string]*entry{}
		l.probation.init()
		l.protected.init()
	}
	// The identities' buckets are kept when per_identity is turned off:
	// a reload refused after its build turns it back at once (the build
	// configured this limiter), and dropping them would give every client
	// a fresh burst. The table stays within its bounds meanwhile.
	now := l.now()
	for _, e := range l.users {
		e.lim.SetLimitAt(now, rate.Limit(cfg.RPS))
		e.lim.SetBurstAt(now, cfg.Burst)
	}
	l.cfg = cfg
	l.demoteLocked()
	l.evictLocked(nil)
}

// Allow takes a token for a request from identity (ignored unless the limit
// is per identity). identity may alias a request buffer: it is cloned when
// kept. When there is none it returns false and how long until
// one will be, for Retry-After. Only an admitted request takes a token: a
// refused one costs nothing, however many arrive at once.
func (l *Limiter) Allow(identity string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	lim := l.route
	if l.cfg.PerIdentity {
		lim = l.userLocked(identity)
	}
	l.mu.Unlock()
	// AllowN takes a token only when there is one. Reserving one and
	// cancelling the reservation when it would have to wait (what
	// rate.Limiter offers for the delay) is not atomic: requests refused
	// at the same moment each reserve a token in the future, and a
	// cancellation returns its token only if no later reservation was made
	// meanwhile, so under concurrent overload the refused requests spent
	// tokens, the bucket ran into debt, and fewer than RPS requests were
	// admitted, with a Retry-After that grew with the debt.
	if lim.AllowN(now, 1) {
		return true, 0
	}
	return false, wait(lim, now)
}

// wait is how long from now until lim has a whole token.
func wait(lim *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - lim.TokensAt(now)
	if missing <= 0 {
		// Refilled between AllowN and TokensAt (another request's
		// later clock): try again at once.
		return 0
	}
	return time.Duration(math.Ceil(missing / float64(lim.Limit()) * float64(time.Second)))
}

// userLocked returns id's bucket, making it if needed, and updates the
// segments (see the package doc).
func (l *Limiter) userLocked(id string) *rate.Limiter {
	if e, ok := l.users[id]; ok {
		if e.protected {
			l.protected.remove(e)
		} else {
			l.probation.remove(e)
			e.protected = true
		}
		l.protected.pushFront(e)
		l.demoteLocked()
		return e.lim
	}
	id = strings.Clone(id) // the caller's string may alias a request buffer
	e := &entry{id: id, lim: rate.NewLimiter(rate.Limit(l.cfg.RPS), l.cfg.Burst)}
	l.users[id] = e
	l.probation.pushFront(e)
	l.evictLocked(e)
	return e.lim
}

// demoteLocked moves protected's least recently used entries to the head
// of probation while protected is over its share of either bound.
func (l *Limiter) demoteLocked() {
	maxN := max(1, l.cfg.MaxIdentities/5*protectedShare)
	maxBytes := l.cfg.MaxIdentityBytes / 5 * protectedShare
	for l.protected.n > 1 && (l.protected.n > maxN || l.protected.bytes > maxBytes) {
		e := l.protected.back()
		l.protected.remove(e)
		e.protected = false
		l.probation.pushFront(e)
	}
}

// evictLocked drops entries, probation's least recently used first, until
// the table is within both bounds. keep, the entry just made (nil: none),
// goes last: were it dropped to make room for itself, its identity would
// get a fresh bucket on every request and never be limited (with
// max_identities 1, or a protected segment that fills the table).
func (l *Limiter) evictLocked(keep *entry) {
	for l.probation.n+l.protected.n > l.cfg.MaxIdentities || l.probation.bytes+l.protected.bytes > l.cfg.MaxIdentityBytes {
		s := &l.probation
		if s.n == 0 || (s.n == 1 && s.back() == keep && l.protected.n > 0) {
			s = &l.protected
		}
		e := s.back()
		s.remove(e)
		delete(l.users, e.id)
		l.evicted++
	}
}

// size reports the per-identity table: the entries in each segment and
// what they are charged against MaxIdentityBytes.
func (l *Limiter) size() (probation, protected int, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.probation.n, l.protected.n, l.probation.bytes + l.protected.bytes
}

// Gate caps concurrent requests to one pool. The zero Gate is unusable; a
// nil *Gate admits everything.
type Gate struct {
	max      atomic.Int64
	inFlight atomic.Int64
}

// Acquire admits a request unless Max are in flight. Every true must be
// paired with one Release.
func (g *Gate) Acquire() bool {
	if g == nil {
		return true
	}
	m := g.max.Load()
	if m <= 0 {
		g.inFlight.Add(1)
		return true
	}
	if g.inFlight.Add(1) > m {
		g.inFlight.Add(-1)
		return false
	}
	return true
}

// Release ends a request admitted by Acquire.
func (g *Gate) Release() {
	if g != nil {
		g.inFlight.Add(-1)
	}
}

// InFlight returns the requests in flight.
func (g *Gate) InFlight() int64 {
	if g == nil {
		return 0
	}
	return g.inFlight.Load()
}

// Max returns the cap (0: none).
func (g *Gate) Max() int64 { return g.max.Load() }

// Set keeps limiters and gates by key across reloads. It is safe for
// concurrent use.
type Set struct {
	now      func() time.Time
	mu       sync.Mutex
	limiters map[string]*Limiter
	gates    map[string]*Gate
}

// NewSet returns an empty Set; now is injected for tests (nil: time.Now).
func NewSet(now func() time.Time) *Set {
	return &Set{now: now, limiters: map[string]*Limiter{}, gates: map[string]*Gate{}}
}

// Limiter returns the limiter for key, created or reconfigured with cfg.
func (s *Set) Limiter(key string, cfg Config) *Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.limiters[key]; ok {
		l.Configure(cfg)
		return l
	}
	l := New(cfg, s.now)
	s.limiters[key] = l
	return l
}

// Gate returns the gate for key with its cap set to max (0: no cap).
func (s *Set) Gate(key string, max int) *Gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.gates[key]
	if !ok {
		g = &Gate{}
		s.gates[key] = g
	}
	g.max.Store(int64(max))
	return g
}

// LimiterStats is what one per-identity limiter holds, for the metrics.
type LimiterStats struct {
	Key string
	// Identities and Bytes are the identities it tracks and what they
	// cost against MaxIdentityBytes.
	Identities int
	Bytes      int64
	// Evicted counts identities it dropped to stay within its bounds
	// (each such identity gets a fresh bucket when it comes back).
	Evicted uint64
}

// Stats returns every limiter's stats, in no particular order.
func (s *Set) Stats() []LimiterStats {
	s.mu.Lock()
	ls := make([]*Limiter, 0, len(s.limiters))
	keys := make([]string, 0, len(s.limiters))
	for k, l := range s.limiters {
		ls, keys = append(ls, l), append(keys, k)
	}
	s.mu.Unlock()
	out := make([]LimiterStats, len(ls))
	for i, l := range ls {
		l.mu.Lock()
		out[i] = LimiterStats{Key: keys[i], Identities: l.probation.n + l.protected.n,
			Bytes: l.probation.bytes + l.protected.bytes, Evicted: l.evicted}
		l.mu.Unlock()
	}
	return out
}

// Len returns how many limiters and gates the set holds.
func (s *Set) Len() (limiters, gates int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.limiters), len(s.gates)
}

// Retain drops limiters and gates whose keys keep rejects.
func (s *Set) Retain(keepLimiter, keepGate func(key string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.limiters {
		if !keepLimiter(k) {
			delete(s.limiters, k)
		}
	}
	for k, g := range s.gates {
		if !keepGate(k) && g.InFlight() == 0 {
			delete(s.gates, k)
		}
	}
}
