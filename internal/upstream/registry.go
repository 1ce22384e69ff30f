package upstream

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Registry resolves target strings to pools: names of configured upstreams
// first, then subsets ("name@key=value"), then literal addresses. Pools for
// literal addresses and subsets are cached so that a target keeps one pool
// (and one balancer state) across snapshots. A Registry is safe for
// concurrent use.
type Registry struct {
	named map[string]*Pool
	lit   *literalCache
	sub   *subsetCache
}

type literalCache struct {
	mu    sync.Mutex
	pools map[string]*Pool
}

type subsetCache struct {
	mu    sync.Mutex
	pools map[string]subsetEntry
}

// subsetEntry remembers the base pool a subset was derived from: a subset
// is rebuilt when its base has been replaced.
type subsetEntry struct {
	base, pool *Pool
}

// NewRegistry builds a registry over the configured named pools.
func NewRegistry(named map[string]*Pool) *Registry {
	if named == nil {
		named = map[string]*Pool{}
	}
	return &Registry{
		named: named,
		lit:   &literalCache{pools: map[string]*Pool{}},
		sub:   &subsetCache{pools: map[string]subsetEntry{}},
	}
}

// WithNamed returns a registry with a new set of named pools that shares this
// registry's literal-address pools and subset cache.
func (r *Registry) WithNamed(named map[string]*Pool) *Registry {
	if named == nil {
		named = map[string]*Pool{}
	}
	return &Registry{named: named, lit: r.lit, sub: r.sub}
}

// Named returns the configured pool with that name.
func (r *Registry) Named(name string) (*Pool, bool) {
	p, ok := r.named[name]
	return p, ok
}

// Stats returns the stats of every named pool, sorted by name.
func (r *Registry) Stats() []PoolStats {
	out := make([]PoolStats, 0, len(r.named))
	for _, p := range r.named {
		out = append(out, p.Stats())
	}
	slices.SortFunc(out, func(a, b PoolStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Retire closes the named pools of r that successor does not hold, and
// forgets the subsets derived from them. After a reload swaps r for
// successor, r.Retire(successor) releases what only the old config used;
// after a failed reload, successor.Retire(r) releases what the rejected
// config built. Either way addresses in both keep their health state.
func (r *Registry) Retire(successor *Registry) {
	keep := map[*Pool]bool{}
	if successor != nil {
		for _, p := range successor.named {
			keep[p] = true
		}
	}
	gone := map[*Pool]bool{}
	for _, p := range r.named {
		if !keep[p] {
			gone[p] = true
			p.Close()
		}
	}
	r.sub.mu.Lock()
	defer r.sub.mu.Unlock()
	for k, e := range r.sub.pools {
		if gone[e.base] {
			delete(r.sub.pools, k)
		}
	}
}

// Close closes every named pool of r (Retire with no successor).
func (r *Registry) Close() { r.Retire(nil) }

// Resolve returns the pool a rule target names: a configured upstream, a
// subset of one ("user-center@version=2"), or a literal address. A subset
// holds the instances whose metadata has every key=value; it shares the
// base pool's health, never falls back to the rest of the pool, and is
// rebuilt once the base pool is replaced. A subset that matches no instance
// is not an error here (discovery may add one); its Pick fails with
// ErrNoInstance.
func (r *Registry) Resolve(target string) (*Pool, error) {
	if p, ok := r.named[target]; ok {
		return p, nil
	}
	if s, ok, err := ParseSubset(target); ok || err != nil {
		if err != nil {
			return nil, err
		}
		return r.subset(target, s)
	}
	r.lit.mu.Lock()
	defer r.lit.mu.Unlock()
	if p, ok := r.lit.pools[target]; ok {
		return p, nil
	}
	inst, err := ParseAddress(target)
	if err != nil {
		return nil, err
	}
	p := NewPool(target, []*Instance{inst})
	p.Literal = true
	r.lit.pools[target] = p
	return p, nil
}

func (r *Registry) subset(target string, s Subset) (*Pool, error) {
	base, ok := r.named[s.Pool]
	if !ok {
		return nil, fmt.Errorf("subset %q: no upstream named %q", target, s.Pool)
	}
	r.sub.mu.Lock()
	defer r.sub.mu.Unlock()
	if e, ok := r.sub.pools[target]; ok && e.base == base {
		return e.pool, nil
	}
	p := base.subset(target, s.selector(), s.labels)
	r.sub.pools[target] = subsetEntry{base: base, pool: p}
	return p, nil
}

// Subset is a parsed subset target, "pool@key=value[,key=value…]".
type Subset struct {
	// Pool names the base pool.
	Pool   string
	labels []label
}

type label struct{ key, value string }

// Match returns the selector as a map.
func (s Subset) Match() map[string]string {
	m := make(map[string]string, len(s.labels))
	for _, l := range s.labels {
		m[l.key] = l.value
	}
	return m
}

func (s Subset) selector() string {
	var b strings.Builder
	for i, l := range s.labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.key + "=" + l.value)
	}
	return b.String()
}

// ParseSubset parses "pool@key=value[,key=value…]". A target without "@"
// is not a subset: ok is false and err nil. Keys and values are non-empty
// and hold no spaces, "@", "=" or ",".
func ParseSubset(target string) (s Subset, ok bool, err error) {
	name, sel, found := strings.Cut(target, "@")
	if !found {
		return Subset{}, false, nil
	}
	bad := func(why string, args ...any) (Subset, bool, error) {
		return Subset{}, false, fmt.Errorf("invalid subset %q: %s (want pool@key=value)", target, fmt.Sprintf(why, args...))
	}
	if name == "" {
		return bad("empty pool name")
	}
	if sel == "" {
		return bad("empty selector")
	}
	s.Pool = name
	seen := map[string]bool{}
	for part := range strings.SplitSeq(sel, ",") {
		k, v, hasEq := strings.Cut(part, "=")
		switch {
		case !hasEq:
			return bad("%q has no \"=\"", part)
		case k == "":
			return bad("empty metadata key in %q", part)
		case v == "":
			return bad("empty value for key %q", k)
		case !plainLabel(k):
			return bad("metadata key %q has a space, \"@\" or \"=\"", k)
		case !plainLabel(v):
			return bad("value %q has a space, \"@\" or \"=\"", v)
		case seen[k]:
			return bad("key %q is repeated", k)
		}
		seen[k] = true
		s.labels = append(s.labels, label{k, v})
	}
	return s, true, nil
}

func plainLabel(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f || c == '@' || c == '=' {
			return false
		}
	}
	return true
}
