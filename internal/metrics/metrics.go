// Package metrics exposes graygate's Prometheus metrics on a private
// registry (never prometheus.DefaultRegisterer). The per-request path looks
// up pre-resolved label children in a cache keyed by a small struct, so a
// request builds no label slice or map once its combination has been seen.
package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/router"
)

// Metrics holds every collector. It is safe for concurrent use.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	revision prometheus.Gauge
	reloads  *prometheus.CounterVec
	rollback *prometheus.GaugeVec
	degraded *prometheus.CounterVec
	brkTrans *prometheus.CounterVec
	idReject *prometheus.CounterVec
	refused  *prometheus.CounterVec
	late     *prometheus.CounterVec

	children sync.Map // key → *child
	// recent is a small direct-mapped cache in front of children, indexed
	// by where a key's strings live (see slot).
	recent [recentSlots]atomic.Pointer[cached]

	// rules are the rules served (SetRules), under rulesMu; gone holds the
	// rules whose series wait out retireGrace before they are deleted.
	rulesMu    sync.Mutex
	rules      map[string]bool
	gone       map[string]*time.Timer
	retired    sync.Map // rule key → struct{}: its series were deleted
	retireWait time.Duration
}

// RetireGrace is how long the series of a rule that no longer serves are
// kept before SetRules deletes them: requests the rule sent upstream
// before it went are still counted. One that ends after the deletion (a
// long download, a stream) does not bring the series back: it is counted
// in graygate_retired_rule_requests_total, by status class.
const RetireGrace = 2 * time.Minute

// degradedReasons are the reasons of graygate_degraded_requests_total
// (router.Decision.Degraded).
var degradedReasons = [...]string{router.DegradedRollback, router.DegradedBreaker, router.DegradedFallback}

type key struct {
	rule, group, upstream, degraded string
	class                           uint8
}

// cached is one entry of Metrics.recent.
type cached struct {
	k key
	c *child
}

const recentSlots = 64

// slot is k's place in Metrics.recent. It hashes the addresses of k's
// strings, not their bytes: a compiled snapshot names a rule, its groups
// and its pools with the same strings for every request, so the hash is a
// few multiplications, and comparing the key that is found is mostly
// comparing equal pointers. Equal strings at other addresses (another
// snapshot's) may take other slots; each slot still holds only its own
// key's child.
func slot(k *key) int {
	h := uint64(uintptr(unsafe.Pointer(unsafe.StringData(k.rule))))
	h = h*0x9E3779B97F4A7C15 ^ uint64(uintptr(unsafe.Pointer(unsafe.StringData(k.group))))
	h = h*0x9E3779B97F4A7C15 ^ uint64(uintptr(unsafe.Pointer(unsafe.StringData(k.upstream))))
	h = h*0x9E3779B97F4A7C15 ^ uint64(uintptr(unsafe.Pointer(unsafe.StringData(k.degraded)))) ^ uint64(k.class)
	return int((h * 0x9E3779B97F4A7C15) >> 58)
}

type child struct {
	requests prometheus.Counter
	latency  prometheus.Observer
	degraded prometheus.Counter
}

