// Package gateway assembles a running graygate: it opens the store, builds
// snapshots from the config and the stored rules, and serves the data plane
// and the admin API. It owns the one writer that publishes snapshots, so that
// admin writes, store watches and config reloads never race each other.
package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/internal/admin"
	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/certs"
	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/experiment"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/logfile"
	"github.com/graygate/graygate/internal/metrics"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/notify"
	"github.com/graygate/graygate/internal/proxy"
	"github.com/graygate/graygate/internal/rollout"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/tracing"
	"github.com/graygate/graygate/internal/traffic"
	"github.com/graygate/graygate/internal/upstream"
)

// Options configure New.
type Options struct {
	Config *config.Config
	// AdminToken, when set, is accepted as an admin token named "default".
	AdminToken string
	// Store overrides the file store under Config.DataDir.
	Store  store.Store
	Logger *slog.Logger
	// Random feeds anonymous ids; nil means crypto/rand.
	Random io.Reader
	// AccessLog, when set, receives the JSON access log when
	// Config.AccessLog.Enabled, and access_log.path is ignored. When nil,
	// the gateway writes to access_log.path itself: "stdout" (Stdout),
	// "stderr" (Stderr) or a file, reopened by ReopenAccessLog, switched
	// when a reload changes the path and closed when one turns it off.
	AccessLog io.Writer
	// Stdout and Stderr are the standard streams access_log.path names;
	// nil means the process's own.
	Stdout, Stderr io.Writer
	Now            func() time.Time
	// Version is the build's version, shown in the status.
	Version string
	// Notify tunes how notifications are delivered (queue, attempts,
	// timeout, backoff); zero fields take notify's defaults.
	Notify notify.Delivery
	// RolloutNotifier receives the rollout events (nil: none).
	RolloutNotifier rollout.Notifier
	// RolloutFleet tunes the election and publishing of rollouts on the
	// etcd store (zero: the defaults; see rollout.FleetOptions). Client,
	// Prefix and ID are filled in.
	RolloutFleet rollout.FleetOptions
	// OnSRM, when set, is called when an experiment's split turns
	// mismatched (see experiment.Options.OnSRM), for notifications.
	OnSRM func(experiment.SRMAlert)
	// SeriesRetireGrace is how long the metrics of a rule that no longer
	// serves are kept (0: metrics.RetireGrace).
	SeriesRetireGrace time.Duration
}

// Gateway is one running graygate process's worth of parts.
type Gateway struct {
	opts Options
	// fakeClock: Options.Now was given (tests), so the proxy is handed
	// it too; otherwise the proxy reads the real clock itself.
	fakeClock bool
	log       *slog.Logger
	store     store.Store
	router    *router.Router
	proxy     *proxy.Proxy
	admin     *admin.Server
	metrics   *metrics.Metrics
	breakers  *breaker.Set
	limits    *limit.Set
	notify    *notify.Sender
	rollouts  *rollout.Engine
	exp       *experiment.Recorder
	health    *upstream.Health
	// certs is the TLS listener's configuration (nil without tls_listen).
	certs   *certs.Store
	traffic *traffic.Set    // live per-rule, per-group windows for /api/v1/stats and rollouts
	mirrors *mirror.Set     // shadow traffic and its diffs, per rule; outlives snapshots
	tracer  *tracing.Tracer // nil: tracing off
	// discovered holds instances found in the etcd registry, by service.
	discovered map[string][]config.Instance
	tgt        atomic.Pointer[targeting]
	serveCtx   context.Context // set by Serve, for watches started on reload
	// alog is the access log file the gateway opened for access_log.path
	// (nil while Options.AccessLog is set, or the log is off).
	alog *logfile.Writer

	// wmu serializes what changes what serves from outside the store:
	// admin writes (Commit) and config reloads, so that a write checked
	// against one config is never committed under another. It is taken
	// before mu and held across store writes, which mu never is.
	wmu sync.Mutex

	mu      sync.Mutex // the one writer: guards cfg, reg, cache, status and what follows
	cfg     *config.Config
	reg     *upstream.Registry
	cache   map[string]cached
	status  Status
	serving bool
	// boot is the config the process started with: the running value of
	// every field that needs a restart (config.RestartRequired).
	boot *config.Config
	// popts are the options the data plane runs with.
	popts proxy.Options
	// lastBuild is the last snapshot build's result, "ok" or "partial".
	lastBuild string
	// watchers stops the registry watch of each discovered service.
	watchers map[string]context.CancelFunc
	// seedPending is set while the config's rules could not be seeded
	// because the store could not be written (an etcd outage); Apply
	// retries after the store's next change or resync.
	seedPending bool
	// builtEpoch is the store.State.Epoch of the state build last
	// compiled, and epoch that of the state that serves: within one epoch
	// a lower revision is never published.
	builtEpoch, epoch int64
	// limiters are the keys in limits of the rate limiters the snapshot
	// build last compiled hands out; publish drops the others.
	limiters map[string]bool
}

// cached is a rule compiled under a config generation. It is reused only
// for the same bytes: after etcd is restored from a backup, a version
// number can come back with another rule.
type cached struct {
	version int64
	raw     json.RawMessage
	gen     int
	rule    *rule.Compiled
	err     error
}

