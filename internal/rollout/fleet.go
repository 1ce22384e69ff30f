package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

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
//   - every gateway publishes, every Publish and under its lease, its
//     running totals of each active rollout's rule per group (requests,
//     errors and the latency histogram, traffic.Counts, added up from its
//     Recorder's per-second buckets) with its breaker state
//     (fleet/rollout/traffic/<rule>/<id>). The driver reads them about
//     once a second (with the breaker) and a window of the fleet's
//     traffic is the sum over gateways of the difference between the
//     newest reading and the one a window ago; a gateway that restarted
//     (a new boot) counts from its first reading. Totals keep each write
//     a few hundred bytes whatever the window, where publishing the
//     windows themselves would cost kilobytes per write;
//   - the driver puts what it measured since its last write under
//     fleet/rollout/live/<rule>, so GET .../rollout on any gateway shows
//     the same measurements.
//
// It is safe for concurrent use.
type Fleet struct {
	opts FleetOptions
	log  *slog.Logger
	boot string

	mu   sync.Mutex
	ctx  context.Context // run's; the session lives as long as it
	sess *concurrency.Session

	readMu   sync.Mutex
	readings map[string][]reading // per rule, oldest first, at most a traffic span
}

// reading is every gateway's published totals of one rule, as read at one
// moment, by gateway and boot.
type reading struct {
	at   time.Time
	docs map[string]published
}

// published is one gateway's totals of one rule under rollout.
type published struct {
	Gateway string `json:"gateway"`
	// Boot changes when the gateway restarts: its totals start over.
	Boot string `json:"boot"`
	// Since is when the totals started; At when they were published.
	Since  time.Time                 `json:"since"`
	At     time.Time                 `json:"at"`
	Counts map[string]traffic.Counts `json:"counts"`
	// End is where the counted buckets end (Unix ms).
	End     int64        `json:"end"`
	Breaker BreakerState `json:"breaker"`
}

func (p published) id() string { return p.Gateway + "/" + p.Boot }

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
	boot := opts.ID + "@" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return &Fleet{opts: opts, log: opts.Logger.With("component", "rollout-fleet"), boot: boot, readings: map[string][]reading{}}, nil
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

// read returns every gateway's published totals of key: the newest
// reading if it is younger than maxAge, else a fresh one, which is kept
// for later windows.
func (f *Fleet) read(ctx context.Context, key string, now time.Time, maxAge time.Duration) (reading, error) {
	if maxAge > 0 {
		f.readMu.Lock()
		rs := f.readings[key]
		f.readMu.Unlock()
		if n := len(rs); n > 0 && now.Sub(rs[n-1].at) < maxAge {
			return rs[n-1], nil
		}
	}
	cli := f.opts.Client()
	if cli == nil {
		return reading{}, errors.New("etcd is not reachable")
	}
	resp, err := cli.Get(ctx, f.key("traffic", key)+"/", clientv3.WithPrefix())
	if err != nil {
		return reading{}, fmt.Errorf("read the fleet's counters of %q: %w", key, err)
	}
	r := reading{at: now, docs: make(map[string]published, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		var p published
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			f.log.Warn("a gateway's published counters do not decode; left out", "key", string(kv.Key), "err", err)
			continue
		}
		r.docs[p.id()] = p
	}
	f.readMu.Lock()
	rs := append(f.readings[key], r)
	for len(rs) > 1 && now.Sub(rs[0].at) > traffic.DefaultSpan {
		rs = rs[1:]
	}
	f.readings[key] = rs
	f.readMu.Unlock()
	return r, nil
}

// before returns the newest reading of key taken at or before t (or the
// oldest one there is).
func (f *Fleet) before(key string, t time.Time) (reading, bool) {
	f.readMu.Lock()
	defer f.readMu.Unlock()
	rs := f.readings[key]
	if len(rs) == 0 {
		return reading{}, false
	}
	out := rs[0]
	for _, r := range rs {
		if r.at.After(t) {
			break
		}
		out = r
	}
	return out, true
}

