package upstream

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HealthOptions configures a Health registry.
type HealthOptions struct {
	// Now is the clock of passive ejections (default time.Now). Active
	// probes are paced by real timers.
	Now func() time.Time
	// Logger receives ejections and probe transitions (default: discard).
	Logger *slog.Logger
	// Transport sends active probes. The default is a Transport of its own
	// (never http.DefaultTransport) using TLSConfig for https instances.
	Transport http.RoundTripper
	// TLSConfig is the default Transport's TLS configuration; give the data
	// plane's upstream TLS configuration so probes trust what requests trust.
	TLSConfig *tls.Config
}

// Health is the per-address state shared by every pool bound to it: the
// in-flight count, passive-health failures and ejections, and active probe
// loops. It outlives pools, so a config reload or a discovery update does
// not forget that an instance is down. It is safe for concurrent use; Close
// stops its probe loops.
type Health struct {
	now    func() time.Time
	log    *slog.Logger
	client *http.Client
	own    *http.Transport // the default transport, closed by Close

	mu     sync.Mutex
	hosts  map[string]*hostState
	h2     map[string]*http.Client // probe clients of h2 and h2c pools, by protocol and TLS key
	closed bool

	loops atomic.Int64
}

// NewHealth returns an empty health registry.
func NewHealth(opts HealthOptions) *Health {
	h := &Health{now: opts.Now, log: opts.Logger, hosts: map[string]*hostState{}}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.log = h.log.With("component", "upstream")
	rt := opts.Transport
	if rt == nil {
		h.own = newProbeTransport(opts.TLSConfig)
		rt = h.own
	}
	h.client = &http.Client{
		Transport: rt,
		// A 3xx answer is a healthy answer; it is judged, not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return h
}

// Host states.
const (
	hostUp = iota
	hostEjected
	hostFailing
)

// hostState is everything known about one address. The atomics are read on
// every Pick; mu only serialises the rare ejection.
type hostState struct {
	addr string

	inflight     atomic.Int64
	fails        atomic.Int64 // consecutive failures reported
	ejectedUntil atomic.Int64 // Unix nanoseconds; 0: not ejected
	level        atomic.Int32 // ejections since the last success: the backoff exponent
	ejections    atomic.Uint64
	probe        atomic.Pointer[prober] // nil: not actively checked
	mu           sync.Mutex

	// Guarded by Health.mu.
	refs, activeRefs int
}

// instant reads a clock at most once per pick, and only when a host has
// been ejected, so a healthy pool never reads it.
type instant struct {
	now func() time.Time
	ns  int64
}

func (c *instant) unixNano() int64 {
	if c.ns == 0 {
		c.ns = c.now().UnixNano()
	}
	return c.ns
}

// status reports whether the host may take traffic.
func (s *hostState) status(at *instant, log *slog.Logger) int {
	if pr := s.probe.Load(); pr != nil && pr.down.Load() {
		return hostFailing
	}
	if u := s.ejectedUntil.Load(); u != 0 {
		if at.unixNano() < u {
			return hostEjected
		}
		if s.ejectedUntil.CompareAndSwap(u, 0) {
			log.Info("instance back from ejection", "addr", s.addr)
		}
	}
	return hostUp
}

// passive is a pool's resolved passive-health policy.
type passive struct {
	threshold int64
	base, max time.Duration
}

// failure counts a failed request and ejects the host at the threshold.
// Failures reported while the host is ejected come from requests picked
// before the ejection: they neither count nor extend it.
func (s *hostState) failure(pc *passive, now func() time.Time, log *slog.Logger, pool string) {
	if u := s.ejectedUntil.Load(); u != 0 && now().UnixNano() < u {
		return
	}
	if s.fails.Add(1) < pc.threshold {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails.Load() < pc.threshold {
		return // another goroutine ejected it and reset the count
	}
	t := now()
	if u := s.ejectedUntil.Load(); u != 0 && t.UnixNano() < u {
		return
	}
	lvl := s.level.Load()
	d := pc.base
	for i := int32(0); i < lvl && d < pc.max; i++ {
		d *= 2
	}
	if d >= pc.max {
		d = pc.max
	} else {
		s.level.Store(lvl + 1)
	}
	s.ejectedUntil.Store(t.Add(d).UnixNano())
	s.fails.Store(0)
	s.ejections.Add(1)
	log.Warn("instance ejected", "pool", pool, "addr", s.addr, "for", d.String(), "consecutive_failures", pc.threshold)
}

// success ends a run of failures, and the backoff once the host is back.
// It writes only when there is something to reset, so the common case is
// two loads.
func (s *hostState) success(now func() time.Time) {
	if s.fails.Load() != 0 {
		s.fails.Store(0)
	}
	if s.level.Load() != 0 {
		if u := s.ejectedUntil.Load(); u == 0 || now().UnixNano() >= u {
			s.level.Store(0)
		}
	}
}

// attach returns the shared state of inst's address and takes a reference
// on it; with active set it also takes an active reference, starting the
// probe loop for the first one and updating its settings for later ones
// (the most recently built pool's settings win).
func (h *Health) attach(inst *Instance, active *activeCfg) *hostState {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.hosts[inst.Addr]
	if s == nil {
		s = &hostState{addr: inst.Addr}
		h.hosts[inst.Addr] = s
	}
	s.refs++
	if active != nil {
		s.activeRefs++
		cfg := active.forHost(inst)
		if pr := s.probe.Load(); pr != nil {
			if !pr.cfg.Load().same(cfg) {
				pr.cfg.Store(cfg)
				select { // probe now and re-arm with the new interval
				case pr.kick <- struct{}{}:
				default:
				}
			}
		} else if !h.closed {
			h.startProbe(s, cfg)
		}
	}
	return s
}

// detach gives back the references attach took for states. Probe loops
// whose last active reference goes are stopped, and detach returns after
// they have exited; addresses without references are forgotten.
func (h *Health) detach(states []*hostState, active bool) {
	var stop []*prober
	h.mu.Lock()
	for _, s := range states {
		s.refs--
		if active {
			s.activeRefs--
			if s.activeRefs == 0 {
				if pr := s.probe.Swap(nil); pr != nil {
					stop = append(stop, pr)
				}
			}
		}
		if s.refs == 0 && h.hosts[s.addr] == s {
			delete(h.hosts, s.addr)
		}
	}
	h.mu.Unlock()
	stopAll(stop)
}

// Close stops every probe loop and waits for them to exit. Pools keep
// working (passively) after Close, and pools built later start no probes.
// Close is idempotent.
func (h *Health) Close() error {
	var stop []*prober
	h.mu.Lock()
	h.closed = true
	for _, s := range h.hosts {
		if pr := s.probe.Swap(nil); pr != nil {
			stop = append(stop, pr)
		}
	}
	clients := h.h2
	h.mu.Unlock()
	stopAll(stop)
	if h.own != nil {
		h.own.CloseIdleConnections()
	}
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	return nil
}

// ProbeLoops returns how many active probe loops are running.
func (h *Health) ProbeLoops() int { return int(h.loops.Load()) }

// HostStats is the read-only state of one address, for metrics and the
// admin API.
type HostStats struct {
	Addr string `json:"addr"`
	// Pools is how many live pools hold the address.
	Pools    int   `json:"pools"`
	InFlight int64 `json:"in_flight"`
	// ConsecutiveFailures is the current run of failed requests.
	ConsecutiveFailures int64 `json:"consecutive_failures"`
	// Ejected is true while passive health keeps the instance out, until
	// EjectedUntil.
	Ejected      bool      `json:"ejected"`
	EjectedUntil time.Time `json:"ejected_until,omitzero"`
	// Ejections counts every ejection since the address first appeared.
	Ejections uint64 `json:"ejections"`
	// Probed is true while an active probe loop checks the address;
	// ProbeHealthy is its verdict.
	Probed       bool `json:"probed"`
	ProbeHealthy bool `json:"probe_healthy"`
}

// Snapshot returns the state of every address held by a pool, sorted by
// address.
func (h *Health) Snapshot() []HostStats {
	h.mu.Lock()
	states := make([]*hostState, 0, len(h.hosts))
	refs := make(map[*hostState]int, len(h.hosts))
	for _, s := range h.hosts {
		states = append(states, s)
		refs[s] = s.refs
	}
	h.mu.Unlock()
	now := h.now().UnixNano()
	out := make([]HostStats, 0, len(states))
	for _, s := range states {
		st := HostStats{
			Addr:                s.addr,
			Pools:               refs[s],
			InFlight:            s.inflight.Load(),
			ConsecutiveFailures: s.fails.Load(),
			Ejections:           s.ejections.Load(),
		}
		if u := s.ejectedUntil.Load(); u != 0 && now < u {
			st.Ejected, st.EjectedUntil = true, time.Unix(0, u)
		}
		if pr := s.probe.Load(); pr != nil {
			st.Probed, st.ProbeHealthy = true, !pr.down.Load()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b HostStats) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}
