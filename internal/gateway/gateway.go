// Package gateway assembles a running graygate: it opens the store, builds
// snapshots from the config and the stored rules, and serves the data plane
// and the admin API. It owns the one writer that publishes snapshots, so that
// admin writes, store watches and config reloads never race each other.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/internal/admin"
	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/experiment"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/metrics"
	"github.com/graygate/graygate/internal/proxy"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
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
	// AccessLog receives the JSON access log when Config.AccessLog.Enabled.
	AccessLog io.Writer
	Now       func() time.Time
	// Version is the build's version, shown in the status.
	Version string
	// OnSRM, when set, is called when an experiment's split turns
	// mismatched (see experiment.Options.OnSRM), for notifications.
	OnSRM func(experiment string, p float64)
}

// Gateway is one running graygate process's worth of parts.
type Gateway struct {
	opts     Options
	log      *slog.Logger
	store    store.Store
	router   *router.Router
	proxy    *proxy.Proxy
	admin    *admin.Server
	metrics  *metrics.Metrics
	breakers *breaker.Set
	limits   *limit.Set
	traffic  *traffic.Set // live per-rule, per-group windows for /api/v1/stats
	exp      *experiment.Recorder
	health   *upstream.Health
	// discovered holds instances found in the etcd registry, by service.
	discovered map[string][]config.Instance
	tgt        atomic.Pointer[targeting]
	serveCtx   context.Context // set by Serve, for watches started on reload

	mu      sync.Mutex // the one writer: guards cfg, reg, cache and status
	cfg     *config.Config
	reg     *upstream.Registry
	cache   map[string]cached
	status  Status
	serving bool
}

type cached struct {
	version int64
	gen     int
	rule    *rule.Compiled
	err     error
}

// Status is the document GET /api/v1/status returns.
type Status struct {
	Revision    int64              `json:"revision"`
	Rules       int                `json:"rules"`
	RolledBack  bool               `json:"rolled_back"`
	StoreKind   string             `json:"store"`
	LastReload  time.Time          `json:"last_reload"`
	LastResult  string             `json:"last_reload_result"`
	LastError   string             `json:"last_error,omitempty"`
	LastErrorAt *time.Time         `json:"last_error_at,omitempty"`
	BrokenRules map[string]string  `json:"broken_rules,omitempty"`
	Breakers    []breaker.Snapshot `json:"breakers"`
	Stale       bool               `json:"stale"`
	Sync        *StoreSync         `json:"store_sync,omitempty"`
	ConfigGen   int                `json:"config_generation"`
	StartedAt   time.Time          `json:"started_at"`
	Version     string             `json:"version,omitempty"`
	UptimeS     float64            `json:"uptime_s"`
}

