package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/metrics"
	"github.com/graygate/graygate/internal/notify"
	"github.com/graygate/graygate/internal/rollout"
	"github.com/graygate/graygate/internal/store/etcdstore"
)

// syncer is a store shared by a fleet (etcd): it can be out of sync, and
// even hold no state at all (etcd unreachable since start, no cache).
type syncer interface {
	Synced() bool
	Stale() bool
	LastSync() time.Time
	SyncSince() time.Time
	StateErr() error
	WatchRestarts() int64
	PropagationLag() time.Duration
	// HistoryResets is the store.State.Epoch of the store's newest state:
	// how often it found etcd's history replaced (a restore from backup).
	HistoryResets() int64
}

// storeEpoch is the epoch of the store's newest state (store.State.Epoch),
// 0 for a store that is not shared.
func (g *Gateway) storeEpoch() int64 {
	if s, ok := g.store.(syncer); ok {
		return s.HistoryResets()
	}
	return 0
}

// Store states in the status document.
const (
	// StoreOK is the file store's state: it is the source of truth.
	StoreOK = "ok"
	// StoreSynced means the gateway serves what etcd holds.
	StoreSynced = "synced"
	// StoreStale means etcd is unreachable (or the watch is behind): the
	// gateway serves the last state it read, from memory or from its
	// cache file, stays ready, and refuses writes with 503.
	StoreStale = "stale"
	// StoreUnavailable means there is no state to serve: etcd has been
	// unreachable since start and there was no cache. /readyz fails.
	StoreUnavailable = "unavailable"
)

// StoreStatus is the "store" part of the status document.
type StoreStatus struct {
	// Kind is "file" or "etcd".
	Kind string `json:"kind"`
	// State is StoreOK, StoreSynced, StoreStale or StoreUnavailable.
	State string `json:"state"`
	// Since is when the state began (etcd).
	Since *time.Time `json:"since,omitempty"`
	// Revision is the store revision of the rules being served.
	Revision int64 `json:"revision"`
	// Reason says why the state is unavailable.
	Reason string `json:"reason,omitempty"`
}

// storeStatus describes the store; revision is what serves.
func (g *Gateway) storeStatus(revision int64) StoreStatus {
	out := StoreStatus{Kind: g.store.Kind(), State: StoreOK, Revision: revision}
	s, ok := g.store.(syncer)
	if !ok {
		return out
	}
	switch err := s.StateErr(); {
	case err != nil:
		out.State, out.Reason = StoreUnavailable, err.Error()
	case s.Synced() && !s.Stale():
		out.State = StoreSynced
	default:
		out.State = StoreStale
	}
	if t := s.SyncSince(); !t.IsZero() {
		out.Since = &t
	}
	return out
}

// StoreSync is the fleet part of the status document.
type StoreSync struct {
	Synced           bool       `json:"synced"`
	Stale            bool       `json:"stale"`
	LastSync         *time.Time `json:"last_sync,omitempty"`
	WatchRestarts    int64      `json:"watch_restarts"`
	PropagationLagMs float64    `json:"propagation_lag_ms"`
	// HistoryResets counts the times etcd's history was found replaced
	// (etcd restored from a backup) and the gateway went over to it.
	HistoryResets int64 `json:"history_resets"`
}

func (g *Gateway) storeSync() *StoreSync {
	s, ok := g.store.(syncer)
	if !ok {
		return nil
	}
	out := &StoreSync{Synced: s.Synced(), Stale: s.Stale(), WatchRestarts: s.WatchRestarts(),
		PropagationLagMs: float64(s.PropagationLag().Microseconds()) / 1000, HistoryResets: s.HistoryResets()}
	if t := s.LastSync(); !t.IsZero() {
		out.LastSync = &t
	}
	return out
}

func (g *Gateway) exportStoreMetrics() {
	s, ok := g.store.(syncer)
	if !ok {
		return
	}
	g.metrics.Store(metrics.StoreFuncs{
		Synced: func() bool { return s.Synced() },
		// Stale is what the status calls stale: serving a state etcd
		// has not confirmed (an outage, a cache, or no state at all).
		Stale: func() bool { return !s.Synced() || s.Stale() },
		WatchRestarts: func() float64 {
			return float64(s.WatchRestarts())
		},
		PropagationLag: func() float64 { return s.PropagationLag().Seconds() },
		HistoryResets:  func() float64 { return float64(s.HistoryResets()) },
	})
}

// checkDiscovery refuses upstreams that discover instances without a store
// that can tell them.
func (g *Gateway) checkDiscovery(cfg *config.Config) error {
	if _, ok := g.store.(*etcdstore.Store); ok {
		return nil
	}
	var errs []error
	for name, u := range cfg.Upstreams {
		if u.Discover != "" {
			errs = append(errs, fmt.Errorf("upstreams.%s.discover: service discovery needs the etcd store (--store etcd://HOST:PORT/PREFIX)", name))
		}
	}
	return errors.Join(errs...)
}

