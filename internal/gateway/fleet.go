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
	"github.com/graygate/graygate/internal/rollout"
	"github.com/graygate/graygate/internal/store/etcdstore"
)

// syncer is a store shared by a fleet (etcd): it can be out of sync.
type syncer interface {
	Synced() bool
	Stale() bool
	LastSync() time.Time
	WatchRestarts() int64
	PropagationLag() time.Duration
}

// StoreSync is the fleet part of the status document.
type StoreSync struct {
	Synced           bool       `json:"synced"`
	Stale            bool       `json:"stale"`
	LastSync         *time.Time `json:"last_sync,omitempty"`
	WatchRestarts    int64      `json:"watch_restarts"`
	PropagationLagMs float64    `json:"propagation_lag_ms"`
}

func (g *Gateway) storeSync() *StoreSync {
	s, ok := g.store.(syncer)
	if !ok {
		return nil
	}
	out := &StoreSync{Synced: s.Synced(), Stale: s.Stale(), WatchRestarts: s.WatchRestarts(),
		PropagationLagMs: float64(s.PropagationLag().Microseconds()) / 1000}
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
		Stale:  func() bool { return s.Stale() },
		WatchRestarts: func() float64 {
			return float64(s.WatchRestarts())
		},
		PropagationLag: func() float64 { return s.PropagationLag().Seconds() },
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

// discover watches the etcd registry for every service an upstream
// discovers, and rebuilds the pools when an instance list changes.
func (g *Gateway) discover(ctx context.Context) {
	es, ok := g.store.(*etcdstore.Store)
	if !ok {
		return
	}
	g.mu.Lock()
	services := map[string]bool{}
	for _, u := range g.cfg.Upstreams {
		if u.Discover != "" {
			services[u.Discover] = true
		}
	}
	g.mu.Unlock()
	for svc := range services {
		go func() {
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
		}()
	}
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
	if g.discovered == nil {
		g.discovered = map[string][]config.Instance{}
	}
	g.discovered[service] = ins
	cfg := g.cfg
	g.mu.Unlock()
	g.log.Info("registered instances changed", "service", service, "instances", len(ins))
	if err := g.ReloadConfig(ctx, cfg); err != nil {
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
	e, err := rollout.New(opts)
	if err != nil {
		return err
	}
	g.rollouts = e
	return nil
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