var classes = [...]string{"0xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// class5xx is the index of "5xx" in classes.
const class5xx = 5

// New registers every collector on a fresh registry.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "graygate_requests_total", Help: "Proxied requests by rule, group, upstream pool and status class.",
	}, []string{"rule", "group", "upstream", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "graygate_request_duration_seconds", Help: "Time from request to response headers plus body, by rule and group.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"rule", "group"})
	m.revision = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "graygate_ruleset_revision", Help: "Global revision of the rule set being served.",
	})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "graygate_reloads_total", Help: "Snapshot rebuilds by result (ok, partial, error).",
	}, []string{"result"})
	m.rollback = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "graygate_rollback_active", Help: "1 while one-click rollback is on; rule=\"_global\" is the global switch.",
	}, []string{"rule"})
	m.degraded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "graygate_degraded_requests_total", Help: "Requests served somewhere other than their rule's choice, by reason (rollback, breaker, fallback).",
	}, []string{"rule", "reason"})
	m.brkTrans = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "graygate_breaker_transitions_total", Help: "Circuit breaker transitions per gray target.",
	}, []string{"rule", "target", "from", "to"})
	m.idReject = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "graygate_identity_rejected_total", Help: "Requests answered 400 because their identity was refused, by reason (too_long: over identity.max_length).",
	}, []string{"reason"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "graygate_refused_requests_total", Help: "Requests the route's policy refused, by route and reason (rate_limit: 429, concurrency_cap: 503, body_too_large: 413).",
	}, []string{"route", "reason"})
	m.late = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "graygate_retired_rule_requests_total", Help: "Requests that ended after their rule's series were deleted (RetireGrace after the rule stopped serving), by status class.",
	}, []string{"code"})
	m.reg.MustRegister(m.requests, m.latency, m.revision, m.reloads, m.rollback, m.degraded, m.brkTrans, m.idReject, m.refused, m.late,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The series of a fixed label set start at 0, so that rate() and
	// increase() see their first event (the first failed reload, the first
	// identity refused): a series that appears at 1 shows no increase.
	for _, r := range []string{"ok", "partial", "error"} {
		m.reloads.WithLabelValues(r)
	}
	m.idReject.WithLabelValues(identity.ReasonTooLong)
	for _, c := range classes {
		m.late.WithLabelValues(c)
	}
	m.retireWait = RetireGrace
	return m
}

// SetRetireGrace sets how long SetRules keeps a gone rule's series
// (RetireGrace by default), for rules that go from then on.
func (m *Metrics) SetRetireGrace(d time.Duration) {
	m.rulesMu.Lock()
	m.retireWait = d
	m.rulesMu.Unlock()
}

// SetRules tells the metrics which rules serve, at every snapshot. A new
// rule's graygate_degraded_requests_total series start at 0, one per
// reason, so that the first rollback, breaker trip or fallback shows as an
// increase; a rule no longer served has its series (requests, latency,
// degraded requests, breaker transitions) deleted after RetireGrace,
// unless it serves again by then. Before, they stayed until the process
// restarted, a flat line for every rule ever deleted.
func (m *Metrics) SetRules(keys []string) {
	m.rulesMu.Lock()
	defer m.rulesMu.Unlock()
	next := make(map[string]bool, len(keys))
	for _, k := range keys {
		next[k] = true
		if t := m.gone[k]; t != nil {
			t.Stop()
			delete(m.gone, k)
		}
		m.retired.Delete(k)
		if !m.rules[k] {
			for _, r := range degradedReasons {
				m.degraded.WithLabelValues(k, r)
			}
		}
	}
	for k := range m.rules {
		if next[k] || m.gone[k] != nil {
			continue
		}
		if m.gone == nil {
			m.gone = map[string]*time.Timer{}
		}
		m.gone[k] = time.AfterFunc(m.retireWait, func() { m.retire(k) })
	}
	// A rule still waiting out its grace stays known, so that the next
	// SetRules that lists it again keeps its series.
	for k := range m.gone {
		next[k] = true
	}
	m.rules = next
}

// retire deletes the series of rule k, if it has not come back.
func (m *Metrics) retire(k string) {
	m.rulesMu.Lock()
	defer m.rulesMu.Unlock()
	if _, waiting := m.gone[k]; !waiting {
		return // it serves again (SetRules stopped the timer too late)
	}
	delete(m.gone, k)
	delete(m.rules, k)
	m.retired.Store(k, struct{}{})
	m.children.Range(func(ck, _ any) bool {
		if ck.(key).rule == k {
			m.children.Delete(ck)
		}
		return true
	})
	for i := range m.recent {
		if e := m.recent[i].Load(); e != nil && e.k.rule == k {
			m.recent[i].CompareAndSwap(e, nil)
		}
	}
	only := prometheus.Labels{"rule": k}
	m.requests.DeletePartialMatch(only)
	m.latency.DeletePartialMatch(only)
	m.degraded.DeletePartialMatch(only)
	m.brkTrans.DeletePartialMatch(only)
}

