package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/graygate/graygate/internal/store"
)

// Instance is one live upstream instance of a service, as registered under
// PREFIX/instances/<service>/<addr>. Its JSON shape is
// {"addr","weight","metadata"}.
type Instance struct {
	// Addr is host:port or http(s)://host[:port].
	Addr   string `json:"addr"`
	Weight int    `json:"weight"`
	// Metadata carries labels such as version or zone, matched by rules.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// instancesDir is PREFIX/instances/.
func instancesDir(prefix string) string { return normalizePrefix(prefix) + "instances/" }

// instanceKey is PREFIX/instances/<service>/<addr>, the address path-escaped
// so that the slashes of a URL stay inside one key segment.
func instanceKey(prefix, service, addr string) string {
	return instancesDir(prefix) + service + "/" + url.PathEscape(addr)
}

// Registration keeps one instance registered: its key is bound to a lease
// that a background goroutine keeps alive until Close. If the lease is lost
// (expired while etcd was unreachable, or revoked), it registers again
// under a new lease. If the process dies, the lease expires after its TTL
// and the instance disappears from every watcher. It is safe for concurrent
// use.
type Registration struct {
	cli   *clientv3.Client
	key   string
	value string
	ttl   int64 // seconds

	lease   atomic.Int64 // current clientv3.LeaseID, 0 if none
	renewed atomic.Int64 // how often the lease was lost and replaced

	ctx       context.Context // lives until Close; keepalives are bound to it
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Register grants a lease of ttl (rounded up to whole seconds, at least
// 1s), writes inst under PREFIX/instances/<service>/<addr> bound to it, and
// keeps the lease alive until Close. ctx bounds the first registration
// only. service follows the rule key pattern.
func Register(ctx context.Context, client *clientv3.Client, prefix, service string, inst Instance, ttl time.Duration) (*Registration, error) {
	fail := func(err error) (*Registration, error) {
		return nil, fmt.Errorf("register %q in service %q: %w", inst.Addr, service, err)
	}
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("client is nil"))
	}
	if err := validPrefix(prefix); err != nil {
		errs = append(errs, err)
	}
	if !validKey(service) {
		errs = append(errs, fmt.Errorf("service: must match %s", store.KeyPattern))
	}
	if inst.Addr == "" {
		errs = append(errs, errors.New("addr: must not be empty"))
	}
	if inst.Weight < 0 {
		errs = append(errs, fmt.Errorf("weight: must not be negative, got %d", inst.Weight))
	}
	if ttl < time.Second {
		errs = append(errs, fmt.Errorf("ttl: must be at least 1s, got %v", ttl))
	}
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	val, err := marshal(inst)
	if err != nil {
		return fail(err)
	}
	r := &Registration{
		cli:   client,
		key:   instanceKey(prefix, service, inst.Addr),
		value: string(val),
		ttl:   int64(math.Ceil(ttl.Seconds())),
		done:  make(chan struct{}),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	ka, err := r.register(ctx)
	if err != nil {
		r.cancel()
		return fail(err)
	}
	go r.keep(ka)
	return r, nil
}

// register grants a lease, writes the key with it and starts keeping it
// alive.
func (r *Registration) register(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	lease, err := r.cli.Grant(ctx, r.ttl)
	if err != nil {
		return nil, fmt.Errorf("grant a %ds lease: %w", r.ttl, err)
	}
	revoke := func() {
		ctx, cancel := context.WithTimeout(r.ctx, time.Second)
		defer cancel()
		r.cli.Revoke(ctx, lease.ID)
	}
	if _, err := r.cli.Put(ctx, r.key, r.value, clientv3.WithLease(lease.ID)); err != nil {
		revoke()
		return nil, fmt.Errorf("put %s: %w", r.key, err)
	}
	ka, err := r.cli.KeepAlive(r.ctx, lease.ID)
	if err != nil {
		revoke()
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	r.lease.Store(int64(lease.ID))
	return ka, nil
}

// keep drains the keepalive responses; when the channel closes before
// Close (the lease is gone, or no keepalive was answered within the TTL),
// it registers again, with backoff, until it succeeds or Close.
func (r *Registration) keep(ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	bo := retryDelay{max: 3 * time.Second}
	for {
		for range ka {
		}
		for {
			if r.ctx.Err() != nil || r.cli.Ctx().Err() != nil {
				return
			}
			ctx, cancel := context.WithTimeout(r.ctx, time.Duration(r.ttl)*time.Second)
			k, err := r.register(ctx)
			cancel()
			if err == nil {
				ka = k
				r.renewed.Add(1)
				bo.reset()
				break
			}
			t := time.NewTimer(bo.next())
			select {
			case <-t.C:
			case <-r.ctx.Done():
				t.Stop()
				return
			}
		}
	}
}

// Key returns the etcd key of the registration.
func (r *Registration) Key() string { return r.key }

// Reregistrations counts how often the lease was lost and the instance
// registered again, for metrics.
func (r *Registration) Reregistrations() int64 { return r.renewed.Load() }

// Close stops the keepalive and revokes the lease, which removes the
// instance at once. If etcd cannot be reached, the error says so and the
// instance disappears when the lease expires. Closing twice is a no-op.
func (r *Registration) Close() error {
	r.closeOnce.Do(func() {
		r.cancel()
		<-r.done
		id := clientv3.LeaseID(r.lease.Load())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := r.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			r.closeErr = fmt.Errorf("deregister %s: revoke lease %x (it expires within %ds): %w", r.key, int64(id), r.ttl, err)
		}
	})
	return r.closeErr
}

// WatchInstances lists the instances of service (or of every service when
// service is ""), then watches them, and calls fn with the full current
// list of a service, sorted by address, whenever it changes: an instance
// registered, updated, deregistered or expired. The first list is delivered
// at once: for a named service even when it is empty, for "" once per
// service that has instances. fn is called from one goroutine, never
// concurrently, and owns the slice it gets.
//
// WatchInstances blocks until ctx ends, then returns nil; it returns an
// error at once only for invalid arguments. When the watch fails (etcd
// compacted the revisions it needed, or it lost its leader) it lists again,
// with backoff, and reports the services whose list differs; across a lost
// connection the etcd client resumes the watch by itself.
func WatchInstances(ctx context.Context, client *clientv3.Client, prefix, service string, fn func(service string, instances []Instance)) error {
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("client is nil"))
	}
	if err := validPrefix(prefix); err != nil {
		errs = append(errs, err)
	}
	if service != "" && !validKey(service) {
		errs = append(errs, fmt.Errorf("service: must be empty or match %s", store.KeyPattern))
	}
	if fn == nil {
		errs = append(errs, errors.New("fn is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("watch instances: %w", err)
	}
	w := &instanceWatch{
		cli:       client,
		dir:       instancesDir(prefix),
		service:   service,
		fn:        fn,
		delivered: make(map[string][]Instance),
	}
	w.scope = w.dir
	if service != "" {
		w.scope += service + "/"
	}
	bo := retryDelay{max: 3 * time.Second}
	for {
		rev, err := w.list(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			started := time.Now()
			w.watch(ctx, rev+1)
			if ctx.Err() != nil {
				return nil
			}
			if time.Since(started) > 3*time.Second {
				bo.reset()
			}
		}
		t := time.NewTimer(bo.next())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// instanceWatch is the state of one WatchInstances call.
type instanceWatch struct {
	cli     *clientv3.Client
	dir     string // PREFIX/instances/
	scope   string // dir, or dir + service + "/"
	service string
	fn      func(string, []Instance)

	current   map[string]map[string]Instance // service → etcd key → instance
	delivered map[string][]Instance          // what fn was last given, per service
	listed    bool
}

// list reads every instance in scope and reports the services whose list
// differs from what fn was last given.
func (w *instanceWatch) list(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := w.cli.Get(ctx, w.scope, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	w.current = make(map[string]map[string]Instance)
	touched := make(map[string]bool)
	for s := range w.delivered {
		touched[s] = true
	}
	if w.service != "" && !w.listed {
		touched[w.service] = true
	}
	for _, kv := range resp.Kvs {
		if s := w.put(kv.Key, kv.Value); s != "" {
			touched[s] = true
		}
	}
	w.listed = true
	w.deliver(touched)
	return resp.Header.Revision, nil
}

// watch applies changes from rev on until the watch fails or ctx ends.
func (w *instanceWatch) watch(ctx context.Context, rev int64) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range w.cli.Watch(ctx, w.scope, clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if resp.Err() != nil {
			return
		}
		touched := make(map[string]bool)
		for _, ev := range resp.Events {
			var s string
			if ev.Type == clientv3.EventTypePut {
				s = w.put(ev.Kv.Key, ev.Kv.Value)
			} else {
				s = w.del(ev.Kv.Key)
			}
			if s != "" {
				touched[s] = true
			}
		}
		w.deliver(touched)
	}
}

// service returns the service an instance key belongs to, or "".
func (w *instanceWatch) serviceOf(key []byte) string {
	rest, ok := strings.CutPrefix(string(key), w.dir)
	if !ok {
		return ""
	}
	s, addr, ok := strings.Cut(rest, "/")
	if !ok || addr == "" || !validKey(s) {
		return ""
	}
	return s
}

// put records an instance and returns its service. A value that is not an
// instance counts as absent, so that a broken registration is not routed
// to.
func (w *instanceWatch) put(key, value []byte) string {
	s := w.serviceOf(key)
	if s == "" {
		return ""
	}
	var inst Instance
	if err := json.Unmarshal(value, &inst); err != nil || inst.Addr == "" || inst.Weight < 0 {
		w.del(key)
		return s
	}
	if w.current[s] == nil {
		w.current[s] = make(map[string]Instance)
	}
	w.current[s][string(key)] = inst
	return s
}

func (w *instanceWatch) del(key []byte) string {
	s := w.serviceOf(key)
	if s == "" {
		return ""
	}
	delete(w.current[s], string(key))
	if len(w.current[s]) == 0 {
		delete(w.current, s)
	}
	return s
}

// deliver calls fn for each touched service whose list changed, in service
// order.
func (w *instanceWatch) deliver(touched map[string]bool) {
	for _, s := range slices.Sorted(maps.Keys(touched)) {
		list := make([]Instance, 0, len(w.current[s]))
		for _, inst := range w.current[s] {
			list = append(list, inst)
		}
		slices.SortFunc(list, func(a, b Instance) int { return strings.Compare(a.Addr, b.Addr) })
		prev, seen := w.delivered[s]
		if seen && slices.EqualFunc(prev, list, func(a, b Instance) bool {
			return a.Addr == b.Addr && a.Weight == b.Weight && maps.Equal(a.Metadata, b.Metadata)
		}) {
			continue
		}
		if len(list) == 0 && s != w.service {
			delete(w.delivered, s)
		} else {
			w.delivered[s] = list
		}
		if !seen && len(list) == 0 && s != w.service {
			continue
		}
		w.fn(s, cloneInstances(list))
	}
}

func cloneInstances(list []Instance) []Instance {
	out := make([]Instance, len(list))
	for i, inst := range list {
		inst.Metadata = maps.Clone(inst.Metadata)
		out[i] = inst
	}
	return out
}