// syncWatchers makes the registry watches match cfg: every service an
// upstream discovers is watched, and the watch of a service no upstream
// names any more is stopped and its instances forgotten. It does nothing
// before Serve (which calls it) or without the etcd store. The caller
// holds g.mu.
func (g *Gateway) syncWatchers(cfg *config.Config) {
	es, ok := g.store.(*etcdstore.Store)
	if !ok || g.serveCtx == nil {
		return
	}
	want := map[string]bool{}
	for _, u := range cfg.Upstreams {
		if u.Discover != "" {
			want[u.Discover] = true
		}
	}
	for svc, stop := range g.watchers {
		if !want[svc] {
			stop()
			delete(g.watchers, svc)
			delete(g.discovered, svc)
			g.log.Info("stopped watching registered instances", "service", svc)
		}
	}
	if g.watchers == nil {
		g.watchers = map[string]context.CancelFunc{}
	}
	for svc := range want {
		if _, ok := g.watchers[svc]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(g.serveCtx)
		g.watchers[svc] = cancel
		go g.watchService(ctx, es, svc)
	}
}

// watchService follows one service's registered instances until ctx ends,
// reconnecting with a pause when etcd is unreachable.
func (g *Gateway) watchService(ctx context.Context, es *etcdstore.Store, svc string) {
	for ctx.Err() == nil {
		cli := es.Client()
		if cli == nil { // etcd was down at start; wait for it
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		err := etcdstore.WatchInstances(ctx, cli, es.Prefix(), svc, func(service string, list []etcdstore.Instance) {
			g.setDiscovered(ctx, service, list)
		})
		if err != nil && ctx.Err() == nil {
			g.log.Error("watch registered instances", "service", svc, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// watchedServices returns the services being watched, sorted, for tests
// and the status.
func (g *Gateway) watchedServices() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.watchers))
	for svc := range g.watchers {
		out = append(out, svc)
	}
	slices.Sort(out)
	return out
}

// setDiscovered records a service's instances and rebuilds the pools that
// use them, keeping everything else of the current config.
func (g *Gateway) setDiscovered(ctx context.Context, service string, list []etcdstore.Instance) {
	ins := make([]config.Instance, 0, len(list))
	for _, in := range list {
		ins = append(ins, config.Instance{Addr: in.Addr, Weight: in.Weight, Metadata: in.Metadata})
	}
	slices.SortFunc(ins, func(a, b config.Instance) int {
		if a.Addr < b.Addr {
			return -1
		}
		if a.Addr > b.Addr {
			return 1
		}
		return 0
	})
	g.mu.Lock()
	if ctx.Err() != nil {
		// The watch was stopped (its service is no longer named) while
		// this list was on its way; syncWatchers cancels under g.mu.
		g.mu.Unlock()
		return
	}
	if g.discovered == nil {
		g.discovered = map[string][]config.Instance{}
	}
	g.discovered[service] = ins
	g.log.Info("registered instances changed", "service", service, "instances", len(ins))
	// The current config, under the same lock: a reload that ran since
	// the list arrived is kept, never reverted.
	err := g.reloadLocked(ctx, g.cfg)
	g.mu.Unlock()
	if err != nil {
		g.log.Error("rebuild pools after discovery", "service", service, "err", err)
	}
}

// newRollouts makes the engine that drives the rules' rollout plans: on
// the etcd store with an election per rollout and the fleet's summed
// counters, otherwise from this gateway's own.
func (g *Gateway) newRollouts() error {
	opts := rollout.Options{
		Store: g.store,
		Apply: g.Apply,
		Breakers: func(ruleKey, target string) (breaker.Snapshot, bool) {
			b, ok := g.breakers.Lookup(ruleKey + "|" + target)
			if !ok {
				return breaker.Snapshot{}, false
			}
			return b.Snapshot(), true
		},
		Notifier: g.opts.RolloutNotifier,
		Logger:   g.opts.Logger,
		Registry: g.metrics.Registry(),
	}
	if es, ok := g.store.(*etcdstore.Store); ok {
		fo := g.opts.RolloutFleet
		fo.Client, fo.Prefix, fo.Logger = es.Client, es.Prefix(), g.opts.Logger
		if fo.ID == "" {
			fo.ID = gatewayID(g.opts.Random)
		}
		f, err := rollout.NewFleet(fo)
		if err != nil {
			return err
		}
		opts.Fleet = f
	}
	if opts.Notifier == nil {
		opts.Notifier = rolloutNotifier{g}
	}
	e, err := rollout.New(opts)
	if err != nil {
		return err
	}
	g.rollouts = e
	return nil
}

// rolloutNotifier sends the rollout engine's events to the configured
// webhooks.
type rolloutNotifier struct{ g *Gateway }

func (n rolloutNotifier) Notify(event, rule, text string, fields map[string]any) {
	n.g.Notify(notify.Event{Type: event, Rule: rule, Text: text, Fields: fields})
}

// gatewayID names this process in a fleet: host, pid and a random
// suffix, so that a restarted gateway is a new campaigner.
func gatewayID(random io.Reader) string {
	if random == nil {
		random = rand.Reader
	}
	var b [4]byte
	_, _ = io.ReadFull(random, b[:])
	host, _ := os.Hostname()
	host = strings.ReplaceAll(cmp.Or(host, "gateway"), "/", "_")
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}