// Registry returns the private registry, for other packages' collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Observe counts one finished request.
func (m *Metrics) Observe(d *router.Decision, status int, elapsed time.Duration) {
	if r := d.Identity.Refused; r != nil {
		m.idReject.WithLabelValues(r.Reason).Inc()
	}
	k := key{rule: d.Rule, group: d.Group, degraded: d.Degraded}
	if d.Target != nil {
		k.upstream = d.Target.Name
	}
	if c := status / 100; c >= 0 && c < len(classes) {
		k.class = uint8(c)
	}
	var c *child
	s := &m.recent[slot(&k)]
	if e := s.Load(); e != nil && e.k == k {
		c = e.c
	} else if v, ok := m.children.Load(k); ok {
		c = v.(*child)
		s.Store(&cached{k: k, c: c})
	} else {
		if _, gone := m.retired.Load(k.rule); gone {
			// A request of a rule whose series went RetireGrace ago.
			m.late.WithLabelValues(classes[k.class]).Inc()
			return
		}
		if k.class != class5xx {
			// The pool's 5xx series starts at 0 with its first answer of
			// any other class, so that rate() and increase() (and the
			// shipped GraygateGrayErrorRateHigh alert) see the first
			// burst of errors: a series that appears at its first value
			// shows no increase. One series per rule, group and pool that
			// has traffic, not one per class up front.
			m.requests.WithLabelValues(k.rule, k.group, k.upstream, classes[class5xx])
		}
		c = &child{
			requests: m.requests.WithLabelValues(k.rule, k.group, k.upstream, classes[k.class]),
			latency:  m.latency.WithLabelValues(k.rule, k.group),
		}
		if k.degraded != "" {
			c.degraded = m.degraded.WithLabelValues(k.rule, k.degraded)
		}
		v, _ := m.children.LoadOrStore(k, c)
		c = v.(*child)
	}
	c.requests.Inc()
	c.latency.Observe(elapsed.Seconds())
	if c.degraded != nil {
		c.degraded.Inc()
	}
}

// Reloaded records a snapshot rebuild.
func (m *Metrics) Reloaded(result string, revision int64) {
	m.reloads.WithLabelValues(result).Inc()
	if result != "error" {
		m.revision.Set(float64(revision))
	}
}

// SetRollback publishes the rollback state: the global flag and the set of
// rules rolled back individually. Rules no longer listed are reset to 0.
func (m *Metrics) SetRollback(global bool, rules map[string]bool) {
	m.rollback.Reset()
	m.rollback.WithLabelValues("_global").Set(b2f(global))
	for r, on := range rules {
		m.rollback.WithLabelValues(r).Set(b2f(on))
	}
}

// TagStats are the tag store's counters.
type TagStats struct{ Hits, Misses, Unknown, Errors, Rejected uint64 }

// TagStore exports the tag store's counters, read at scrape time.
func (m *Metrics) TagStore(read func() TagStats) {
	for _, c := range []struct {
		name, help string
		get        func(TagStats) uint64
	}{
		{"graygate_tags_cache_hits_total", "Tag lookups answered from the local cache.", func(s TagStats) uint64 { return s.Hits }},
		{"graygate_tags_cache_misses_total", "Tag lookups that went to Redis.", func(s TagStats) uint64 { return s.Misses }},
		{"graygate_tags_unknown_total", "Requests whose tags were unknown because Redis was slow, down or its breaker open; they were served without tag matches.", func(s TagStats) uint64 { return s.Unknown }},
		{"graygate_tags_redis_errors_total", "Redis lookups that failed or timed out.", func(s TagStats) uint64 { return s.Errors }},
		{"graygate_tags_redis_rejected_total", "Lookups skipped because the Redis breaker was open.", func(s TagStats) uint64 { return s.Rejected }},
	} {
		get := c.get
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, func() float64 { return float64(get(read())) }))
	}
}

