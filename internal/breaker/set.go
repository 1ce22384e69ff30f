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
	// the breaker's key; see Options.OnTransition. It is not called for a
	// breaker that Retain dropped: a request that was in flight on the old
	// snapshot still records into it, and a transition it causes concerns
	// a target its rule no longer uses. Retain waits for the calls in
	// progress, so once it returns the caller may forget a dropped key's
	// state (its metrics) without a late call bringing it back. The hook
	// must therefore not call Retain.
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
	// reporting counts the OnTransition calls in progress; Retain waits on
	// idle (with mu) until it is zero.
	reporting int
	idle      sync.Cond
}

// NewSet returns an empty Set.
func NewSet(opts SetOptions) *Set {
	s := &Set{opts: opts, m: map[string]*Breaker{}}
	s.idle.L = &s.mu
	return s
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
		var nb *Breaker
		if s.opts.OnTransition != nil {
			opts.OnTransition = func(from, to State, reason string) { s.report(key, nb, from, to, reason) }
		}
		var err error
		if nb, err = New(cfg, opts); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		b = nb
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

// report calls OnTransition for a transition of b, unless Retain dropped
// b.
func (s *Set) report(key string, b *Breaker, from, to State, reason string) {
	s.mu.Lock()
	held := s.m[key] == b
	if held {
		s.reporting++
	}
	s.mu.Unlock()
	if !held {
		return
	}
	defer func() {
		s.mu.Lock()
		if s.reporting--; s.reporting == 0 {
			s.idle.Broadcast()
		}
		s.mu.Unlock()
	}()
	s.opts.OnTransition(key, from, to, reason)
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
// and a later Get for its key starts a fresh one; its transitions are no
// longer reported (see SetOptions.OnTransition).
func (s *Set) Retain(keep func(key string) bool) []string {
	s.mu.Lock()
	var dropped []string
	for k := range s.m {
		if !keep(k) {
			dropped = append(dropped, k)
			delete(s.m, k)
		}
	}
	// A call that began before the deletion may concern a dropped key.
	for len(dropped) > 0 && s.reporting > 0 {
		s.idle.Wait()
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
