package breaker

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// SetOptions configure a Set.
type SetOptions struct {
	// Now is the clock of every breaker in the set (default time.Now).
	Now func() time.Time
	// OnTransition is called for every transition of every breaker, with
	// the breaker's key; see Options.OnTransition.
	OnTransition func(key string, from, to State, reason string)
}

// Set holds the breakers of a gateway by key, for example a rule key and a
// target address. Breakers live outside the rule snapshots, so their state
// survives a rule reload: the reloader calls Get for every key of the new
// rules, stores the returned *Breaker in the compiled snapshot, and then
// calls Retain to drop the keys that are gone. A Set is safe for concurrent
// use; the request path uses the *Breaker it was given and never the Set.
type Set struct {
	opts SetOptions
	mu   sync.Mutex
	m    map[string]*Breaker
}

// NewSet returns an empty Set.
func NewSet(opts SetOptions) *Set {
	return &Set{opts: opts, m: map[string]*Breaker{}}
}

// Get returns the breaker for key, creating it with cfg on first use. For an
// existing key a changed cfg is applied with Configure, which keeps the
// breaker's state. An invalid cfg is reported and changes nothing.
func (s *Set) Get(key string, cfg Config) (*Breaker, error) {
	if key == "" {
		return nil, errors.New("breaker key must not be empty")
	}
	if err := cfg.Validate(""); err != nil {
		return nil, err
	}
	s.mu.Lock()
	b, ok := s.m[key]
	if !ok {
		opts := Options{Name: key, Now: s.opts.Now}
		if hook := s.opts.OnTransition; hook != nil {
			opts.OnTransition = func(from, to State, reason string) { hook(key, from, to, reason) }
		}
		var err error
		if b, err = New(cfg, opts); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.m[key] = b
	}
	s.mu.Unlock()
	if ok {
		// Outside the set's lock: Configure may run the hook, which may
		// call back into the set.
		if err := b.Configure(cfg); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Lookup returns the breaker for key, if there is one.
func (s *Set) Lookup(key string) (*Breaker, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[key]
	return b, ok
}

// Retain drops every breaker whose key keep rejects and returns the dropped
// keys, sorted. A dropped breaker keeps working for whoever still holds it
// (a request in flight on the previous snapshot) but is no longer listed,
// and a later Get for its key starts a fresh one.
func (s *Set) Retain(keep func(key string) bool) []string {
	s.mu.Lock()
	var dropped []string
	for k := range s.m {
		if !keep(k) {
			dropped = append(dropped, k)
			delete(s.m, k)
		}
	}
	s.mu.Unlock()
	slices.Sort(dropped)
	return dropped
}

// Len returns the number of breakers.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Snapshots returns a snapshot of every breaker, sorted by key, for the
// status API.
func (s *Set) Snapshots() []Snapshot {
	s.mu.Lock()
	bs := make([]*Breaker, 0, len(s.m))
	for _, b := range s.m {
		bs = append(bs, b)
	}
	s.mu.Unlock()
	slices.SortFunc(bs, func(a, b *Breaker) int { return strings.Compare(a.name, b.name) })
	out := make([]Snapshot, len(bs))
	for i, b := range bs {
		out[i] = b.Snapshot()
	}
	return out
}