// StoreFuncs read a shared store's sync state at scrape time. Stale is
// the status's "stale": serving a state etcd has not confirmed.
type StoreFuncs struct {
	Synced, Stale  func() bool
	WatchRestarts  func() float64
	PropagationLag func() float64 // seconds
	// HistoryResets counts the times etcd's history was found replaced
	// (a restore from backup); nil exports nothing.
	HistoryResets func() float64
}

// Store exports a shared store's sync state, watch restarts and
// propagation lag (from an etcd revision's commit to its local application).
func (m *Metrics) Store(f StoreFuncs) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "graygate_store_synced", Help: "1 while the rule store is in sync with etcd."}, func() float64 { return b2f(f.Synced()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "graygate_store_stale", Help: "1 while the rules served are not confirmed by etcd: it is unreachable or the watch is behind (serving the last state read, or the cache from an earlier run)."}, func() float64 { return b2f(f.Stale()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "graygate_store_watch_restarts_total", Help: "Times the etcd watch was re-established (compaction, lost connection)."}, f.WatchRestarts),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "graygate_store_propagation_lag_seconds", Help: "Time from the last rule change's commit in etcd to its application here."}, f.PropagationLag),
	)
	if f.HistoryResets != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "graygate_store_history_resets_total", Help: "Times etcd's history was found replaced (etcd restored from a backup) and the gateway went over to what it holds."}, f.HistoryResets))
	}
}

// RateLimits exports, per route with a per-identity rate limit, the
// identities its limiter tracks, their bytes, and how many it evicted,
// read at scrape time.
func (m *Metrics) RateLimits(read func() []RateLimitStats) {
	m.reg.MustRegister(&rateLimitCollector{read: read})
}

// RateLimitStats is one route's per-identity limiter.
type RateLimitStats struct {
	Route      string
	Identities int
	Bytes      int64
	Evicted    uint64
}

type rateLimitCollector struct{ read func() []RateLimitStats }

var (
	rlIdentities = prometheus.NewDesc("graygate_ratelimit_identities", "Identities the route's per-identity rate limiter tracks.", []string{"route"}, nil)
	rlBytes      = prometheus.NewDesc("graygate_ratelimit_identity_bytes", "What the tracked identities cost against limits.max_identity_bytes.", []string{"route"}, nil)
	rlEvicted    = prometheus.NewDesc("graygate_ratelimit_evictions_total", "Identities the route's rate limiter dropped to stay within max_identities and max_identity_bytes; each gets a fresh bucket when it comes back.", []string{"route"}, nil)
)

func (c *rateLimitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rlIdentities
	ch <- rlBytes
	ch <- rlEvicted
}

func (c *rateLimitCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.read() {
		ch <- prometheus.MustNewConstMetric(rlIdentities, prometheus.GaugeValue, float64(r.Identities), r.Route)
		ch <- prometheus.MustNewConstMetric(rlBytes, prometheus.GaugeValue, float64(r.Bytes), r.Route)
		ch <- prometheus.MustNewConstMetric(rlEvicted, prometheus.CounterValue, float64(r.Evicted), r.Route)
	}
}

// Pools exports per-pool size, healthy instances and in-flight requests,
// and per-instance ejections, read at scrape time.
func (m *Metrics) Pools(read func() []PoolStats, ejections func() map[string]uint64) {
	m.reg.MustRegister(&poolCollector{read: read, ejections: ejections})
}

// PoolStats is one pool's health.
type PoolStats struct {
	Name                            string
	Size, Healthy, Ejected, Failing int
	InFlight                        int64
}

type poolCollector struct {
	read      func() []PoolStats
	ejections func() map[string]uint64
}

