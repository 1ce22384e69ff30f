package upstream

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/internal/limit"
)

// PoolOptions configures how a pool balances and watches its instances.
// The zero value is a round-robin pool with private state and no health
// checks, which is what NewPool builds.
type PoolOptions struct {
	// Balancer is RoundRobin (default), Weighted or LeastRequest.
	Balancer Balancer
	// VersionHeader names the request header whose value the data plane
	// passes to PickVersion (seed 003); empty: version routing is off.
	VersionHeader string
	// Health is the shared per-address state. Without it the pool's state
	// is its own (lost on rebuild) and active health is not available.
	Health *Health
	// Passive turns passive health on; zero fields take the defaults.
	Passive *PassiveHealth
	// Active turns active health on (it needs Health); zero fields take
	// the defaults.
	Active *ActiveHealth
	// Random returns uniformly distributed bits for least_request (default
	// math/rand/v2). It must be safe for concurrent use.
	Random func() uint64
	// Protocol, TLS and TLSKey become the pool's fields of those names.
	// They are options, not set afterwards, because active probes speak
	// the pool's protocol: an h2 pool is probed over TLS with TLS's roots
	// and server name, an h2c pool with HTTP/2 in clear.
	Protocol Protocol
	TLS      *tls.Config
	TLSKey   string
}

// Pool is a named set of instances with a balancer. It is safe for
// concurrent use and must not be modified after it has been published in a
// snapshot. Every successful Pick or PickVersion must be followed by exactly
// one Report for the instance it returned.
type Pool struct {
	Name string
	// Literal is set on a pool that a rule target or default_upstream
	// named by a bare address: its Name is its one instance's address,
	// which answers to clients must not show.
	Literal   bool
	Instances []*Instance
	// Gate caps concurrent requests to the pool (nil: no cap); the data
	// plane answers 503 when it is full.
	Gate *limit.Gate
	// VersionHeader is the request header the data plane reads and passes
	// to PickVersion; empty means call Pick.
	VersionHeader string
	// Protocol is how the data plane speaks to the instances (default
	// HTTP1). gRPC needs H2 or H2C.
	Protocol Protocol
	// TLS configures the connections of an H2 pool (nil: the system's
	// roots, the server name from the instance address). It must not be
	// modified after the pool is published.
	TLS *tls.Config
	// TLSKey identifies TLS's settings (its CA file's contents and server
	// name), so that pools with the same settings share one transport.
	TLSKey string

	balancer  Balancer
	hosts     []*hostState // parallel to Instances
	weights   []int64      // parallel to Instances, at least 1
	index     map[*Instance]int32
	all       *group
	byVersion map[string]*group
	health    *Health
	passive   *passive
	active    *activeCfg
	now       func() time.Time
	log       *slog.Logger
	random    func() uint64
	selector  string // a subset's "key=value"; subsets hold no references
	closed    atomic.Bool
}

// NewPool returns a round-robin pool with private state and no health
// checks.
func NewPool(name string, instances []*Instance) *Pool {
	p, err := NewPoolWith(name, instances, PoolOptions{})
	if err != nil {
		// The zero PoolOptions are valid; only a nil instance fails.
		panic(err)
	}
	return p
}

// NewPoolWith returns a pool configured by opts. With opts.Health it takes a
// reference on every address, so Close must be called once the pool is
// replaced (see Registry.Retire); with active health that reference keeps
// the address's probe loop running.
func NewPoolWith(name string, instances []*Instance, opts PoolOptions) (*Pool, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("pool %q: %w", name, err)
	}
	for i, in := range instances {
		if in == nil {
			return nil, fmt.Errorf("pool %q: instances[%d] is nil", name, i)
		}
	}
	p := newPool(name, instances, opts)
	p.hosts = make([]*hostState, len(instances))
	if opts.Health != nil {
		for i, in := range instances {
			p.hosts[i] = opts.Health.attach(in, p.active)
		}
	} else {
		private := map[string]*hostState{}
		for i, in := range instances {
			s := private[in.Addr]
			if s == nil {
				s = &hostState{addr: in.Addr}
				private[in.Addr] = s
			}
			p.hosts[i] = s
		}
	}
	return p, nil
}

