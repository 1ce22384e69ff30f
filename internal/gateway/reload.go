package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/graygate/graygate/internal/certs"
	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/logfile"
	"github.com/graygate/graygate/internal/proxy"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

// ReloadConfig validates a new config and, if it compiles with every stored
// rule, makes it current. A bad config keeps the old one serving.
//
// Every field either applies here or is named: config.Fields says which
// are which. The fields that need a restart (and data-plane options the
// proxy could not take live) are logged as "restart required: <path>" and
// listed in the status's restart_required and last_reload_result until
// the process restarts with them.
func (g *Gateway) ReloadConfig(ctx context.Context, cfg *config.Config) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reloadLocked(ctx, cfg)
}

// reloadLocked is ReloadConfig with g.mu held.
func (g *Gateway) reloadLocked(ctx context.Context, cfg *config.Config) error {
	oldCfg, oldReg, oldGen, oldBroken := g.cfg, g.reg, g.status.ConfigGen, g.status.BrokenRules
	oldTgt := g.tgt.Load()
	fail := func(err error) error {
		g.recordError(configReloadError(err))
		return err
	}
	if err := g.checkDiscovery(cfg); err != nil {
		return fail(err)
	}
	popts, err := g.proxyOptions(cfg)
	if err != nil {
		return fail(err)
	}
	rcvs, err := receivers(cfg)
	if err != nil {
		return fail(err)
	}
	if cfg != oldCfg {
		// Before anything that serves is touched: building the pools
		// sets the concurrency caps and health-check settings the
		// running pools share, and building the snapshot reconfigures
		// (and drops) breakers.
		if err := g.dryRun(ctx, cfg); err != nil {
			return fail(err)
		}
	}
	pools, err := g.pools(cfg)
	if err != nil {
		return fail(err)
	}
	newReg := g.reg.WithNamed(pools)
	// The section is rebuilt when it changed, and when what its sources
	// read besides it did (a JWT key rotated in place): a reload reads
	// those again, as it does upstream CA files and secrets named by
	// environment variables. A discovery update reads nothing again.
	if !reflect.DeepEqual(cfg.Targeting, oldCfg.Targeting) || (cfg != oldCfg && oldTgt.inputsChanged()) {
		t, err := newTargeting(cfg.Targeting, g.opts.Logger)
		if err != nil {
			newReg.Retire(oldReg)
			g.restorePools(oldCfg, oldReg)
			return fail(err)
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
	tlsChanged := g.certs != nil && tlsListener(cfg) && !reflect.DeepEqual(cfg.TLS, oldCfg.TLS)
	if err == nil && tlsChanged {
		// New handshakes use the new certificates; connections made
		// before keep theirs.
		if err = g.certs.Update(tlsSettings(cfg)); err != nil {
			err = fmt.Errorf("tls: %w", err)
		}
	}
	if err == nil {
		// The last step that can fail: the new path is opened before the
		// old file is let go.
		if err = g.openAccessLog(cfg); err != nil && tlsChanged {
			if rerr := g.certs.Update(tlsSettings(oldCfg)); rerr != nil {
				g.log.Error("restore the previous TLS settings", "err", rerr)
			}
		}
	}
	if err != nil {
		if t := g.tgt.Load(); t != oldTgt {
			g.tgt.Store(oldTgt)
			_ = t.close()
		}
		newReg.Retire(oldReg)
		g.restorePools(oldCfg, oldReg)
		g.cfg, g.reg, g.status.ConfigGen = oldCfg, oldReg, oldGen
		if _, rerr := g.build(ctx); rerr != nil { // restore the cache and status of the old config
			g.log.Error("rebuild with the previous config", "err", rerr)
		}
		return fail(err)
	}
	g.publish(snap)
	g.reconfigureNotify(cfg, rcvs)
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
	if cfg == oldCfg {
		return nil // the pools were rebuilt for discovery; nothing else changed
	}
	// The file that failed to load before has been replaced by one that
	// serves: its error is history.
	g.status.LastError, g.status.LastErrorAt = "", nil
	g.noteRulesNotApplied(ctx, cfg)
	g.admin.SetTokens(tokens(cfg, g.opts.AdminToken))
	g.syncWatchers(cfg)
	restart := config.RestartRequired(g.boot, cfg)
	// The access log file a reload turned on was not open yet when popts
	// were built.
	popts.AccessLog = g.accessLogFor(cfg)
	proxyRestart := g.applyProxy(popts)
	// The listening server's settings are judged by the data plane, by
	// their effective values: a default written out changes nothing.
	restart = slices.DeleteFunc(restart, func(p string) bool {
		return slices.Contains(listenerFields, p) && !slices.Contains(proxyRestart, p)
	})
	for _, p := range proxyRestart {
		if !slices.Contains(restart, p) {
			restart = append(restart, p)
		}
	}
	g.dropAccessLog(cfg) // the data plane no longer writes to it
	g.setRestartRequired(restart)
	for _, p := range restart {
		g.log.Warn("restart required: "+p, "field", p)
	}
	g.log.Info("config reloaded", "generation", g.status.ConfigGen, "result", g.status.LastResult,
		"changed", config.Changed(oldCfg, cfg))
	return nil
}

// dryRun reloads cfg in a dry run, changing nothing that serves: the stored
// rules and the config's own are compiled under it against pools built
// without health checks or concurrency caps, and the TLS files and the
// access log's new path are opened. Whatever it refuses, a reload would
// have refused after building the pools and the snapshot. The caller holds
// g.mu.
func (g *Gateway) dryRun(ctx context.Context, cfg *config.Config) error {
	pools, err := cfg.Pools(nil, g.discovered)
	if err != nil {
		return err
	}
	reg := upstream.NewRegistry(pools)
	st, err := g.load(ctx)
	if err != nil {
		return err
	}
	in, broken, err := g.assemble(cfg, reg, st, false)
	if err != nil {
		return err
	}
	msgs := make(map[string]string, len(broken))
	for k, e := range broken {
		msgs[k] = e.Error()
	}
	if err := newlyBroken(g.status.BrokenRules, msgs); err != nil {
		return err
	}
	if _, err := router.Build(in); err != nil {
		return err
	}
	if _, err := g.seedKeys(ctx, cfg, reg); err != nil {
		return err
	}
	if g.certs != nil && tlsListener(cfg) && !reflect.DeepEqual(cfg.TLS, g.cfg.TLS) {
		if err := certs.Check(tlsSettings(cfg)); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	if g.opts.AccessLog == nil && cfg.AccessLog.Enabled && (g.alog == nil || g.alog.Path() != cfg.AccessLog.Path) {
		w, err := logfile.Open(cfg.AccessLog.Path, logfile.Options{Stdout: g.opts.Stdout, Stderr: g.opts.Stderr})
		if err != nil {
			return fmt.Errorf("access_log.path: %w", err)
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("access_log.path: %w", err)
		}
	}
	return nil
}

// restorePools puts back what building a refused config's pools changed
// in the state the running pools share: the concurrency caps of their
// gates and the settings of their health checks (the pools built last
// set them). Pools of the running config are built again and closed at
// once. The caller holds g.mu.
func (g *Gateway) restorePools(running *config.Config, reg *upstream.Registry) {
	pools, err := g.pools(running)
	if err != nil {
		g.log.Error("restore the running upstreams' settings", "err", err)
		return
	}
	reg.WithNamed(pools).Retire(reg)
}

// ReloadConfigFile loads a config with load and makes it current; a config
// that does not load or compile keeps the old one serving, and the error
// shows in the status.
func (g *Gateway) ReloadConfigFile(ctx context.Context, load func() (*config.Config, error)) error {
	cfg, err := load()
	if err != nil {
		g.mu.Lock()
		g.recordError(configReloadError(err))
		g.mu.Unlock()
		return err
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

// setRestartRequired records the fields whose running value differs from
// the config, and says so in the reload result. The caller holds g.mu.
func (g *Gateway) setRestartRequired(paths []string) {
	slices.Sort(paths)
	g.status.RestartRequired = append([]string{}, paths...)
	g.status.LastResult = g.result(g.lastBuild)
}

// result is a build's result ("ok", "partial") followed by a
// "restart required: <path>" for every field that waits for a restart.
// The caller holds g.mu.
func (g *Gateway) result(build string) string {
	var b strings.Builder
	b.WriteString(build)
	for _, p := range g.status.RestartRequired {
		b.WriteString("; restart required: ")
		b.WriteString(p)
	}
	return b.String()
}

// proxyOptions builds the data plane's options from cfg: timeouts, header
// limits, trusted proxies, the access log, and the gateway's mirror set
// and tracer.
func (g *Gateway) proxyOptions(cfg *config.Config) (proxy.Options, error) {
	var trusted []netip.Prefix
	for i, p := range cfg.TrustedProxies {
		pr, err := config.ParsePrefix(p)
		if err != nil {
			return proxy.Options{}, fmt.Errorf("trusted_proxies[%d]: %w", i, err)
		}
		trusted = append(trusted, pr)
	}
	o := proxy.Options{
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
		MaxClientConns:        cfg.Proxy.MaxClientConnections,
		MaxConnsPerHost:       cfg.Proxy.MaxConnsPerHost,

		AllowUnderscoresInHeaders: cfg.Proxy.AllowUnderscoresInHeaders,
		NoVia:                     cfg.Proxy.Via != nil && !*cfg.Proxy.Via,

		OnDone: g.onDone,
		// Both live as long as the gateway: the mirrors follow every
		// snapshot (syncMirrors), the tracer needs a restart to change.
		Mirrors: g.mirrors,
		Tracer:  g.tracer,
	}
	if g.fakeClock {
		// Left unset, the proxy knows it runs on the real clock and
		// reuses the request's start time for its network deadlines.
		o.Now = g.opts.Now
	}
	o.AccessLog = g.accessLogFor(cfg)
	return o, nil
}

// listenerFields are the config fields of the listening server itself,
// which proxy.Reconfigure keeps at their running values and names.
var listenerFields = []string{"proxy.max_header_bytes"}

// applyProxy hands the data plane the options a reloaded config asks for
// (everything under proxy:, trusted_proxies and access_log.enabled)
// through proxy.Reconfigure, and returns the config fields it could not
// apply live (those of the listening server itself), which keep their
// running values. The caller holds g.mu.
func (g *Gateway) applyProxy(opts proxy.Options) []string {
	restart := g.proxy.Reconfigure(opts)
	g.popts = opts
	return restart
}

// tlsListener reports whether cfg has a TLS listener. A config without
// one leaves the running listener's settings as they are: tls_listen is
// named as waiting for a restart, which closes the listener.
func tlsListener(cfg *config.Config) bool { return cfg.TLSListen != "" }

// onDone is the data plane's OnDone: every finished request feeds the
// metrics, the live traffic windows, the rollouts' analysis and the
// experiments.
func (g *Gateway) onDone(done *proxy.Done) {
	d := done.Decision
	g.metrics.Observe(d, done.Status, done.Elapsed)
	if done.Refused != "" {
		g.metrics.Refused(d.Route, done.Refused)
	}
	// A transport failure arrives as the 502/503/504 the proxy answered.
	g.traffic.Record(d.Rule, d.Group, done.Status, false, done.Elapsed)
	g.rollouts.Record(d, done.Status, done.Elapsed)
	// Only live traffic reaches OnDone: explain and dry runs expose nobody.
	g.exp.Observe(d, done.Status, done.Method, done.Path, done.Reported, done.Start)
}