// Status is the document GET /api/v1/status returns.
type Status struct {
	Revision   int64 `json:"revision"`
	Rules      int   `json:"rules"`
	RolledBack bool  `json:"rolled_back"`
	// Store says which store serves the rules and whether it is in sync:
	// {"kind": "etcd", "state": "stale", "since": …, "revision": …}.
	Store      StoreStatus `json:"store"`
	LastReload time.Time   `json:"last_reload"`
	LastResult string      `json:"last_reload_result"`
	// RestartRequired lists the config fields whose new value waits for a
	// restart (config.Fields), also named in LastResult.
	RestartRequired []string           `json:"restart_required"`
	LastError       string             `json:"last_error,omitempty"`
	LastErrorAt     *time.Time         `json:"last_error_at,omitempty"`
	BrokenRules     map[string]string  `json:"broken_rules,omitempty"`
	Breakers        []breaker.Snapshot `json:"breakers"`
	Stale           bool               `json:"stale"`
	Sync            *StoreSync         `json:"store_sync,omitempty"`
	ConfigGen       int                `json:"config_generation"`
	StartedAt       time.Time          `json:"started_at"`
	Version         string             `json:"version,omitempty"`
	UptimeS         float64            `json:"uptime_s"`
	// Rollouts says, for every active rollout, whether this gateway is
	// "driving" it or "following" its driver; FleetID names this gateway
	// in a fleet's elections.
	Rollouts map[string]string `json:"rollouts,omitempty"`
	FleetID  string            `json:"fleet_id,omitempty"`

	// ConfigRulesNotApplied are the keys of the config file's rules that
	// do not serve, as of the last start or reload: the store held them
	// before, and its version (or its deletion) stands.
	ConfigRulesNotApplied []string `json:"config_rules_not_applied"`
}

// New opens the store, seeds it with the config's rules and builds the first
// snapshot. A config that does not compile is an error; a stored rule that
// no longer compiles is disabled and reported in the status.
func New(opts Options) (*Gateway, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	fakeClock := opts.Now != nil
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cfg := opts.Config
	g := &Gateway{opts: opts, fakeClock: fakeClock, log: opts.Logger.With("component", "gateway"), cfg: cfg, boot: cfg, cache: map[string]cached{}, metrics: metrics.New()}
	if opts.SeriesRetireGrace > 0 {
		g.metrics.SetRetireGrace(opts.SeriesRetireGrace)
	}
	g.status.StartedAt = opts.Now()
	g.status.RestartRequired = []string{}
	g.status.ConfigRulesNotApplied = []string{}
	g.status.Version = opts.Version
	tr, err := traffic.New(traffic.Options{Now: opts.Now})
	if err != nil {
		return nil, err
	}
	g.traffic = tr
	g.breakers = breaker.NewSet(breaker.SetOptions{Now: opts.Now, OnTransition: g.breakerTransition})
	g.metrics.Breakers(g.breakerStats)
	g.limits = limit.NewSet(opts.Now)
	if g.notify, err = g.newSender(cfg); err != nil {
		return nil, err
	}
	g.mirrors = mirror.New(mirror.Options{Logger: opts.Logger.With("component", "mirror")})
	g.health = upstream.NewHealth(upstream.HealthOptions{Now: opts.Now, Logger: opts.Logger})
	pools, err := g.pools(cfg)
	if err != nil {
		_ = g.health.Close()
		g.closeNotify(canceled())
		return nil, err
	}
	g.reg = upstream.NewRegistry(pools)
	tgt, err := newTargeting(cfg.Targeting, opts.Logger)
	if err != nil {
		g.reg.Close()
		_ = g.health.Close()
		g.closeNotify(canceled())
		return nil, err
	}
	g.tgt.Store(tgt)
	built := false
	defer func() {
		if !built { // release what New made before it failed
			g.reg.Close()
			_ = g.health.Close()
			_ = tgt.close()
			g.closeNotify(canceled())
			g.mirrors.Close()
			g.shutdownTracer()
		}
	}()
	if g.tracer, err = newTracer(cfg, opts.Version, opts.Logger); err != nil {
		return nil, err
	}
	g.metrics.TagStore(func() metrics.TagStats {
		s := g.tgt.Load().redisStats()
		return metrics.TagStats{Hits: s.Hits, Misses: s.Misses, Unknown: s.Unknown, Errors: s.Errors, Rejected: s.Rejected}
	})
	st := opts.Store
	if st == nil {
		fs, err := store.OpenFile(cfg.DataDir, store.FileOptions{HistoryLimit: cfg.Store.HistoryLimit, Logger: opts.Logger})
		if err != nil {
			return nil, err // "open store <dir>: …"
		}
		st = fs
	}
	g.store = st
	if err := g.checkDiscovery(cfg); err != nil {
		_ = st.Close()
		return nil, err
	}
	g.exportStoreMetrics()
	g.exportMirrorMetrics()
	if err := g.newRollouts(); err != nil {
		_ = st.Close()
		return nil, err
	}
	g.metrics.Pools(func() []metrics.PoolStats {
		g.mu.Lock()
		stats := g.reg.Stats()
		g.mu.Unlock()
		out := make([]metrics.PoolStats, 0, len(stats))
		for _, p := range stats {
			out = append(out, metrics.PoolStats{Name: p.Name, Size: p.Size, Healthy: p.Healthy, Ejected: p.Ejected, Failing: p.Failing, InFlight: p.InFlight})
		}
		return out
	}, func() map[string]uint64 {
		out := map[string]uint64{}
		for _, h := range g.health.Snapshot() {
			out[h.Addr] = h.Ejections
		}
		return out
	})
	g.metrics.RateLimits(func() []metrics.RateLimitStats {
		stats := g.limits.Stats()
		out := make([]metrics.RateLimitStats, 0, len(stats))
		for _, l := range stats {
			route, ok := strings.CutPrefix(l.Key, limiterKey(""))
			if ok {
				out = append(out, metrics.RateLimitStats{Route: route, Identities: l.Identities, Bytes: l.Bytes, Evicted: l.Evicted})
			}
		}
		return out
	})
	if err := g.seed(context.Background(), cfg); err != nil {
		_ = st.Close()
		return nil, err
	}
	snap, err := g.build(context.Background())
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	g.syncMirrors(snap)
	g.router = router.New(snap)
	g.servedRules(snap)
	g.epoch = g.builtEpoch
	g.noteRulesNotApplied(context.Background(), cfg)

	if err := g.openAccessLog(cfg); err != nil {
		_ = st.Close()
		return nil, err
	}
	g.exp, err = experiment.New(experiment.Options{
		Store:         cfg.Experiments.Store,
		Dir:           filepath.Join(cfg.DataDir, "experiments"),
		FlushInterval: cfg.Experiments.FlushInterval.Std(),
		MaxUnits:      cfg.Experiments.MaxUnits,
		BufferEvents:  cfg.Experiments.BufferEvents,
		ExposureLog:   cfg.Experiments.ExposureLog,
		Gateway:       cfg.ExposureGateway(),
		OnSRM:         g.onSRM,
		Freeze:        g.freeze,
		Logger:        opts.Logger,
		Now:           opts.Now,
	})
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("experiments: %w", err)
	}
	g.exp.SetCatalog(experiment.NewCatalog(snap, experimentSettings(cfg)))
	g.metrics.Registry().MustRegister(g.exp.Collector())
	popts, err := g.proxyOptions(cfg)
	if err != nil {
		_ = st.Close()
		_ = g.closeAccessLog()
		return nil, err
	}
	g.popts = popts
	if cfg.TLSListen != "" {
		cs, err := certs.New(tlsSettings(cfg), opts.Logger)
		if err != nil {
			_ = st.Close()
			_ = g.closeAccessLog()
			return nil, fmt.Errorf("tls: %w", err)
		}
		g.certs = cs
	}
	g.proxy = proxy.New(popts, g.router, opts.Logger)
	g.metrics.AccessLog(g.proxy.AccessLogDropped)
	g.metrics.ClientConns(g.proxy.ClientConns)
	g.metrics.ProtocolViolations(proxy.ViolationReasons[:], func() []uint64 {
		v := g.proxy.ProtocolViolations()
		return v[:]
	})
	g.admin = admin.New(admin.Options{
		Store:       st,
		Router:      g.router,
		View:        g.proxy.View,
		Compile:     g.compile,
		Vet:         g.rollouts.Vet,
		Status:      func() any { return g.Status() },
		Ready:       g.ready,
		Metrics:     g.metrics.Handler(),
		Traffic:     g.traffic,
		Mirrors:     g.mirrors,
		Commit:      g.Commit,
		Notify:      g.Notify,
		Rollout:     g.rollouts,
		Experiments: g.exp,
		Tokens:      tokens(cfg, opts.AdminToken),
		Logger:      opts.Logger,
	})
	built = true
	return g, nil
}