// newPool builds everything but the host states.
func newPool(name string, instances []*Instance, opts PoolOptions) *Pool {
	p := &Pool{
		Name:          name,
		Instances:     instances,
		VersionHeader: opts.VersionHeader,
		Protocol:      opts.Protocol,
		TLS:           opts.TLS,
		TLSKey:        opts.TLSKey,
		balancer:      opts.Balancer,
		health:        opts.Health,
		now:           time.Now,
		log:           slog.New(slog.DiscardHandler),
		random:        opts.Random,
		weights:       make([]int64, len(instances)),
		index:         make(map[*Instance]int32, len(instances)),
	}
	if p.balancer == "" {
		p.balancer = RoundRobin
	}
	if opts.Health != nil {
		p.now, p.log = opts.Health.now, opts.Health.log
	}
	if p.random == nil {
		p.random = rand.Uint64
	}
	if opts.Passive != nil {
		c := opts.Passive.withDefaults()
		p.passive = &passive{threshold: int64(c.ConsecutiveFailures), base: c.BaseEjection.Std(), max: c.MaxEjection.Std()}
	}
	if opts.Active != nil {
		c := opts.Active.withDefaults()
		p.active = &activeCfg{path: c.Path, interval: c.Interval.Std(), timeout: c.Timeout.Std(),
			healthy: int64(c.HealthyThreshold), unhealthy: int64(c.UnhealthyThreshold),
			proto: opts.Protocol, tls: opts.TLS, tlsKey: opts.TLSKey}
	}
	all := make([]int32, len(instances))
	versions := map[string][]int32{}
	for i, in := range instances {
		all[i] = int32(i)
		p.weights[i] = int64(max(in.Weight, 1))
		if _, dup := p.index[in]; !dup {
			p.index[in] = int32(i)
		}
		if v := in.Metadata["version"]; v != "" {
			versions[v] = append(versions[v], int32(i))
		}
	}
	p.all = newGroup(all)
	if len(versions) > 0 {
		p.byVersion = make(map[string]*group, len(versions))
		for v, idx := range versions {
			p.byVersion[v] = newGroup(idx)
		}
	}
	return p
}

func (o *PoolOptions) validate() error {
	c := Config{Balancer: o.Balancer, VersionHeader: VersionHeader(o.VersionHeader), PassiveHealth: o.Passive, ActiveHealth: o.Active}
	if err := c.Validate(""); err != nil {
		return err
	}
	if o.Active != nil && o.Health == nil {
		return fmt.Errorf("active health needs a shared Health registry")
	}
	return nil
}

// Pick chooses a healthy instance with the pool's balancer. When none is
// healthy the error is a *NoInstanceError wrapping ErrNoInstance. It does
// not allocate.
func (p *Pool) Pick() (*Instance, error) {
	if i, ok := p.choose(p.all); ok {
		return p.take(i), nil
	}
	return nil, p.noInstance()
}

// PickVersion is Pick with seed 003's version predicate: a non-empty
// version chooses among the healthy instances whose metadata "version"
// equals it; an empty version, or one no healthy instance has, falls back
// to all healthy instances. Instances without a version never match but do
// take part in the fallback. version is not retained, so it may alias a
// request buffer.
func (p *Pool) PickVersion(version string) (*Instance, error) {
	if version != "" {
		if g := p.byVersion[version]; g != nil {
			if i, ok := p.choose(g); ok {
				return p.take(i), nil
			}
		}
	}
	return p.Pick()
}

// PickOther is Pick for a request whose connection to the instances in
// not failed before anything was sent: it chooses among the pool's other
// instances, so that the request is not sent back to one that refused it.
func (p *Pool) PickOther(not []*Instance) (*Instance, error) {
	if i, ok := p.choose(p.without(p.all, not)); ok {
		return p.take(i), nil
	}
	return nil, p.noInstance()
}

// PickOtherVersion is PickOther for a request that PickVersion placed:
// seed 003's predicate again, without the instances that refused it. A
// non-empty version chooses among the other healthy instances of that
// version; when none is left, or the version is empty or no instance's,
// it falls back to the pool's other instances, as PickVersion falls back
// to all.
func (p *Pool) PickOtherVersion(version string, not []*Instance) (*Instance, error) {
	if version != "" {
		if g := p.byVersion[version]; g != nil {
			if i, ok := p.choose(p.without(g, not)); ok {
				return p.take(i), nil
			}
		}
	}
	return p.PickOther(not)
}

// without returns a group of g's instances but those in not, which
// continues g's rotation (retries spread as first tries are).
func (p *Pool) without(g *group, not []*Instance) *group {
	idx := make([]int32, 0, len(g.idx))
	for _, i := range g.idx {
		if !slices.Contains(not, p.Instances[i]) {
			idx = append(idx, i)
		}
	}
	o := newGroup(idx)
	o.rr.Store(g.rr.Load())
	return o
}

