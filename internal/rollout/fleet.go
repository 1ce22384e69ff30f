package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/traffic"
)

// Defaults of FleetOptions.
const (
	DefaultLeaseTTL = 5 * time.Second
	DefaultPublish  = 2 * time.Second
)

// FleetOptions configure NewFleet.
type FleetOptions struct {
	// Client returns the etcd client, or nil while etcd could not be
	// reached (etcdstore.Store.Client).
	Client func() *clientv3.Client
	// Prefix is the store's key prefix, "/PREFIX/" (etcdstore.Store.Prefix).
	// The fleet's keys live under Prefix + "fleet/rollout/", which sorts
	// before the store's history/, meta/ and rules/ and so stays out of
	// its watch.
	Prefix string
	// ID names this gateway in elections and published keys; no "/".
	ID string
	// LeaseTTL is the lifetime of the gateway's etcd session (default 5s,
	// whole seconds): a driver that dies holds its rollouts at most this
	// long before another gateway takes over.
	LeaseTTL time.Duration
	// Publish is how often the gateway publishes its counters of the
	// rules under rollout (default 2s).
	Publish time.Duration
	Logger  *slog.Logger
}

// Fleet lets the gateways sharing an etcd prefix drive each rollout
// exactly once and measure it over all of them:
//
//   - every gateway campaigns for every active rollout in an election of
//     go.etcd.io/etcd/client/v3/concurrency (fleet/rollout/leader/<rule>),
//     all under one session lease of LeaseTTL; the winner drives, the
//     others follow its writes through the store. When the driver dies
//     its lease expires and the next campaigner wins and resumes from
//     the stored status (a graceful stop revokes the lease at once);
//   - every gateway publishes its counters of each active rollout's rule
//     every Publish, as a traffic.Export of the window the rule's
//     analyses need, with its breaker state, under its lease
//     (fleet/rollout/traffic/<rule>/<id>); the driver sums them with
//     traffic.Merge, so built-in metrics cover the whole fleet;
//   - the driver puts what it measured since its last write under
//     fleet/rollout/live/<rule>, so GET .../rollout on any gateway shows
//     the same measurements.
//
// It is safe for concurrent use.
type Fleet struct {
	opts FleetOptions
	log  *slog.Logger

	mu   sync.Mutex
	ctx  context.Context // run's; the session lives as long as it
	sess *concurrency.Session

	cacheMu sync.Mutex
	cache   map[string]cachedDocs
}

type cachedDocs struct {
	at   time.Time
	docs []published
}

// published is one gateway's counters of one rule under rollout.
type published struct {
	Gateway string         `json:"gateway"`
	At      time.Time      `json:"at"`
	Traffic traffic.Export `json:"traffic"`
	Breaker BreakerState   `json:"breaker"`
}