// experimentSettings are the experiment settings that apply live.
func experimentSettings(cfg *config.Config) experiment.Settings {
	return experiment.Settings{Window: cfg.Experiments.ConversionWindow.Std(), Freeze: cfg.Experiments.SRMAction == config.SRMActionFreeze}
}

// freeze is experiments.srm_action: freeze: the one-click rollback of the
// rule, recorded in its history with the reason, then applied. The rule
// must still be the version whose split was judged: an operator who has
// since changed it (a new experiment, new weights) gets a new check, not a
// rollback of a rule that was never judged.
func (g *Gateway) freeze(ctx context.Context, key string, version int64, reason string) error {
	if _, err := g.store.SetRollback(ctx, key, true, version, store.Meta{By: "srm", Reason: reason}); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("roll back rule %q judged at version %d: %w (%w)", key, version, experiment.ErrRuleChanged, err)
		}
		return fmt.Errorf("roll back rule %q: %w", key, err)
	}
	return g.Apply(ctx)
}

// publish makes snap, the last snapshot built, serve, with its
// experiments. The experiments go first, so that no request decided by
// snap finds its rule unknown to them. The rate limiters of routes snap
// does not limit (removed, or their limit taken off) are dropped then, not
// when a build drops them: a reload refused after its build puts the old
// routes back with their tokens, and a route added back later starts with
// a full bucket, as a new one does. Requests decided by an older snapshot
// may still take tokens from a dropped limiter, which is then forgotten.
// Concurrency gates are dropped at the same moment (see capped). The
// caller holds g.mu.
func (g *Gateway) publish(snap *router.Snapshot) {
	g.servedRules(snap)
	g.exp.SetCatalog(experiment.NewCatalog(snap, experimentSettings(g.cfg)))
	g.syncMirrors(snap)
	g.router.Store(snap)
	g.epoch = g.builtEpoch
	g.limits.Retain(func(k string) bool { return g.limiters[k] }, g.capped)
}

// servedRules tells the metrics which rules serve from now on: a served
// snapshot's, never a build's that does not serve (an older state, a
// refused reload), which would retire the series of a rule still serving.
func (g *Gateway) servedRules(snap *router.Snapshot) {
	keys := make([]string, 0, len(snap.RuleSet))
	for k := range snap.RuleSet {
		keys = append(keys, k)
	}
	g.metrics.SetRules(keys)
}

// capped reports whether the serving config caps the upstream named key,
// so that publish keeps its concurrency gate. The gate of an upstream
// removed or uncapped is dropped once no request holds a slot in it (one
// still held keeps it to a later publish); an upstream capped again starts
// from an empty gate. A request of the retired pool may still take a slot
// in a dropped gate, which is then forgotten: for that moment the new and
// the old gate together may admit more than the cap.
func (g *Gateway) capped(key string) bool {
	u, ok := g.cfg.Upstreams[key]
	return ok && u.MaxConcurrent > 0
}

func tokens(cfg *config.Config, flagToken string) []admin.Token {
	var out []admin.Token
	if flagToken != "" {
		out = append(out, admin.Token{Name: "default", Value: flagToken, Role: admin.RoleAdmin})
	}
	for _, t := range cfg.Admin.Tokens {
		v := t.Token
		if t.TokenEnv != "" {
			v = os.Getenv(t.TokenEnv)
		}
		out = append(out, admin.Token{Name: t.Name, Value: v, Role: t.Role})
	}
	return out
}