func (p *Pool) take(i int32) *Instance {
	p.hosts[i].inflight.Add(1)
	return p.Instances[i]
}

// Report ends a request to inst that Pick or PickVersion started: it
// decrements the in-flight count and, with passive health, counts ok=false
// (a connection error, a timeout or a 5xx answer) towards ejection and
// ok=true as the end of a failure run. Reporting an instance of an older
// pool with the same address is fine: the state is per address.
func (p *Pool) Report(inst *Instance, ok bool) {
	s := p.stateOf(inst)
	if s == nil {
		return
	}
	s.inflight.Add(-1)
	if p.passive == nil {
		return
	}
	if ok {
		s.success(p.now)
	} else {
		s.failure(p.passive, p.now, p.log, p.Name)
	}
}

// Release ends a request to inst that Pick started without reporting an
// outcome: it decrements the in-flight count and leaves passive health
// alone. Shadow traffic (package mirror) uses it, because a mirror's
// failures must never eject an instance that serves real users, and its
// successes must never end their failure run.
func (p *Pool) Release(inst *Instance) {
	if s := p.stateOf(inst); s != nil {
		s.inflight.Add(-1)
	}
}

func (p *Pool) stateOf(inst *Instance) *hostState {
	if inst == nil {
		return nil
	}
	if i, ok := p.index[inst]; ok {
		return p.hosts[i]
	}
	for _, s := range p.hosts {
		if s.addr == inst.Addr {
			return s
		}
	}
	return nil
}

// Close gives back the pool's references on its addresses; call it once the
// pool has been replaced. Probe loops that no other pool needs are stopped
// before Close returns. The pool keeps answering Pick and Report afterwards,
// for requests still holding it. Close is idempotent.
func (p *Pool) Close() {
	if p.health == nil || p.selector != "" || !p.closed.CompareAndSwap(false, true) {
		return
	}
	p.health.detach(p.hosts, p.active != nil)
}

func (p *Pool) up(i int32, at *instant) bool { return p.hosts[i].status(at, p.log) == hostUp }

func (p *Pool) noInstance() error {
	e := &NoInstanceError{Pool: p.Name, Size: len(p.Instances), Selector: p.selector}
	at := instant{now: p.now}
	for _, s := range p.hosts {
		switch s.status(&at, p.log) {
		case hostEjected:
			e.Ejected++
		case hostFailing:
			e.Failing++
		}
	}
	return e
}

// PoolStats is the read-only state of a pool, for metrics.
type PoolStats struct {
	Name     string   `json:"name"`
	Balancer Balancer `json:"balancer"`
	// Size is how many instances the pool has; Healthy how many may take
	// traffic; Ejected (passive) and Failing (active) how many may not.
	Size     int   `json:"size"`
	Healthy  int   `json:"healthy"`
	Ejected  int   `json:"ejected"`
	Failing  int   `json:"failing"`
	InFlight int64 `json:"in_flight"`
}

// Stats returns the pool's current state.
func (p *Pool) Stats() PoolStats {
	st := PoolStats{Name: p.Name, Balancer: p.balancer, Size: len(p.Instances)}
	at := instant{now: p.now}
	for _, s := range p.hosts {
		switch s.status(&at, p.log) {
		case hostUp:
			st.Healthy++
		case hostEjected:
			st.Ejected++
		case hostFailing:
			st.Failing++
		}
		st.InFlight += s.inflight.Load()
	}
	return st
}

// subset derives the pool of the instances whose metadata has every
// key=value of match. It shares the host states (and so the health) of p
// and holds no references of its own.
func (p *Pool) subset(name, selector string, match []label) *Pool {
	var insts []*Instance
	var hosts []*hostState
	for i, in := range p.Instances {
		if matches(in, match) {
			insts = append(insts, in)
			hosts = append(hosts, p.hosts[i])
		}
	}
	q := newPool(name, insts, PoolOptions{Balancer: p.balancer, VersionHeader: p.VersionHeader, Health: p.health, Random: p.random})
	q.now, q.log = p.now, p.log
	q.passive, q.active = p.passive, p.active
	q.hosts = hosts
	q.selector = selector
	q.Gate = p.Gate
	q.Protocol, q.TLS, q.TLSKey = p.Protocol, p.TLS, p.TLSKey
	return q
}

func matches(in *Instance, match []label) bool {
	for _, l := range match {
		if v, ok := in.Metadata[l.key]; !ok || v != l.value {
			return false
		}
	}
	return true
}