var (
	poolSize    = prometheus.NewDesc("graygate_pool_instances", "Instances in the pool.", []string{"pool"}, nil)
	poolHealthy = prometheus.NewDesc("graygate_pool_healthy_instances", "Instances of the pool that take traffic.", []string{"pool"}, nil)
	poolEjected = prometheus.NewDesc("graygate_pool_ejected_instances", "Instances of the pool ejected by passive health.", []string{"pool"}, nil)
	poolFailing = prometheus.NewDesc("graygate_pool_failing_instances", "Instances of the pool failing their active health checks.", []string{"pool"}, nil)
	poolFlight  = prometheus.NewDesc("graygate_pool_in_flight", "Requests in flight to the pool.", []string{"pool"}, nil)
	ejections   = prometheus.NewDesc("graygate_instance_ejections_total", "Times passive health ejected the instance.", []string{"addr"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolSize
	ch <- poolHealthy
	ch <- poolEjected
	ch <- poolFailing
	ch <- poolFlight
	ch <- ejections
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.read() {
		ch <- prometheus.MustNewConstMetric(poolSize, prometheus.GaugeValue, float64(p.Size), p.Name)
		ch <- prometheus.MustNewConstMetric(poolHealthy, prometheus.GaugeValue, float64(p.Healthy), p.Name)
		ch <- prometheus.MustNewConstMetric(poolEjected, prometheus.GaugeValue, float64(p.Ejected), p.Name)
		ch <- prometheus.MustNewConstMetric(poolFailing, prometheus.GaugeValue, float64(p.Failing), p.Name)
		ch <- prometheus.MustNewConstMetric(poolFlight, prometheus.GaugeValue, float64(p.InFlight), p.Name)
	}
	for addr, n := range c.ejections() {
		ch <- prometheus.MustNewConstMetric(ejections, prometheus.CounterValue, float64(n), addr)
	}
}

// Breaker states of BreakerStat.
const (
	BreakerClosed   = 0
	BreakerHalfOpen = 1
	BreakerOpen     = 2
)

// BreakerStat is one gray target's breaker: its rule, its target and its
// state (BreakerClosed, BreakerHalfOpen or BreakerOpen).
type BreakerStat struct {
	Rule, Target string
	State        int
}

// Breakers exports graygate_breaker_state{rule,target}, read at scrape
// time from read, which lists every breaker the gateway has. Reading the
// state when Prometheus asks, rather than setting a gauge at each
// transition, keeps it what /api/v1/status says: an open breaker turns
// half-open when its open_for is over, by the clock alone, and a gauge
// set at transitions kept saying open until the next request came. A
// breaker that never tripped reads 0 from its start, and one whose rule
// is gone has no series.
func (m *Metrics) Breakers(read func() []BreakerStat) {
	m.reg.MustRegister(&breakerCollector{read: read})
}

var breakerState = prometheus.NewDesc("graygate_breaker_state", "Circuit breaker state per gray target: 0 closed, 1 half-open, 2 open.", []string{"rule", "target"}, nil)

type breakerCollector struct{ read func() []BreakerStat }

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- breakerState }

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.read() {
		ch <- prometheus.MustNewConstMetric(breakerState, prometheus.GaugeValue, float64(b.State), b.Rule, b.Target)
	}
}

// Refused counts a request the route's policy refused, for reason (see
// proxy.Done.Refused).
func (m *Metrics) Refused(route, reason string) {
	m.refused.WithLabelValues(route, reason).Inc()
}

// BreakerTransition counts one breaker transition.
func (m *Metrics) BreakerTransition(rule, target, from, to string) {
	m.brkTrans.WithLabelValues(rule, target, from, to).Inc()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ClientConns exports graygate_client_connections, the client connections
// open over the data-plane listeners, and
// graygate_client_connections_refused_total, those closed at once because
// proxy.max_client_connections were open, read at scrape time.
func (m *Metrics) ClientConns(read func() (open int64, refused uint64)) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "graygate_client_connections",
			Help: "Client connections open over the data-plane listeners."},
			func() float64 { open, _ := read(); return float64(open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "graygate_client_connections_refused_total",
			Help: "Client connections closed at once because proxy.max_client_connections were open."},
			func() float64 { _, refused := read(); return float64(refused) }),
	)
}