// New opens the store, seeds it with the config's rules and builds the first
// snapshot. A config that does not compile is an error; a stored rule that
// no longer compiles is disabled and reported in the status.
func New(opts Options) (*Gateway, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cfg := opts.Config
	g := &Gateway{opts: opts, log: opts.Logger.With("component", "gateway"), cfg: cfg, cache: map[string]cached{}, metrics: metrics.New()}
	g.status.StartedAt = opts.Now()
	g.breakers = breaker.NewSet(breaker.SetOptions{Now: opts.Now, OnTransition: g.breakerTransition})
	g.limits = limit.NewSet(opts.Now)
	g.status.Version = opts.Version
	tr, err := traffic.New(traffic.Options{Now: opts.Now})
	if err != nil {
		return nil, err
	}
	g.traffic = tr
	g.health = upstream.NewHealth(upstream.HealthOptions{Now: opts.Now, Logger: opts.Logger})
	pools, err := g.pools(cfg)
	if err != nil {
		_ = g.health.Close()
		return nil, err
	}
	g.reg = upstream.NewRegistry(pools)
	tgt, err := newTargeting(cfg.Targeting, opts.Logger)
	if err != nil {
		g.reg.Close()
		_ = g.health.Close()
		return nil, err
	}
	g.tgt.Store(tgt)
	built := false
	defer func() {
		if !built { // release what New made before it failed
			g.reg.Close()
			_ = g.health.Close()
			_ = tgt.close()
		}
	}()
	g.metrics.TagStore(func() metrics.TagStats {
		s := g.tgt.Load().redisStats()
		return metrics.TagStats{Hits: s.Hits, Misses: s.Misses, Unknown: s.Unknown, Errors: s.Errors, Rejected: s.Rejected}
	})
	st := opts.Store
	if st == nil {
		fs, err := store.OpenFile(cfg.DataDir, store.FileOptions{HistoryLimit: cfg.Store.HistoryLimit, Logger: opts.Logger})
		if err != nil {
			return nil, fmt.Errorf("open store in %s: %w", cfg.DataDir, err)
		}
		st = fs
	}
	g.store = st
	g.status.StoreKind = st.Kind()
	if err := g.checkDiscovery(cfg); err != nil {
		_ = st.Close()
		return nil, err
	}
	g.exportStoreMetrics()
	g.metrics.Pools(func() []metrics.PoolStats {
		g.mu.Lock()
		stats := g.reg.Stats()
		g.mu.Unlock()
		out := make([]metrics.PoolStats, 0, len(stats))
		for _, p := range stats {
			out = append(out, metrics.PoolStats{Name: p.Name, Size: p.Size, Healthy: p.Healthy, Ejected: p.Ejected, InFlight: p.InFlight})
		}
		return out
	}, func() map[string]uint64 {
		out := map[string]uint64{}
		for _, h := range g.health.Snapshot() {
			out[h.Addr] = h.Ejections
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
	g.router = router.New(snap)

	popts, err := proxyOptions(cfg, opts.AccessLog, opts.Now)
	if err != nil {
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
		Gateway:       gatewayName(cfg),
		OnSRM:         opts.OnSRM,
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
	popts.OnDone = func(done *proxy.Done) {
		d := done.Decision
		g.metrics.Observe(d, done.Status, done.Elapsed)
		// A transport failure arrives as the 502/503/504 the proxy answered.
		g.traffic.Record(d.Rule, d.Group, done.Status, false, done.Elapsed)
		// Only live traffic reaches OnDone: explain and dry runs expose nobody.
		g.exp.Observe(d, done.Status, done.Method, done.Path, done.Reported, done.Start)
	}
	g.proxy = proxy.New(popts, g.router, opts.Logger)
	g.metrics.ProtocolViolations(proxy.ViolationReasons[:], func() []uint64 {
		v := g.proxy.ProtocolViolations()
		return v[:]
	})
	g.admin = admin.New(admin.Options{
		Store:       st,
		Router:      g.router,
		View:        g.proxy.View,
		Compile:     g.compile,
		Apply:       g.Apply,
		Status:      func() any { return g.Status() },
		Ready:       g.ready,
		Metrics:     g.metrics.Handler(),
		Traffic:     g.traffic,
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

// gatewayName names this gateway in exposure log lines: the config's
// experiments.gateway, or the host name and the data-plane port.
func gatewayName(cfg *config.Config) string {
	if cfg.Experiments.Gateway != "" {
		return cfg.Experiments.Gateway
	}
	host, _ := os.Hostname()
	if _, port, err := net.SplitHostPort(cfg.Listen); err == nil && port != "" {
		return net.JoinHostPort(host, port)
	}
	return host
}

// freeze is experiments.srm_action: freeze: the one-click rollback of the
// rule, recorded in its history with the reason, then applied.
func (g *Gateway) freeze(ctx context.Context, key, reason string) error {
	if _, err := g.store.SetRollback(ctx, key, true, store.Meta{By: "srm", Reason: reason}); err != nil {
		return fmt.Errorf("roll back rule %q: %w", key, err)
	}
	return g.Apply(ctx)
}

// publish makes snap serve, with its experiments. The experiments go
// first, so that no request decided by snap finds its rule unknown to
// them. The caller holds g.mu.
func (g *Gateway) publish(snap *router.Snapshot) {
	g.exp.SetCatalog(experiment.NewCatalog(snap, experimentSettings(g.cfg)))
	g.router.Store(snap)
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

func proxyOptions(cfg *config.Config, accessLog io.Writer, now func() time.Time) (proxy.Options, error) {
	var trusted []netip.Prefix
	for _, p := range cfg.TrustedProxies {
		pr, err := config.ParsePrefix(p)
		if err != nil {
			return proxy.Options{}, err
		}
		trusted = append(trusted, pr)
	}
	o := proxy.Options{
		Now:                   now,
		TrustedProxies:        trusted,
		DialTimeout:           cfg.Proxy.DialTimeout.Std(),
		ResponseHeaderTimeout: cfg.Proxy.ResponseHeaderTimeout.Std(),
		IdleConnTimeout:       cfg.Proxy.IdleTimeout.Std(),
		ReadHeaderTimeout:     cfg.Proxy.ReadHeaderTimeout.Std(),
		UpstreamReadTimeout:   config.StdOf(cfg.Proxy.ReadTimeout),
		UpstreamWriteTimeout:  config.StdOf(cfg.Proxy.WriteTimeout),
		ReadTimeout:           config.StdOf(cfg.Proxy.ClientReadTimeout),
		WriteTimeout:          config.StdOf(cfg.Proxy.ClientWriteTimeout),
		IdleTimeout:           config.StdOf(cfg.Proxy.ClientIdleTimeout),
		MaxHeaderBytes:        cfg.Proxy.MaxHeaderBytes,
		MaxConnsPerHost:       cfg.Proxy.MaxConnsPerHost,

		AllowUnderscoresInHeaders: cfg.Proxy.AllowUnderscoresInHeaders,
		NoVia:                     cfg.Proxy.Via != nil && !*cfg.Proxy.Via,
	}
	if cfg.AccessLog.Enabled {
		o.AccessLog = accessLog
	}
	return o, nil
}

// seed creates the config's rules that the store has never held. A rule
// that would overlap a serving rule (or an earlier rule of the file) in a
// layer is refused, so that the store never holds an overlap.
func (g *Gateway) seed(ctx context.Context, cfg *config.Config) error {
	others := g.servingRules()
	for i, raw := range cfg.Rules {
		r, err := rule.Decode(raw)
		var c *rule.Compiled
		if err == nil {
			c, err = g.compileWith(cfg, g.reg, r)
		}
		if err != nil {
			return fmt.Errorf("config rules[%d]: %w", i, err)
		}
		if _, err := g.store.History(ctx, r.Key); err == nil {
			continue // the store knows this key: API edits win over the file
		} else if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("seed rule %q: %w", r.Key, err)
		}
		if err := rule.LayerConflicts(c, others); err != nil {
			return fmt.Errorf("config rules[%d]: %w", i, err)
		}
		if _, err := g.store.Put(ctx, r.Key, raw, 0, store.Meta{By: "config", Reason: "seeded from the config file"}); err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("seed rule %q: %w", r.Key, err)
		}
		others = append(others, c)
	}
	return nil
}

func (g *Gateway) compileWith(cfg *config.Config, reg *upstream.Registry, r rule.Rule) (*rule.Compiled, error) {
	routes := map[string]bool{}
	for _, rt := range cfg.Routes {
		routes[rt.Name] = true
	}
	return rule.Compile(r, rule.Env{Resolve: reg.Resolve, HasRoute: func(n string) bool { return routes[n] }, TagTypes: cfg.Targeting.TagTypes})
}

// compile validates a rule against the current config and, for a rule in a
// layer, against the serving rules of its layer (for the admin API): an
// overlapping layer_range is a problem named by path that names the other
// rule.
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

// dropLayerConflicts is for the first snapshot, which has no older one to
// keep serving: of rules that overlap in a layer, the one stored earlier
// (lower revision) serves and the later one is disabled and reported, so
// that a store that somehow holds an overlap cannot keep the gateway from
// starting. Later snapshots refuse such a set instead (router.Build).
func dropLayerConflicts(rules []*rule.Compiled, revision map[string]int64, broken map[string]string) []*rule.Compiled {
	sorted := slices.Clone(rules)
	slices.SortFunc(sorted, func(a, b *rule.Compiled) int {
		return cmp.Or(cmp.Compare(revision[a.Key], revision[b.Key]), cmp.Compare(a.Key, b.Key))
	})
	var kept []*rule.Compiled
	for _, c := range sorted {
		if err := rule.LayerConflicts(c, kept); err != nil {
			broken[c.Key] = err.Error()
			continue
		}
		kept = append(kept, c)
	}
	return kept
}

// build compiles the current store state with the current config. The
// caller holds g.mu, or is New.
func (g *Gateway) build(ctx context.Context) (*router.Snapshot, error) {
	cfg := g.cfg
	st, err := g.store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	var rules []*rule.Compiled
	broken := map[string]string{}
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
		if !ok || c.version != e.Version || c.gen != g.status.ConfigGen {
			c = cached{version: e.Version, gen: g.status.ConfigGen}
			r, err := rule.Decode(e.Rule)
			if err == nil {
				c.rule, err = g.compileWith(cfg, g.reg, r)
			}
			c.err = err
			g.cache[e.Key] = c
		}
		if c.err != nil {
			broken[e.Key] = c.err.Error()
			continue
		}
		rules = append(rules, c.rule)
	}
	for k := range g.cache {
		if !seen[k] {
			delete(g.cache, k)
		}
	}
	if g.router == nil {
		rules = dropLayerConflicts(rules, revision, broken)
	}
	g.traffic.Retain(func(k string) bool { return seen[k] })
	breakers := map[string]*breaker.Breaker{}
	inUse := map[string]bool{}
	for _, r := range rules {
		if r.Type != rule.TypeGray {
			continue
		}
		key := breakerKey(r)
		b, err := g.breakers.Get(key, r.Source.Breaker.Over(cfg.Breaker))
		if err != nil {
			broken[r.Key] = err.Error()
			continue
		}
		breakers[r.Key], inUse[key] = b, true
	}
	for _, key := range g.breakers.Retain(func(k string) bool { return inUse[k] }) {
		rk, target, _ := strings.Cut(key, "|")
		g.metrics.ForgetBreaker(rk, target)
	}
	in := router.Input{
		Sources:       g.tgt.Load().src,
		Breakers:      breakers,
		Policy:        g.policy("", cfg.Limits),
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
		p, err := g.reg.Resolve(cfg.DefaultUpstream)
		if err != nil {
			return nil, fmt.Errorf("default_upstream: %w", err)
		}
		in.Default = p
	}
	for _, rt := range cfg.Routes {
		spec := router.RouteSpec{Name: rt.Name, Host: rt.Host, PathPrefix: rt.PathPrefix, UpstreamHost: !*cfg.PreserveHost,
			Policy: g.policy(rt.Name, rt.Limits.Over(cfg.Limits)), VersionHeader: string(rt.VersionHeader)}
		if rt.PreserveHost != nil {
			spec.UpstreamHost = !*rt.PreserveHost
		}
		if rt.Upstream != "" {
			p, err := g.reg.Resolve(rt.Upstream)
			if err != nil {
				return nil, fmt.Errorf("routes %q upstream: %w", rt.Name, err)
			}
			spec.Default = p
		}
		in.Routes = append(in.Routes, spec)
	}
	snap, err := router.Build(in)
	if err != nil {
		return nil, err
	}
	now := g.opts.Now()
	g.status.Revision, g.status.Rules, g.status.RolledBack = st.Revision, len(rules), st.RolledBack
	g.status.LastReload, g.status.LastResult = now, "ok"
	g.status.BrokenRules = nil
	if len(broken) > 0 {
		g.status.BrokenRules = broken
		g.status.LastResult = "partial"
		for k, e := range broken {
			g.log.Error("rule disabled: it no longer compiles", "rule", k, "err", e)
		}
	}
	g.metrics.Reloaded(g.status.LastResult, st.Revision)
	g.metrics.SetRollback(st.RolledBack, rolled)
	return snap, nil
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
// reloads.
func (g *Gateway) policy(route string, l config.Limits) *router.Policy {
	p := &router.Policy{UpstreamTimeout: l.Timeout.Std(), MaxBodyBytes: l.MaxBodyBytes, FallbackBodyBytes: l.FallbackBodyBytes}
	if p.FallbackBodyBytes == 0 {
		p.FallbackBodyBytes = router.DefaultFallbackBodyBytes
	}
	if l.RateLimit != nil {
		p.Limiter = g.limits.Limiter("route:"+route, *l.RateLimit)
	}
	return p
}

// breakerKey names a gray rule's breaker: rule and gray target, so that a
// rule pointed at a new gray target starts with a fresh breaker.
func breakerKey(r *rule.Compiled) string { return r.Key + "|" + r.Source.Targets.Gray }

// breakerTransition logs a breaker transition and counts it.
func (g *Gateway) breakerTransition(key string, from, to breaker.State, reason string) {
	rk, target, _ := strings.Cut(key, "|")
	level := slog.LevelInfo
	if to == breaker.Open {
		level = slog.LevelWarn
	}
	g.log.Log(context.Background(), level, "breaker "+to.String(), "rule", rk, "target", target, "from", from.String(), "to", to.String(), "reason", reason)
	g.metrics.BreakerTransition(rk, target, from.String(), to.String())
	state := metrics.BreakerClosed
	switch to {
	case breaker.Open:
		state = metrics.BreakerOpen
	case breaker.HalfOpen:
		state = metrics.BreakerHalfOpen
	}
	g.metrics.BreakerState(rk, target, state)
}

// Apply rebuilds the snapshot from the store and publishes it. It returns
// once the new snapshot serves.
func (g *Gateway) Apply(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	snap, err := g.build(ctx)
	if err != nil {
		g.recordError(err)
		return err
	}
	if cur := g.router.Load(); cur != nil && snap.Revision < cur.Revision {
		return nil // an older state than what serves: never go back
	}
	g.publish(snap)
	return nil
}

func (g *Gateway) recordError(err error) {
	g.metrics.Reloaded("error", 0)
	now := g.opts.Now()
	g.status.LastResult, g.status.LastError, g.status.LastErrorAt = "error", err.Error(), &now
	g.log.Error("reload failed; the previous rules keep serving", "err", err)
}

// ReloadConfig validates a new config and, if it compiles with every stored
// rule, makes it current. A bad config keeps the old one serving.
func (g *Gateway) ReloadConfig(ctx context.Context, cfg *config.Config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	oldCfg, oldReg, oldGen, oldBroken := g.cfg, g.reg, g.status.ConfigGen, g.status.BrokenRules
	oldTgt := g.tgt.Load()
	if err := g.checkDiscovery(cfg); err != nil {
		g.recordError(fmt.Errorf("config reload: %w", err))
		return err
	}
	pools, err := g.pools(cfg)
	if err != nil {
		g.recordError(fmt.Errorf("config reload: %w", err))
		return err
	}
	newReg := g.reg.WithNamed(pools)
	if !reflect.DeepEqual(cfg.Targeting, oldCfg.Targeting) {
		t, err := newTargeting(cfg.Targeting, g.opts.Logger)
		if err != nil {
			newReg.Retire(oldReg)
			g.recordError(fmt.Errorf("config reload: %w", err))
			return err
		}
		g.tgt.Store(t)
	}
	g.cfg, g.reg = cfg, newReg
	g.status.ConfigGen++
	snap, err := g.build(ctx)
	if err == nil {
		err = newlyBroken(oldBroken, g.status.BrokenRules)
	}
	if err == nil {
		if err = g.seed(ctx, cfg); err == nil {
			snap, err = g.build(ctx)
		}
	}
	if err != nil {
		if t := g.tgt.Load(); t != oldTgt {
			g.tgt.Store(oldTgt)
			_ = t.close()
		}
		newReg.Retire(oldReg)
		g.cfg, g.reg, g.status.ConfigGen = oldCfg, oldReg, oldGen
		if _, rerr := g.build(ctx); rerr != nil { // restore the cache and status of the old config
			g.log.Error("rebuild with the previous config", "err", rerr)
		}
		g.recordError(fmt.Errorf("config reload: %w", err))
		return err
	}
	g.publish(snap)
	oldReg.Retire(g.reg)
	if t := g.tgt.Load(); t != oldTgt {
		// Requests already past Decide may still read the old resolvers;
		// closing them makes such a request's tags unknown, never fails it.
		_ = oldTgt.close()
		if g.serveCtx != nil {
			if err := t.watch(g.serveCtx); err != nil {
				g.log.Error("watch the GeoIP database", "err", err)
			}
		}
	}
	g.log.Info("config reloaded", "generation", g.status.ConfigGen)
	return nil
}

// ReloadConfigFile loads a config with load and makes it current; a config
// that does not load or compile keeps the old one serving, and the error
// shows in the status.
func (g *Gateway) ReloadConfigFile(ctx context.Context, load func() (*config.Config, error)) error {
	cfg, err := load()
	if err != nil {
		g.mu.Lock()
		g.recordError(fmt.Errorf("config reload: %w", err))
		g.mu.Unlock()
		return err
	}
	g.mu.Lock()
	old := g.cfg
	g.mu.Unlock()
	if cfg.Listen != old.Listen || cfg.AdminListen != old.AdminListen || cfg.DataDir != old.DataDir {
		g.log.Warn("listen, admin_listen and data_dir changes take effect at the next restart",
			"listen", cfg.Listen, "admin_listen", cfg.AdminListen, "data_dir", cfg.DataDir)
	}
	if e, o := cfg.Experiments, old.Experiments; e.Store != o.Store || e.ExposureLog != o.ExposureLog || e.FlushInterval != o.FlushInterval ||
		e.MaxUnits != o.MaxUnits || e.BufferEvents != o.BufferEvents || e.Gateway != o.Gateway {
		g.log.Warn("experiments.store, exposure_log, flush_interval, max_units, buffer_events and gateway changes take effect at the next restart; conversion_window and srm_action apply now",
			"store_changed", e.Store != o.Store, "exposure_log", e.ExposureLog)
	}
	return g.ReloadConfig(ctx, cfg)
}

// newlyBroken refuses a config under which stored rules that compiled
// before no longer do: operators fix the config, not lose a rule.
func newlyBroken(before, after map[string]string) error {
	var errs []error
	for k, e := range after {
		if _, was := before[k]; !was {
			errs = append(errs, fmt.Errorf("rule %q would stop compiling: %s", k, e))
		}
	}
	return errors.Join(errs...)
}

// Status returns a copy of the status document.
func (g *Gateway) Status() Status {
	g.mu.Lock()
	st := g.status
	g.mu.Unlock()
	st.Breakers = g.breakers.Snapshots()
	st.UptimeS = g.opts.Now().Sub(st.StartedAt).Round(time.Second).Seconds()
	if st.Sync = g.storeSync(); st.Sync != nil {
		st.Stale = st.Sync.Stale || !st.Sync.Synced
	}
	return st
}

func (g *Gateway) ready() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.serving {
		return errors.New("not serving")
	}
	if s, ok := g.store.(syncer); ok && !s.Synced() {
		return errors.New("the rule store is not in sync with etcd; serving the last good rules")
	}
	return nil
}

// Router returns the router, for tests and explain.
func (g *Gateway) Router() *router.Router { return g.router }

// AdminHandler returns the admin API handler.
func (g *Gateway) AdminHandler() http.Handler { return g.admin }

// Serve serves the data plane on dataLn and the admin API on adminLn until
// ctx is done, then shuts both down gracefully.
func (g *Gateway) Serve(ctx context.Context, dataLn, adminLn net.Listener) error {
	adminSrv := &http.Server{Handler: g.admin, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- g.proxy.Serve(dataLn) }()
	go func() {
		if err := adminSrv.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			return
		}
		errc <- nil
	}()
	go g.watchStore(ctx)
	go g.discover(ctx)
	go g.traffic.Run(ctx)
	g.mu.Lock()
	g.serveCtx = ctx
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
	case err = <-errc:
	}
	// Fail /readyz first, give the load balancer drain_delay to notice,
	// then stop accepting and let in-flight requests finish.
	g.mu.Lock()
	g.serving = false
	lc := g.cfg.Lifecycle
	g.mu.Unlock()
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
	_ = adminSrv.Shutdown(sctx)
	_ = g.proxy.Shutdown(sctx)
	// After the data plane: the last requests' exposures are flushed too.
	if err := g.exp.Close(); err != nil {
		g.log.Error("close the experiment store", "err", err)
	}
	g.mu.Lock()
	g.reg.Close()
	g.mu.Unlock()
	_ = g.health.Close()
	_ = g.store.Close()
	_ = g.tgt.Load().close()
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
			if cur := g.router.Load(); cur != nil && rev <= cur.Revision {
				continue
			}
			if err := g.Apply(ctx); err != nil {
				g.log.Error("apply store change", "revision", rev, "err", err)
			}
		}
	}
}
