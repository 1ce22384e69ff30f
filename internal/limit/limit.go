// Package limit holds the state of per-route rate limits and per-pool
// concurrency caps. Both outlive rule and config reloads: a Set hands out
// the same Limiter or Gate for the same key, reconfigured in place, so a
// reload neither resets a token bucket nor forgets requests in flight.
package limit

import (
	"container/list"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/graygate/graygate/internal/strict"
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
	// MaxIdentities bounds the per-identity buckets kept (least recently
	// used go first; default 100000).
	MaxIdentities int `json:"max_identities,omitempty"`
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
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Burst == 0 {
		c.Burst = max(1, int(math.Ceil(c.RPS)))
	}
	if c.MaxIdentities == 0 {
		c.MaxIdentities = 100000
	}
	return c
}

// Limiter is one route's rate limit. It is safe for concurrent use.
type Limiter struct {
	now func() time.Time

	mu    sync.Mutex
	cfg   Config
	route *rate.Limiter
	users map[string]*list.Element // identity → element of lru holding *userBucket
	lru   *list.List
}

type userBucket struct {
	id string
	l  *rate.Limiter
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

// Configure applies a new config, keeping the tokens already spent.
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
	if cfg.PerIdentity != l.cfg.PerIdentity || l.users == nil {
		l.users, l.lru = map[string]*list.Element{}, list.New()
	} else {
		now := l.now()
		for _, e := range l.users {
			b := e.Value.(*userBucket)
			b.l.SetLimitAt(now, rate.Limit(cfg.RPS))
			b.l.SetBurstAt(now, cfg.Burst)
		}
	}
	l.cfg = cfg
}

// Allow takes a token for a request from identity (ignored unless the limit
// is per identity). identity may alias a request buffer: it is cloned when
// kept. When there is none it returns false and how long until
// one will be, for Retry-After.
func (l *Limiter) Allow(identity string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	lim := l.route
	if l.cfg.PerIdentity {
		lim = l.userLocked(identity)
	}
	l.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

func (l *Limiter) userLocked(id string) *rate.Limiter {
	if e, ok := l.users[id]; ok {
		l.lru.MoveToFront(e)
		return e.Value.(*userBucket).l
	}
	id = strings.Clone(id) // the caller's string may alias a request buffer
	b := &userBucket{id: id, l: rate.NewLimiter(rate.Limit(l.cfg.RPS), l.cfg.Burst)}
	l.users[id] = l.lru.PushFront(b)
	for l.lru.Len() > l.cfg.MaxIdentities {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.users, old.Value.(*userBucket).id)
	}
	return b.l
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