// NewFleet returns a Fleet; the engine runs it.
func NewFleet(opts FleetOptions) (*Fleet, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("rollout fleet: an etcd client is required")
	case opts.ID == "" || strings.Contains(opts.ID, "/"):
		return nil, fmt.Errorf("rollout fleet: the gateway id must be non-empty and hold no \"/\", got %q", opts.ID)
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.Publish <= 0 {
		opts.Publish = DefaultPublish
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Prefix = strings.TrimRight(opts.Prefix, "/") + "/"
	return &Fleet{opts: opts, log: opts.Logger.With("component", "rollout-fleet"), cache: map[string]cachedDocs{}}, nil
}

func (f *Fleet) key(kind, ruleKey string) string {
	return f.opts.Prefix + "fleet/rollout/" + kind + "/" + ruleKey
}

// start gives the sessions their context: they live until it ends.
func (f *Fleet) start(ctx context.Context) {
	f.mu.Lock()
	f.ctx = ctx
	f.mu.Unlock()
}

// run waits for ctx to end, then closes the session, which revokes the
// lease: a gateway that stops hands its rollouts over at once.
func (f *Fleet) run(ctx context.Context) {
	<-ctx.Done()
	f.mu.Lock()
	s := f.sess
	f.sess = nil
	f.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// session returns the live session, making a new one after the last
// expired.
func (f *Fleet) session() (*concurrency.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sess != nil {
		select {
		case <-f.sess.Done():
			f.sess = nil
		default:
			return f.sess, nil
		}
	}
	if f.ctx == nil || f.ctx.Err() != nil {
		return nil, errors.New("rollout fleet: not running")
	}
	cli := f.opts.Client()
	if cli == nil {
		return nil, errors.New("rollout fleet: etcd is not reachable")
	}
	ttl := max(int(f.opts.LeaseTTL/time.Second), 1)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(f.ctx))
	if err != nil {
		return nil, fmt.Errorf("rollout fleet: etcd session: %w", err)
	}
	f.sess = s
	return s, nil
}

// lead blocks until this gateway wins key's election or ctx ends. lost
// is closed when the session (and so the leadership) is lost; release
// resigns.
func (f *Fleet) lead(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	s, err := f.session()
	if err != nil {
		return nil, nil, err
	}
	el := concurrency.NewElection(s, f.key("leader", key))
	if err := el.Campaign(ctx, f.opts.ID); err != nil {
		return nil, nil, fmt.Errorf("campaign for the rollout of %q: %w", key, err)
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := el.Resign(rctx); err != nil {
			f.log.Warn("resign the rollout election", "rule", key, "err", err)
		}
	}
	return s.Done(), release, nil
}

// Leader returns the id of the gateway that drives key's rollout.
func (f *Fleet) Leader(ctx context.Context, key string) (string, error) {
	s, err := f.session()
	if err != nil {
		return "", err
	}
	resp, err := concurrency.NewElection(s, f.key("leader", key)).Leader(ctx)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", concurrency.ErrElectionNoLeader
	}
	return string(resp.Kvs[0].Value), nil
}

func (f *Fleet) publishDoc(ctx context.Context, key string, p published) error {
	s, err := f.session()
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = s.Client().Put(ctx, f.key("traffic", key)+"/"+f.opts.ID, string(b), clientv3.WithLease(s.Lease()))
	return err
}

func (f *Fleet) unpublish(ctx context.Context, key string) error {
	cli := f.opts.Client()
	if cli == nil {
		return errors.New("etcd is not reachable")
	}
	_, err := cli.Delete(ctx, f.key("traffic", key)+"/"+f.opts.ID)
	return err
}

// docs returns every gateway's published counters of key, at most maxAge
// old (0: fresh).
func (f *Fleet) docs(ctx context.Context, key string, now time.Time, maxAge time.Duration) ([]published, error) {
	if maxAge > 0 {
		f.cacheMu.Lock()
		c, ok := f.cache[key]
		f.cacheMu.Unlock()
		if ok && now.Sub(c.at) < maxAge {
			return c.docs, nil
		}
	}
	cli := f.opts.Client()
	if cli == nil {
		return nil, errors.New("etcd is not reachable")
	}
	resp, err := cli.Get(ctx, f.key("traffic", key)+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the fleet's counters of %q: %w", key, err)
	}
	out := make([]published, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p published
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			f.log.Warn("a gateway's published counters do not decode; left out", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, p)
	}
	f.cacheMu.Lock()
	f.cache[key] = cachedDocs{at: now, docs: out}
	f.cacheMu.Unlock()
	return out, nil
}

func (f *Fleet) putLive(ctx context.Context, key string, lv liveView) error {
	s, err := f.session()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(lv)
	_, err = s.Client().Put(ctx, f.key("live", key), string(b), clientv3.WithLease(s.Lease()))
	return err
}