// ProtocolViolations exports, by reason, how many upstream connections the
// data plane closed because the upstream broke HTTP/1.1 framing (bytes
// after a complete response, bytes on an idle pooled connection, a
// response framed two ways), read at
// scrape time. reasons and read's result are in the same order.
func (m *Metrics) ProtocolViolations(reasons []string, read func() []uint64) {
	m.reg.MustRegister(&violationCollector{reasons: reasons, read: read})
}

var violations = prometheus.NewDesc("graygate_upstream_protocol_violations_total",
	"Upstream connections closed instead of reused because the upstream violated the protocol.", []string{"reason"}, nil)

type violationCollector struct {
	reasons []string
	read    func() []uint64
}

func (c *violationCollector) Describe(ch chan<- *prometheus.Desc) { ch <- violations }

func (c *violationCollector) Collect(ch chan<- prometheus.Metric) {
	for i, n := range c.read() {
		ch <- prometheus.MustNewConstMetric(violations, prometheus.CounterValue, float64(n), c.reasons[i])
	}
}

// Mirrors exports each rule's shadow-traffic totals, read at scrape time:
// graygate_mirror_sent_total (copies the mirror target answered),
// graygate_mirror_failed_total (copies it did not: no instance, connection
// error, timeout) and graygate_mirror_dropped_total (copies never sent: a
// full queue, a body over max_body), each by rule.
func (m *Metrics) Mirrors(read func() []MirrorStats) {
	m.reg.MustRegister(&mirrorCollector{read: read})
}

// MirrorStats are one rule's mirror totals.
type MirrorStats struct {
	Rule                  string
	Sent, Failed, Dropped uint64
}

var (
	mirrorSent    = prometheus.NewDesc("graygate_mirror_sent_total", "Shadow copies the mirror target answered, by rule.", []string{"rule"}, nil)
	mirrorFailed  = prometheus.NewDesc("graygate_mirror_failed_total", "Shadow copies the mirror target did not answer (no instance, connection error, timeout), by rule.", []string{"rule"}, nil)
	mirrorDropped = prometheus.NewDesc("graygate_mirror_dropped_total", "Shadow copies never sent (queue full, body over max_body), by rule.", []string{"rule"}, nil)
)

type mirrorCollector struct{ read func() []MirrorStats }

func (c *mirrorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- mirrorSent
	ch <- mirrorFailed
	ch <- mirrorDropped
}

func (c *mirrorCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.read() {
		ch <- prometheus.MustNewConstMetric(mirrorSent, prometheus.CounterValue, float64(s.Sent), s.Rule)
		ch <- prometheus.MustNewConstMetric(mirrorFailed, prometheus.CounterValue, float64(s.Failed), s.Rule)
		ch <- prometheus.MustNewConstMetric(mirrorDropped, prometheus.CounterValue, float64(s.Dropped), s.Rule)
	}
}

// AccessLog exports graygate_access_log_dropped_total, the access log
// lines never written: those that did not fit the writer's queue and those
// whose write failed (a full disk, a closed pipe), read at scrape time from
// dropped. The data plane starts a new writer, counting from 0, when a
// reload turns the log off and on again, and reads 0 while it is off; the
// counter adds what dropped grew by since the previous scrape and never
// goes down (lines dropped by a writer after the last scrape before it was
// replaced are not counted).
func (m *Metrics) AccessLog(dropped func() uint64) {
	var (
		mu          sync.Mutex
		last, total uint64
	)
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "graygate_access_log_dropped_total",
		Help: "Access log lines never written: the writer's queue was full (a slow disk) or the write failed (a full disk, a closed pipe).",
	}, func() float64 {
		mu.Lock()
		defer mu.Unlock()
		v := dropped()
		if v >= last {
			total += v - last
		} else { // a new writer, counting from 0
			total += v
		}
		last = v
		return float64(total)
	}))
}
