package experiment

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/upstream"
)

var testReg = upstream.NewRegistry(map[string]*upstream.Pool{
	"a": upstream.NewPool("a", []*upstream.Instance{{Addr: "127.0.0.1:1"}}),
	"b": upstream.NewPool("b", []*upstream.Instance{{Addr: "127.0.0.1:2"}}),
})

// checkoutRule is the example: purchases by match, revenue from a
// header, signups from the events API. It claims /shop/ and /api/order/…;
// a POST to /api/order itself converts but is not the rule's.
const checkoutRule = `{"key":"checkout","type":"ab","experiment_id":"exp_checkout","conditions":{"path_prefix":["/shop/","/api/order/"]},
	"groups":[{"name":"A","weight":50,"target":"a"},{"name":"B","weight":50,"target":"b"}],
	"metrics":[
	  {"name": "purchase", "type": "binomial", "match": {"method": "POST", "path_prefix": "/api/order", "status": "2xx"}},
	  {"name": "revenue",  "type": "mean",     "from_header": "X-Gray-Metric-Revenue"},
	  {"name": "signup",   "type": "binomial"}]}`

// snapshot builds a router snapshot of rules.
func snapshot(t testing.TB, in router.Input, rules ...string) *router.Snapshot {
	t.Helper()
	for _, js := range rules {
		c, err := rule.Parse([]byte(js), rule.Env{Resolve: testReg.Resolve})
		if err != nil {
			t.Fatalf("rule %s: %v", js, err)
		}
		in.Rules = append(in.Rules, c)
	}
	in.Default, _ = testReg.Named("a")
	s, err := router.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// start dates the requests of tests that do not care when they happen.
var start = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// clock is a settable clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newRecorder starts a recorder on a fresh data dir (or o.Dir) with a
// long flush interval, so that tests flush explicitly.
func newRecorder(t testing.TB, o Options) *Recorder {
	t.Helper()
	if o.Dir == "" && o.Store == "" {
		o.Dir = t.TempDir()
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func request(path, method, uid string) *attr.Map {
	return &attr.Map{MethodV: method, HostV: "shop.example", PathV: path, Headers: map[string]string{"X-User-Id": uid},
		Cookies: map[string]string{}, Queries: map[string]string{}, IP: netip.MustParseAddr("127.0.0.1")}
}

// serve decides a request against snap and observes it as the data plane
// would when it finishes with status and reported header values.
func serve(r *Recorder, snap *router.Snapshot, method, path, uid string, status int, reported ...string) router.Decision {
	d := snap.Decide(request(path, method, uid), nil)
	var rep [][]byte
	for _, v := range reported {
		if v == "" {
			rep = append(rep, nil)
		} else {
			rep = append(rep, []byte(v))
		}
	}
	r.Observe(&d, status, method, path, rep, r.opts.Now().Add(-time.Millisecond))
	return d
}

func flush(t testing.TB, r *Recorder) {
	t.Helper()
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func results(t testing.TB, r *Recorder, key string) *Results {
	t.Helper()
	res, err := r.Results(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func groupOf(res *Results, name string) (units int64, ok bool) {
	for _, g := range res.Groups {
		if g.Name == name {
			return g.Units, true
		}
	}
	return 0, false
}