// seed creates the config's rules that the store has never held. A rule
// that does not compile is an error. While the store cannot be written (a
// shared store out of sync with etcd) seeding waits, so that a gateway
// starts and reloads during an outage: Apply retries it after the store's
// next change or resync. The caller holds g.mu, or is New.
func (g *Gateway) seed(ctx context.Context, cfg *config.Config) error {
	keys, err := g.seedKeys(ctx, cfg, g.reg)
	if err != nil {
		return err
	}
	g.seedPending = false
	if len(cfg.Rules) == 0 {
		return nil
	}
	if s, ok := g.store.(syncer); ok && !s.Synced() {
		g.seedPending = true
		g.log.Warn("the store is out of sync with etcd: the config's rules are seeded when it is back", "rules", len(keys))
		return nil
	}
	for i, raw := range cfg.Rules {
		key := keys[i]
		_, err := g.store.History(ctx, key)
		if err == nil {
			continue // the store knows this key: API edits win over the file
		}
		if errors.Is(err, store.ErrNotFound) {
			_, err = g.store.Put(ctx, key, raw, 0, store.Meta{By: "config", Reason: "seeded from the config file"})
			if errors.Is(err, store.ErrConflict) {
				err = nil
			}
		}
		if errors.Is(err, store.ErrUnavailable) {
			g.seedPending = true
			g.log.Warn("the store cannot be written: the config's rules are seeded when it is back", "rule", key, "err", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("seed rule %q: %w", key, err)
		}
	}
	return nil
}

// noteRulesNotApplied logs a warning for each of the config's rules that
// does not serve because the store held its key before (seed never
// overwrites it), and lists them in the status. It runs after seed, on
// start and on every reload that succeeds. The caller holds g.mu, or is
// New.
func (g *Gateway) noteRulesNotApplied(ctx context.Context, cfg *config.Config) {
	if g.seedPending {
		return // a key not seeded yet would pass for one the store deleted
	}
	st, err := g.store.Load(ctx)
	if err != nil {
		return // the last list stands until the store answers
	}
	held := make(map[string]json.RawMessage, len(st.Rules))
	for _, e := range st.Rules {
		held[e.Key] = e.Rule
	}
	keys := []string{}
	for _, n := range cfg.RulesNotApplied(held) {
		keys = append(keys, n.Key)
		what := "the store's version serves: edit it through the API or CLI"
		if n.Deleted {
			what = "the store deleted it: create it through the API or CLI"
		}
		g.log.Warn("config rule "+n.Key+" not applied: "+what+", or remove it from the file", "rule", n.Key)
	}
	g.status.ConfigRulesNotApplied = keys
}

// seedKeys checks the config's rules as seed writes them, compiled under
// cfg against reg, changing nothing, and returns their keys in order. A
// rule that does not compile, a duplicate key, or an overlap in a layer
// with a serving rule (or an earlier rule of the file) is an error. The
// caller holds g.mu, or is New.
func (g *Gateway) seedKeys(ctx context.Context, cfg *config.Config, reg *upstream.Registry) ([]string, error) {
	keys := make([]string, len(cfg.Rules))
	others, held := g.servingRules(), g.servingRule
	if g.router == nil && len(cfg.Rules) > 0 {
		// At start nothing serves yet: the rules to check against are
		// the ones the store holds, which the first snapshot will serve.
		others, held = g.storedRules(ctx, cfg)
	}
	first := map[string]int{}
	for i, raw := range cfg.Rules {
		r, err := rule.Decode(raw)
		var c *rule.Compiled
		if err == nil {
			c, err = g.compileWith(cfg, reg, r)
		}
		if err != nil {
			return nil, fmt.Errorf("config rules[%d]: %w", i, err)
		}
		if j, dup := first[r.Key]; dup {
			return nil, strict.Errorf(strict.Join(strict.Index("rules", i), "key"), "duplicates rules[%d].key %q", j, r.Key)
		}
		first[r.Key] = i
		// A rule that would overlap a serving rule (or an earlier rule of
		// the file) in a layer is refused, so the store never holds one.
		if _, served := held(r.Key); !served {
			if err := rule.LayerConflicts(c, others); err != nil {
				return nil, fmt.Errorf("config rules[%d]: %w", i, err)
			}
			others = append(others, c)
		}
		keys[i] = r.Key
	}
	return keys, nil
}

func (g *Gateway) compileWith(cfg *config.Config, reg *upstream.Registry, r rule.Rule) (*rule.Compiled, error) {
	routes := map[string]bool{}
	for _, rt := range cfg.Routes {
		routes[rt.Name] = true
	}
	return rule.Compile(r, rule.Env{Resolve: reg.Resolve, HasRoute: func(n string) bool { return routes[n] }, TagTypes: cfg.Targeting.TagTypes})
}

// compile validates a rule against the current config (for the admin API).
func (g *Gateway) compile(r rule.Rule) (*rule.Compiled, error) {
	g.mu.Lock()
	cfg, reg := g.cfg, g.reg
	g.mu.Unlock()
	c, err := g.compileWith(cfg, reg, r)
	if err != nil {
		return nil, err
	}
	if err := rule.LayerConflicts(c, g.servingRules()); err != nil {
		return nil, err
	}
	return c, nil
}

// servingRules returns the rules of the serving snapshot (none before the
// first one is built).
func (g *Gateway) servingRules() []*rule.Compiled {
	if g.router == nil {
		return nil
	}
	snap := g.router.Load()
	out := make([]*rule.Compiled, 0, len(snap.RuleSet))
	for _, c := range snap.RuleSet {
		out = append(out, c)
	}
	return out
}

// storedRules compiles the rules the store holds under cfg, skipping those
// that do not compile (the first snapshot disables them), for seed before
// anything serves; and a lookup by key over them.
func (g *Gateway) storedRules(ctx context.Context, cfg *config.Config) ([]*rule.Compiled, func(string) (*rule.Compiled, bool)) {
	st, err := g.load(ctx)
	if err != nil {
		return nil, func(string) (*rule.Compiled, bool) { return nil, false }
	}
	byKey := make(map[string]*rule.Compiled, len(st.Rules))
	var out []*rule.Compiled
	for _, e := range st.Rules {
		r, err := rule.Decode(e.Rule)
		if err != nil {
			continue
		}
		c, err := g.compileWith(cfg, g.reg, r)
		if err != nil {
			continue
		}
		byKey[e.Key] = c
		out = append(out, c)
	}
	return out, func(k string) (*rule.Compiled, bool) { c, ok := byKey[k]; return c, ok }
}

// servingRule returns the serving snapshot's rule with that key.
func (g *Gateway) servingRule(key string) (*rule.Compiled, bool) {
	if g.router == nil {
		return nil, false
	}
	c, ok := g.router.Load().RuleSet[key]
	return c, ok
}

// dropLayerConflicts keeps a store that somehow holds an overlap (written
// around the API) from stopping the gateway: of rules that overlap in a
// layer, the one stored earlier (lower revision) serves and the later one
// is disabled and reported, at start-up and on every rebuild alike. A
// rebuild that refused the whole set instead would leave every gateway of
// a fleet serving its old rules and refusing every later write, whatever
// rule it is for. A write is the newest rule, so one that would overlap is
// the one disabled, and Commit refuses it.
func dropLayerConflicts(rules []*rule.Compiled, revision map[string]int64, broken map[string]error) []*rule.Compiled {
	sorted := slices.Clone(rules)
	slices.SortFunc(sorted, func(a, b *rule.Compiled) int {
		return cmp.Or(cmp.Compare(revision[a.Key], revision[b.Key]), cmp.Compare(a.Key, b.Key))
	})
	var kept []*rule.Compiled
	for _, c := range sorted {
		if err := rule.LayerConflicts(c, kept); err != nil {
			broken[c.Key] = &layerConflict{err}
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

// layerConflict is why dropLayerConflicts disabled a rule: the error of
// rule.LayerConflicts, as it is.
type layerConflict struct{ err error }

func (e *layerConflict) Error() string { return e.err.Error() }
func (e *layerConflict) Unwrap() error { return e.err }

// build compiles the current store state with the current config. The
// caller holds g.mu, or is New.
func (g *Gateway) build(ctx context.Context) (*router.Snapshot, error) {
	st, err := g.load(ctx)
	if err != nil {
		return nil, err
	}
	in, broken, err := g.assemble(g.cfg, g.reg, st, true)
	if err != nil {
		return nil, err
	}
	snap, err := router.Build(in)
	if err != nil {
		return nil, err
	}
	g.builtEpoch = st.Epoch
	g.rollouts.Observe(st, in.Rules)
	now := g.opts.Now()
	g.status.Revision, g.status.Rules, g.status.RolledBack = st.Revision, len(in.Rules), st.RolledBack
	g.status.LastReload, g.lastBuild = now, "ok"
	g.status.BrokenRules = nil
	if len(broken) > 0 {
		g.status.BrokenRules = make(map[string]string, len(broken))
		g.lastBuild = "partial"
		for k, e := range broken {
			g.status.BrokenRules[k] = e.Error()
			g.log.Error("rule disabled: it no longer compiles", "rule", k, "err", e)
		}
	}
	g.status.LastResult = g.result(g.lastBuild)
	g.metrics.Reloaded(g.lastBuild, st.Revision)
	g.metrics.SetRollback(st.RolledBack, in.RolledBack)
	return snap, nil
}

// load reads the store's state. A shared store that has no state yet
// (etcd unreachable since start, no cache) reads as no rules: the gateway
// serves its routes' defaults and /readyz fails, saying why (ready).
func (g *Gateway) load(ctx context.Context) (store.State, error) {
	st, err := g.store.Load(ctx)
	if err == nil {
		return st, nil
	}
	if s, ok := g.store.(syncer); ok && s.StateErr() != nil && errors.Is(err, store.ErrUnavailable) {
		return store.State{}, nil
	}
	return store.State{}, fmt.Errorf("load rules: %w", err)
}

// assemble compiles the rules of st under cfg, with targets resolved by
// reg, into a router input, with the rules that do not compile (or whose
// breaker is invalid) by key. With commit it is the real thing: it keeps
// the compile cache and the breaker set in step with st, and records the
// routes' rate limiters it hands out (publish drops the others). Without, it
// changes nothing, for checking a state before it is written, or a config
// before it is reloaded: compiled rules are not cached, breakers are only
// validated, and routes get no limits. The cache holds rules compiled
// against g.reg, so it is read only for reg == g.reg. The caller holds
// g.mu, or is New.
func (g *Gateway) assemble(cfg *config.Config, reg *upstream.Registry, st store.State, commit bool) (router.Input, map[string]error, error) {
	var rules []*rule.Compiled
	broken := map[string]error{}
	rolled := map[string]bool{}
	seen := make(map[string]bool, len(st.Rules))
	revision := make(map[string]int64, len(st.Rules))
	versions := make(map[string]int64, len(st.Rules))
	for _, e := range st.Rules {
		seen[e.Key] = true
		revision[e.Key], versions[e.Key] = e.Revision, e.Version
		if e.RolledBack {
			rolled[e.Key] = true
		}
		c, ok := g.cache[e.Key]
		if reg != g.reg {
			ok = false
		}
		if !ok || c.version != e.Version || c.gen != g.status.ConfigGen || !bytes.Equal(c.raw, e.Rule) {
			c = cached{version: e.Version, raw: e.Rule, gen: g.status.ConfigGen}
			r, err := rule.Decode(e.Rule)
			if err == nil {
				c.rule, err = g.compileWith(cfg, reg, r)
			}
			c.err = err
			if commit {
				g.cache[e.Key] = c
			}
		}
		if c.err != nil {
			broken[e.Key] = c.err
			continue
		}
		rules = append(rules, c.rule)
	}
	if commit {
		for k := range g.cache {
			if !seen[k] {
				delete(g.cache, k)
			}
		}
		g.traffic.Retain(func(k string) bool { return seen[k] })
	}
	rules = dropLayerConflicts(rules, revision, broken)
	breakers := map[string]*breaker.Breaker{}
	inUse := map[string]bool{}
	kept := rules[:0:0]
	for _, r := range rules {
		if r.Type != rule.TypeGray {
			kept = append(kept, r)
			continue
		}
		key := breakerKey(r)
		bc := r.Source.Breaker.Over(cfg.Breaker)
		if !commit {
			if err := bc.Validate("breaker"); err != nil {
				broken[r.Key] = err
				continue
			}
			kept = append(kept, r)
			continue
		}
		b, err := g.breakers.Get(key, bc)
		if err != nil {
			broken[r.Key] = err
			continue
		}
		breakers[r.Key], inUse[key] = b, true
		kept = append(kept, r)
	}
	rules = kept
	if commit {
		g.retainBreakers(inUse, rules)
	}
	limiters := map[string]bool{}
	policy := func(route string, l config.Limits) *router.Policy {
		if !commit {
			return nil
		}
		if l.RateLimit != nil {
			limiters[limiterKey(route)] = true
		}
		return g.policy(route, l)
	}
	in := router.Input{
		Sources:       g.tgt.Load().src,
		Breakers:      breakers,
		Policy:        policy("", cfg.Limits),
		Revision:      st.Revision,
		Identity:      cfg.Identity,
		Random:        g.opts.Random,
		Rules:         rules,
		RolledBackAll: st.RolledBack,
		RolledBack:    rolled,
		Versions:      versions,
		TrustGrayTag:  cfg.TrustGrayTag,
		UpstreamHost:  !*cfg.PreserveHost,
	}
	if h := cfg.Experiments.Holdout; h != nil {
		in.Holdout = rule.NewHoldout(h.Percent, h.Salt)
	}
	if cfg.DefaultUpstream != "" {
		p, err := reg.Resolve(cfg.DefaultUpstream)
		if err != nil {
			return in, nil, fmt.Errorf("default_upstream: %w", err)
		}
		in.Default = p
	}
	for _, rt := range cfg.Routes {
		spec := router.RouteSpec{Name: rt.Name, Host: rt.Host, PathPrefix: rt.PathPrefix, UpstreamHost: !*cfg.PreserveHost,
			Policy: policy(rt.Name, rt.Limits.Over(cfg.Limits)), VersionHeader: string(rt.VersionHeader)}
		if rt.PreserveHost != nil {
			spec.UpstreamHost = !*rt.PreserveHost
		}
		if rt.Upstream != "" {
			p, err := reg.Resolve(rt.Upstream)
			if err != nil {
				return in, nil, fmt.Errorf("routes %q upstream: %w", rt.Name, err)
			}
			spec.Default = p
		}
		in.Routes = append(in.Routes, spec)
	}
	if commit {
		g.limiters = limiters
	}
	return in, broken, nil
}

// pools builds the config's named pools with their concurrency gates, which
// keep their in-flight counts across reloads.
func (g *Gateway) pools(cfg *config.Config) (map[string]*upstream.Pool, error) {
	pools, err := cfg.Pools(g.health, g.discovered)
	if err != nil {
		return nil, err
	}
	for name, u := range cfg.Upstreams {
		if u.MaxConcurrent > 0 {
			pools[name].Gate = g.limits.Gate(name, u.MaxConcurrent)
		}
	}
	return pools, nil
}

// policy builds a route's limits; its rate limiter keeps its tokens across
// reloads while the route keeps a rate limit (see publish).
func (g *Gateway) policy(route string, l config.Limits) *router.Policy {
	p := &router.Policy{UpstreamTimeout: l.Timeout.Std(), MaxBodyBytes: l.MaxBodyBytes, FallbackBodyBytes: l.FallbackBodyBytes}
	if p.FallbackBodyBytes == 0 {
		p.FallbackBodyBytes = router.DefaultFallbackBodyBytes
	}
	if l.RateLimit != nil {
		p.Limiter = g.limits.Limiter(limiterKey(route), *l.RateLimit)
	}
	return p
}

// limiterKey names a route's rate limiter in g.limits; route "" is the
// requests no route owns.
func limiterKey(route string) string { return "route:" + route }

// breakerKey names a gray rule's breaker: rule and gray target, so that a
// rule pointed at a new gray target starts with a fresh breaker.
func breakerKey(r *rule.Compiled) string { return r.Key + "|" + r.Source.Targets.Gray }

// breakerTransition logs a breaker transition, counts it and notifies.
func (g *Gateway) breakerTransition(key string, from, to breaker.State, reason string) {
	rk, target, _ := strings.Cut(key, "|")
	level := slog.LevelInfo
	if to == breaker.Open {
		level = slog.LevelWarn
	}
	g.log.Log(context.Background(), level, "breaker "+to.String(), "rule", rk, "target", target, "from", from.String(), "to", to.String(), "reason", reason)
	g.metrics.BreakerTransition(rk, target, from.String(), to.String())
	g.notifyBreaker(rk, target, from, to, reason)
}

// retainBreakers drops the breakers of gray targets no rule uses any more
// (a deleted rule, a rule pointed at another gray target). One that was
// open or half-open is reported closed (breaker_close, and a log line):
// otherwise the receivers that were told it opened would never hear the
// end of it.
func (g *Gateway) retainBreakers(inUse map[string]bool, rules []*rule.Compiled) {
	left := map[string]breaker.State{}
	for _, s := range g.breakers.Snapshots() {
		if !inUse[s.Name] && s.State != breaker.Closed {
			left[s.Name] = s.State
		}
	}
	live := map[string]bool{}
	for _, r := range rules {
		live[r.Key] = true
	}
	for _, key := range g.breakers.Retain(func(k string) bool { return inUse[k] }) {
		from, ok := left[key]
		if !ok {
			continue
		}
		rk, target, _ := strings.Cut(key, "|")
		reason := fmt.Sprintf("rule %s was deleted", rk)
		if live[rk] {
			reason = fmt.Sprintf("rule %s no longer sends gray traffic to %s", rk, target)
		}
		g.log.Info("breaker removed", "rule", rk, "target", target, "from", from.String(), "reason", reason)
		g.Notify(notify.Event{Type: notify.BreakerClose, Rule: rk,
			Fields: map[string]any{"target": target, "from": from.String(), "to": "removed", "reason": reason},
			Text:   fmt.Sprintf("breaker closed for rule %s (gray target %s): %s, so its breaker is gone", rk, target, reason)})
	}
}

// breakerStats lists every breaker's state for graygate_breaker_state, at
// scrape time. Like the status API, it makes the transitions due by the
// clock (an open breaker whose open_for is over turns half-open).
func (g *Gateway) breakerStats() []metrics.BreakerStat {
	snaps := g.breakers.Snapshots()
	out := make([]metrics.BreakerStat, 0, len(snaps))
	for _, s := range snaps {
		rk, target, _ := strings.Cut(s.Name, "|")
		state := metrics.BreakerClosed
		switch s.State {
		case breaker.Open:
			state = metrics.BreakerOpen
		case breaker.HalfOpen:
			state = metrics.BreakerHalfOpen
		}
		out = append(out, metrics.BreakerStat{Rule: rk, Target: target, State: state})
	}
	return out
}

// Apply rebuilds the snapshot from the store and publishes it. It returns
// once the new snapshot serves. Config rules whose seeding waited for the
// store are seeded first.
func (g *Gateway) Apply(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seedPending {
		if err := g.seed(ctx, g.cfg); err != nil {
			g.log.Error("seed the config's rules", "err", err)
		} else {
			g.noteRulesNotApplied(ctx, g.cfg)
		}
	}
	snap, err := g.build(ctx)
	if err != nil {
		g.recordError(err)
		return err
	}
	cur := g.router.Load()
	switch {
	case cur == nil:
	case g.builtEpoch != g.epoch:
		// The store's history was replaced (etcd restored from a
		// backup): what it holds now is the truth, at whatever revision.
		g.log.Warn("the store's history was replaced (etcd restored from a backup?): serving what it holds now",
			"revision", snap.Revision, "was", cur.Revision, "history_resets", g.builtEpoch)
	case snap.Revision < cur.Revision:
		return nil // an older state than what serves: never go back
	}
	g.publish(snap)
	return nil
}

// recordError records a failed reload in the status and the metrics, and
// logs it, once: a rule apply's, or a config reload's (errConfigReload).
func (g *Gateway) recordError(err error) {
	g.metrics.Reloaded("error", 0)
	now := g.opts.Now()
	g.status.LastResult, g.status.LastError, g.status.LastErrorAt = "error", err.Error(), &now
	if errors.Is(err, errConfigReload) {
		g.log.Error("config reload failed; the previous config keeps serving", "err", err)
		return
	}
	g.log.Error("reload failed; the previous rules keep serving", "err", err)
}

// errConfigReload marks a config reload's failure (configReloadError).
var errConfigReload = errors.New("config reload")

// configReloadError is err as a config reload's failure: "config reload:
// <err>", with errConfigReload in its chain for recordError.
func configReloadError(err error) error { return fmt.Errorf("%w: %w", errConfigReload, err) }

// Status returns a copy of the status document.
func (g *Gateway) Status() Status {
	g.mu.Lock()
	st := g.status
	g.mu.Unlock()
	st.Breakers = g.breakers.Snapshots()
	for k, driving := range g.rollouts.Driving() {
		if st.Rollouts == nil {
			st.Rollouts = map[string]string{}
		}
		st.Rollouts[k] = "following"
		if driving {
			st.Rollouts[k] = "driving"
		}
	}
	st.FleetID = g.rollouts.ID()
	if st.Sync = g.storeSync(); st.Sync != nil {
		st.Stale = st.Sync.Stale || !st.Sync.Synced
	}
	st.Store = g.storeStatus(st.Revision)
	st.RestartRequired = slices.Clone(st.RestartRequired)
	st.ConfigRulesNotApplied = slices.Clone(st.ConfigRulesNotApplied)
	st.UptimeS = g.opts.Now().Sub(st.StartedAt).Round(time.Second).Seconds()
	return st
}

func (g *Gateway) ready() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	// A gateway that holds rules stays ready through an etcd outage: it
	// serves them (the status says stale), and taking every replica out
	// of its load balancer at once would turn a control-plane outage into
	// a fleet-wide one. One with nothing to serve is not ready. That
	// reason, known from the store's opening on, is given first, so a
	// probe in the moment before the listeners serve says it too.
	if s, ok := g.store.(syncer); ok {
		if err := s.StateErr(); err != nil {
			return fmt.Errorf("no rules to serve yet: %w; the gateway becomes ready when etcd answers", err)
		}
	}
	if !g.serving {
		return errors.New("not serving")
	}
	return nil
}

// Router returns the router, for tests and explain.
func (g *Gateway) Router() *router.Router { return g.router }

// AdminHandler returns the admin API handler.
func (g *Gateway) AdminHandler() http.Handler { return g.admin }

// tlsSettings are the TLS listener's settings in cfg: its certificates,
// version and client CAs, with HTTP/2 offered by ALPN.
func tlsSettings(cfg *config.Config) certs.Settings {
	s := certs.Settings{
		MinVersion:   cfg.TLS.MinTLSVersion(),
		ClientCAFile: cfg.TLS.ClientCAFile,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	for _, c := range cfg.TLS.Certificates {
		s.Certificates = append(s.Certificates, certs.Pair{CertFile: c.CertFile, KeyFile: c.KeyFile})
	}
	return s
}

// Listeners are the sockets a gateway serves.
type Listeners struct {
	// Data is the cleartext data plane: HTTP/1.1, and HTTP/2 with prior
	// knowledge when the config says h2c.
	Data net.Listener
	// TLS is the TLS data plane (tls_listen), HTTP/2 by ALPN; nil for none.
	TLS net.Listener
	// Admin is the admin API.
	Admin net.Listener
}

// Serve serves the data plane on dataLn and the admin API on adminLn until
// ctx is done, then shuts both down gracefully.
func (g *Gateway) Serve(ctx context.Context, dataLn, adminLn net.Listener) error {
	return g.ServeListeners(ctx, Listeners{Data: dataLn, Admin: adminLn})
}

// ServeListeners serves ls until ctx is done, then shuts them all down
// gracefully: /readyz fails, drain_delay passes, the listeners close and
// requests in flight (HTTP/2 streams included) finish.
func (g *Gateway) ServeListeners(ctx context.Context, ls Listeners) error {
	dataLn, adminLn := ls.Data, ls.Admin
	if ls.TLS != nil && g.certs == nil {
		return errors.New("a TLS listener needs tls_listen and tls.certificates in the config")
	}
	// A client trickling its request body, or keeping idle keep-alive
	// connections, holds nothing for ever (admin.read_timeout,
	// admin.idle_timeout). No write timeout: an answer may wait on the
	// store, whose own timeouts bound it.
	g.mu.Lock()
	adminRead := cmp.Or(config.StdOf(g.boot.Admin.ReadTimeout), config.DefaultAdminReadTimeout)
	adminIdle := cmp.Or(config.StdOf(g.boot.Admin.IdleTimeout), config.DefaultAdminIdleTimeout)
	g.mu.Unlock()
	// net/http's own messages (an accept error and its retry, a handler's
	// panic) go to the gateway's log, named, not to slog's default.
	adminSrv := &http.Server{Handler: g.admin, ReadHeaderTimeout: min(10*time.Second, adminRead), ReadTimeout: adminRead, IdleTimeout: adminIdle,
		ErrorLog: slog.NewLogLogger(g.log.With("component", "admin").Handler(), slog.LevelWarn)}
	errc := make(chan error, 3)
	g.mu.Lock()
	h2c := g.boot.H2C
	g.mu.Unlock()
	go func() {
		if h2c {
			errc <- g.proxy.ServeWith(dataLn, listener.Protocols{H2C: true})
			return
		}
		errc <- g.proxy.Serve(dataLn)
	}()
	if ls.TLS != nil {
		go func() { errc <- g.proxy.ServeWith(ls.TLS, listener.Protocols{TLS: g.certs.Config()}) }()
		go func() {
			if err := g.certs.Watch(ctx, 200*time.Millisecond); err != nil {
				g.log.Error("TLS files are not watched: a changed certificate applies at the next config reload", "err", err)
			}
		}()
	}
	go func() {
		if err := adminSrv.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			return
		}
		errc <- nil
	}()
	go g.watchStore(ctx)
	go g.traffic.Run(ctx)
	rolloutsDone := make(chan struct{})
	go func() {
		defer close(rolloutsDone)
		g.rollouts.Run(ctx)
	}()
	g.mu.Lock()
	g.serveCtx = ctx
	g.syncWatchers(g.cfg)
	if err := g.tgt.Load().watch(ctx); err != nil {
		g.log.Error("watch the GeoIP database", "err", err)
	}
	g.mu.Unlock()
	g.mu.Lock()
	g.serving = true
	g.mu.Unlock()
	var err error
	select {
	case <-ctx.Done():
		// Say why it stops: serve's context ends with the signal that
		// stopped it ("terminated signal received" for SIGTERM).
		g.log.Info("stopping: draining, then closing the listeners", "why", context.Cause(ctx).Error())
	case err = <-errc:
	}
	// Fail /readyz first, give the load balancer drain_delay to notice,
	// then stop accepting and let in-flight requests finish.
	g.mu.Lock()
	g.serving = false
	lc := g.cfg.Lifecycle
	g.mu.Unlock()
	g.proxy.Drain()
	if err == nil && lc.DrainDelay > 0 {
		g.log.Info("draining: /readyz fails until the listeners close", "drain_delay", lc.DrainDelay.Std().String())
		time.Sleep(lc.DrainDelay.Std())
	}
	timeout := lc.ShutdownTimeout.Std()
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The admin API and the data plane stop side by side, each within
	// shutdown_timeout: an admin client stalled in its request body must
	// neither keep the data listener open past drain_delay nor spend the
	// data plane's shutdown_timeout, after which its requests are cut.
	adminDone := make(chan struct{})
	go func() {
		defer close(adminDone)
		if adminSrv.Shutdown(sctx) != nil {
			_ = adminSrv.Close() // net/http leaves the stalled connections open
		}
	}()
	_ = g.proxy.Shutdown(sctx)
	<-adminDone
	<-rolloutsDone // its drivers write through the store: stop them before it closes
	// After the data plane: the last requests' exposures are flushed too.
	if err := g.exp.Close(); err != nil {
		g.log.Error("close the experiment store", "err", err)
	}
	g.closeNotify(sctx) // after the last request's breaker transition and SRM check
	g.mu.Lock()
	g.reg.Close()
	g.mu.Unlock()
	_ = g.health.Close()
	_ = g.store.Close()
	_ = g.tgt.Load().close()
	g.mirrors.Close()
	g.shutdownTracer()
	if cerr := g.closeAccessLog(); cerr != nil {
		g.log.Error("close the access log", "err", cerr)
	}
	return err
}

// watchStore applies changes that other writers (another gateway sharing the
// store) commit.
func (g *Gateway) watchStore(ctx context.Context) {
	ch := g.store.Changes()
	for {
		select {
		case <-ctx.Done():
			return
		case rev, ok := <-ch:
			if !ok {
				return
			}
			g.mu.Lock()
			pending, epoch := g.seedPending, g.epoch
			g.mu.Unlock()
			// A resync after an outage notifies even when nothing changed;
			// it is also when seeding that waited for the store can run.
			// A state of a new epoch is taken at any revision.
			if cur := g.router.Load(); cur != nil && rev <= cur.Revision && !pending && g.storeEpoch() == epoch {
				continue
			}
			if err := g.Apply(ctx); err != nil {
				g.log.Error("apply store change", "revision", rev, "err", err)
			}
		}
	}
}