func (f *Fleet) getLive(ctx context.Context, key string) (liveView, bool) {
	cli := f.opts.Client()
	if cli == nil {
		return liveView{}, false
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.Get(gctx, f.key("live", key))
	if err != nil || len(resp.Kvs) == 0 {
		return liveView{}, false
	}
	var lv liveView
	if json.Unmarshal(resp.Kvs[0].Value, &lv) != nil {
		return liveView{}, false
	}
	return lv, true
}

// publishWindow is how much of a rule's traffic a gateway publishes:
// the longest interval of its analyses that use built-in metrics, plus
// what publishing every period may leave out at either end.
func (f *Fleet) publishWindow(r *rule.Rule) time.Duration {
	var w time.Duration
	for _, a := range r.Rollout.Analyses {
		for _, c := range a.Checks {
			if c.Metric != "" {
				w = max(w, a.Interval.Std())
			}
		}
	}
	if w == 0 {
		return 0
	}
	return min(w+2*f.opts.Publish+time.Second, traffic.DefaultSpan)
}

// publish runs the engine's side of a fleet: every Publish it puts this
// gateway's counters and breaker state of each active rollout's rule,
// and deletes those of rollouts that ended.
func (e *Engine) publish(ctx context.Context) {
	f := e.opts.Fleet
	done := map[string]bool{}
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-e.opts.Clock.After(f.opts.Publish):
			}
		}
		obs := e.observed.Load()
		now := e.opts.Clock.Now()
		active := map[string]bool{}
		for _, key := range obs.keys {
			r := obs.rules[key]
			if !r.Rollout.Active() {
				continue
			}
			active[key] = true
			w := f.publishWindow(r)
			p := published{Gateway: f.opts.ID, At: now.UTC(), Breaker: e.local.state(key, grayTarget(r))}
			if w > 0 {
				p.Traffic = e.rec.export(key, w)
			} else {
				p.Traffic = traffic.Export{Schema: traffic.LatencySchema, WidthMs: e.rec.set.Width().Milliseconds()}
			}
			pctx, cancel := context.WithTimeout(ctx, f.opts.Publish)
			err := f.publishDoc(pctx, key, p)
			cancel()
			if err != nil && ctx.Err() == nil {
				e.log.Warn("publish the rollout counters", "rule", key, "err", err)
			}
			done[key] = true
		}
		for key := range done {
			if active[key] {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, f.opts.Publish)
			if err := f.unpublish(pctx, key); err == nil {
				delete(done, key)
			}
			cancel()
		}
	}
}

// fleetSource sums the fleet's published counters.
type fleetSource struct {
	f     *Fleet
	local *Local
	now   func() time.Time
}

// Window implements Source: the sum of every gateway's counters, over
// the window that ends where the least recent publication ends (so that
// no gateway's last seconds are missing from the sum).
func (s *fleetSource) Window(ctx context.Context, key, group string, d time.Duration) (traffic.Stats, error) {
	now := s.now()
	docs, err := s.f.docs(ctx, key, now, 0)
	if err != nil {
		return traffic.Stats{}, err
	}
	if len(docs) == 0 {
		return traffic.Stats{}, nil // nothing published yet: no requests, inconclusive
	}
	exports := make([]traffic.Export, 0, len(docs))
	var end int64
	floor := now.Add(-3 * s.f.opts.Publish).UnixMilli() // a gateway that stopped publishing must not hold the window back
	for _, p := range docs {
		if p.Traffic.WidthMs == 0 {
			continue
		}
		exports = append(exports, p.Traffic)
		if e := max(p.Traffic.End, floor); end == 0 || e < end {
			end = e
		}
	}
	merged, err := traffic.Merge(exports...)
	if err != nil {
		return traffic.Stats{}, fmt.Errorf("sum the fleet's counters of %q: %w", key, err)
	}
	if w := merged.WidthMs; w > 0 {
		end -= end % w
	}
	return merged.Window(key, group, time.UnixMilli(end), d), nil
}

// Breaker implements Source: open if any gateway's breaker is open, the
// latest opening of any.
func (s *fleetSource) Breaker(ctx context.Context, key, target string) (BreakerState, error) {
	out := s.local.state(key, target)
	docs, err := s.f.docs(ctx, key, s.now(), s.f.opts.Publish/2)
	if err != nil {
		return out, nil // this gateway's own state still counts
	}
	for _, p := range docs {
		b := p.Breaker
		out.OpenNow = out.OpenNow || b.OpenNow
		if b.LastOpen.After(out.LastOpen) {
			out.LastOpen, out.Reason = b.LastOpen, b.Reason+" (gateway "+p.Gateway+")"
		}
	}
	return out, nil
}