// forget drops the readings of a rollout this gateway no longer drives.
func (f *Fleet) forget(key string) {
	f.readMu.Lock()
	delete(f.readings, key)
	f.readMu.Unlock()
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

// totals are a gateway's running per-group counts of one rule.
type totals struct {
	since  time.Time
	end    int64 // Unix ms where the counted buckets end
	counts map[string]traffic.Counts
}

// add counts the buckets of e that end after t.end.
func (t *totals) add(e traffic.Export) {
	for _, s := range e.Series {
		c := t.counts[s.Group]
		for _, b := range s.Buckets {
			if b.Start >= t.end {
				c.Add(b.Counts)
			}
		}
		t.counts[s.Group] = c
	}
	t.end = max(t.end, e.End)
}

// publish runs the engine's side of a fleet: every Publish it puts this
// gateway's totals and breaker state of each active rollout's rule, and
// deletes those of rollouts that ended.
func (e *Engine) publish(ctx context.Context) {
	f := e.opts.Fleet
	// What has passed since the last publication, with room for a late
	// one; a stall longer than the traffic span loses buckets.
	lookback := min(3*f.opts.Publish+time.Second, traffic.DefaultSpan)
	sums := map[string]*totals{}
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-e.opts.Clock.After(f.opts.Publish):
			case <-e.published: // a rollout became active: start counting now
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
			t := sums[key]
			if t == nil {
				// Count from the bucket that is filling now on.
				t = &totals{since: now.UTC(), counts: map[string]traffic.Counts{}, end: e.rec.export(key, time.Second).End}
				sums[key] = t
			}
			t.add(e.rec.export(key, lookback))
			p := published{Gateway: f.opts.ID, Boot: f.boot, Since: t.since, At: now.UTC(), Counts: t.counts, End: t.end,
				Breaker: e.local.state(key, grayTarget(r))}
			pctx, cancel := context.WithTimeout(ctx, f.opts.Publish)
			err := f.publishDoc(pctx, key, p)
			cancel()
			if err != nil && ctx.Err() == nil {
				e.log.Warn("publish the rollout counters", "rule", key, "err", err)
			}
		}
		for key := range sums {
			if active[key] {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, f.opts.Publish)
			if err := f.unpublish(pctx, key); err == nil {
				delete(sums, key)
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

// Window implements Source: the sum over the fleet's gateways of what
// their totals grew by since the reading a window ago (taken by this
// driver: it reads the totals about once a second while it drives). As
// the totals move once per publish period, a window is at least two of
// them long.
func (s *fleetSource) Window(ctx context.Context, key, group string, d time.Duration) (traffic.Stats, error) {
	now := s.now()
	old, ok := s.f.before(key, now.Add(-max(d, 2*s.f.opts.Publish)))
	cur, err := s.f.read(ctx, key, now, 0)
	if err != nil {
		return traffic.Stats{}, err
	}
	if !ok {
		return traffic.Stats{}, nil // no reading before this one: nothing to compare with
	}
	return windowOf(old, cur, group), nil
}

// windowOf sums what every gateway's totals of group grew by from old to
// cur: a gateway in both by its difference, one that started counting
// after old by its whole totals; one that old missed for another reason
// (it had not published yet) is left out rather than over-counted.
func windowOf(old, cur reading, group string) traffic.Stats {
	var sum traffic.Counts
	for id, p := range cur.docs {
		c := p.Counts[group]
		if o, seen := old.docs[id]; seen {
			sum.Add(sub(c, o.Counts[group]))
		} else if !p.Since.Before(old.at) {
			sum.Add(c)
		}
	}
	return statsOf(sum, cur.at.Sub(old.at))
}

// sub returns a - b, bucket by bucket (b is an earlier reading of a).
func sub(a, b traffic.Counts) traffic.Counts {
	if b.Requests > a.Requests {
		return traffic.Counts{} // not an earlier reading of a
	}
	out := traffic.Counts{Requests: a.Requests - b.Requests, Errors: a.Errors - min(b.Errors, a.Errors), Latency: make([]uint64, len(a.Latency))}
	for i, n := range a.Latency {
		if i < len(b.Latency) {
			n -= min(b.Latency[i], n)
		}
		out.Latency[i] = n
	}
	return out
}

// statsOf summarizes counts over a window of length d.
func statsOf(c traffic.Counts, d time.Duration) traffic.Stats {
	st := traffic.Stats{Requests: c.Requests, Errors: c.Errors, Seconds: d.Seconds(), Counts: c}
	if d > 0 {
		st.RPS = float64(c.Requests) / d.Seconds()
	}
	if c.Requests > 0 {
		st.ErrorRate = float64(c.Errors) / float64(c.Requests)
	}
	st.P99Ms = float64(c.Quantile(0.99)) / float64(time.Millisecond)
	return st
}

// Breaker implements Source: open if any gateway's breaker is open, the
// latest opening of any.
func (s *fleetSource) Breaker(ctx context.Context, key, target string) (BreakerState, error) {
	out := s.local.state(key, target)
	r, err := s.f.read(ctx, key, s.now(), s.f.opts.Publish/2)
	if err != nil {
		return out, nil // this gateway's own state still counts
	}
	for _, p := range r.docs {
		b := p.Breaker
		out.OpenNow = out.OpenNow || b.OpenNow
		if b.LastOpen.After(out.LastOpen) {
			out.LastOpen, out.Reason = b.LastOpen, b.Reason+" (gateway "+p.Gateway+")"
		}
	}
	return out, nil
}
