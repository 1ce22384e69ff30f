package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore"
	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// fleet starts n gateways sharing one etcd, with the same backends.
func fleet(t *testing.T, srv *etcdtest.Server, n int) []*env {
	t.Helper()
	backends := startBackends(t, "stable", "gray", "a", "b")
	var out []*env
	for i := 0; i < n; i++ {
		out = append(out, startFleetMember(t, srv, backends, t.TempDir()))
	}
	return out
}

func startFleetMember(t *testing.T, srv *etcdtest.Server, backends map[string]string, dataDir string) *env {
	t.Helper()
	return startFleetMemberWith(t, srv, backends, dataDir, nil)
}

// startFleetMemberWith is startFleetMember with the store wrapped by wrap,
// unless it is nil.
func startFleetMemberWith(t *testing.T, srv *etcdtest.Server, backends map[string]string, dataDir string, wrap func(*etcdstore.Store) store.Store) *env {
	t.Helper()
	yaml := baseConfig
	for name, addr := range backends {
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", addr)
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dataDir
	ecfg, err := etcdstore.ParseURL(srv.URL("/graygate"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, backends: backends}
	e.openStore = func() store.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := etcdstore.Open(ctx, ecfg, etcdstore.Options{DataDir: dataDir, Logger: slog.New(slog.DiscardHandler),
			ProbeInterval: 200 * time.Millisecond, DialTimeout: time.Second, WriteTimeout: time.Second})
		if err != nil {
			t.Fatalf("open etcd store: %v", err)
		}
		if wrap != nil {
			return wrap(s)
		}
		return s
	}
	e.restart(cfg)
	return e
}

// waitFor polls until cond holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFleet runs three gateways on one etcd: a rule PUT on one is served by
// all, 10,000 users get the same group everywhere, etcd dies under load
// without a failed request, a gateway restarted while etcd is down serves
// the cached rules, and everyone resyncs when etcd returns.
func TestFleet(t *testing.T) {
	srv := etcdtest.Start(t)
	gws := fleet(t, srv, 3)
	rule := refRule{Type: "gray", GrayPercent: pct(30), WhiteList: []string{"uid:vip"}, Targets: &refTgts{Gray: "gray", Stable: "stable"}}
	gws[0].mustPut("canary", rule)
	exp := refRule{Type: "ab", Experiment: "fleet_exp", Groups: []refGrp{{Name: "A", Weight: 50, Target: "a"}, {Name: "B", Weight: 50, Target: "b"}}}
	gws[0].mustPut("exp", exp)
	for i, g := range gws[1:] {
		waitFor(t, fmt.Sprintf("gateway %d to serve the rule", i+2), 10*time.Second, func() bool {
			a, err := g.get("/", "X-User-Id", "vip")
			return err == nil && a.rule == "canary" && a.group == "gray"
		})
	}

	// The same 10,000 users get the same group from all three.
	rules := []refRule{{Key: "canary", Type: "gray", GrayPercent: pct(30), WhiteList: []string{"uid:vip"}, Targets: &refTgts{Gray: "gray", Stable: "stable"}},
		{Key: "exp", Type: "ab", Experiment: "fleet_exp", Groups: exp.Groups}}
	users := 10000
	if testing.Short() {
		users = 1000
	}
	var mismatches atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				uid := fmt.Sprint("user-", u)
				_, want, _ := refDecide(rules, uid, "/")
				for i, g := range gws {
					a, err := g.get("/", "X-User-Id", uid)
					if err != nil || a.group != want {
						if mismatches.Add(1) < 5 {
							t.Errorf("gateway %d, %s: %+v %v, want group %s", i+1, uid, a, err, want)
						}
					}
				}
			}
		}()
	}
	for u := 0; u < users; u++ {
		work <- u
	}
	close(work)
	wg.Wait()
	if n := mismatches.Load(); n > 0 {
		t.Fatalf("%d answers differed", n)
	}

	// etcd is killed while traffic flows: no request fails.
	var failed, served atomic.Int64
	stop := underLoad(2, func(w, n int) { // gateways 1 and 2; the third is restarted below
		a, err := gws[w].get("/", "X-User-Id", fmt.Sprint("load-", w, "-", n%500))
		if err != nil || a.status != 200 {
			failed.Add(1)
		}
		served.Add(1)
		time.Sleep(2 * time.Millisecond)
	})
	time.Sleep(300 * time.Millisecond)
	srv.Stop()
	waitFor(t, "the gateways to notice etcd is gone", 10*time.Second, func() bool {
		_, st := gws[1].api("GET", "/api/v1/status", nil)
		store, _ := st["store"].(map[string]any)
		return store["state"] == "stale"
	})
	// Writes fail with 503 and are not applied anywhere.
	code, out := gws[1].api("PUT", "/api/v1/rules/canary", grayRule(100))
	if code != 503 {
		t.Errorf("PUT while etcd is down = %d %v, want 503", code, out)
	}
	// A gateway restarted while etcd is down serves the cached rules.
	g3 := gws[2]
	g3.shutdown()
	cfg := g3.gw.cfg
	g3.restart(cfg)
	a, err := g3.get("/", "X-User-Id", "vip")
	if err != nil || a.rule != "canary" || a.group != "gray" {
		t.Errorf("restarted during the outage: %+v %v", a, err)
	}
	_, st := g3.api("GET", "/api/v1/status", nil)
	if store, _ := st["store"].(map[string]any); st["stale"] != true || store["state"] != "stale" {
		t.Errorf("status during the outage = %v, want stale", st)
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed while etcd was down", failed.Load(), served.Load())
	}

	// etcd returns: everyone resyncs, and a change made now reaches all.
	srv.Restart()
	for i, g := range gws {
		waitFor(t, fmt.Sprintf("gateway %d to resync", i+1), 20*time.Second, func() bool {
			resp, err := http.Get(g.admin + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
	}
	waitFor(t, "a write after the outage", 10*time.Second, func() bool {
		code, _ := gws[1].api("PUT", "/api/v1/rules/canary", grayRule(100))
		return code == 200
	})
	for i, g := range gws {
		waitFor(t, fmt.Sprintf("gateway %d to serve the new rule", i+1), 10*time.Second, func() bool {
			a, err := g.get("/", "X-User-Id", "someone")
			return err == nil && a.group == "gray"
		})
	}
}

// TestPropagationLatency measures, over 100 updates, the time from a PUT
// answered by one gateway to the change being served by another.
func TestPropagationLatency(t *testing.T) {
	srv := etcdtest.Start(t)
	gws := fleet(t, srv, 2)
	n := 100
	if testing.Short() {
		n = 20
	}
	var lat []time.Duration
	for i := 0; i < n; i++ {
		p := float64(i%2) * 100 // flips everyone between gray and not
		t0 := time.Now()
		gws[0].mustPut("flip", grayRule(p))
		want := map[bool]string{true: "gray", false: "default"}[p == 100]
		deadline := time.Now().Add(10 * time.Second)
		for {
			a, err := gws[1].get("/", "X-User-Id", "u")
			if err == nil && a.group == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("update %d not served by the second gateway", i)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("propagation from PUT on gateway 1 to served by gateway 2 over %d updates: p50 %v, p99 %v, max %v",
		n, lat[n/2], lat[n*99/100], lat[n-1])
}

// TestDiscovery registers an instance in etcd, routes to it through a pool
// that discovers its service, and sees it disappear when its lease expires.
func TestDiscovery(t *testing.T) {
	srv := etcdtest.Start(t)
	backends := startBackends(t, "stable", "gray", "a", "b")
	yaml := `
default_upstream: svc
upstreams:
  svc: {discover: user-center}
`
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cfg.DataDir = dataDir
	ecfg, _ := etcdstore.ParseURL(srv.URL("/graygate"))
	e := &env{t: t, backends: backends}
	e.openStore = func() store.Store {
		s, err := etcdstore.Open(context.Background(), ecfg, etcdstore.Options{DataDir: dataDir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	e.restart(cfg)
	if a, _ := e.get("/"); a.status != 503 {
		t.Fatalf("no instance registered yet: %+v", a)
	}
	cli, err := etcdstore.NewClient(ecfg, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := etcdstore.Register(context.Background(), cli, ecfg.Prefix, "user-center",
		etcdstore.Instance{Addr: backends["a"], Weight: 1, Metadata: map[string]string{"version": "2"}}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = reg
	waitFor(t, "the registered instance to serve", 10*time.Second, func() bool {
		a, err := e.get("/")
		return err == nil && a.backend == "a"
	})
	// The registering process dies without deregistering: its lease expires.
	cli.Close()
	waitFor(t, "the instance to disappear after its TTL", 15*time.Second, func() bool {
		a, err := e.get("/")
		return err == nil && a.status == 503
	})
}

// TestVersionHeaderRouting is seed 003 through the data plane: the version
// header picks instances by metadata, and everything else falls back to
// round robin over all healthy instances.
func TestVersionHeaderRouting(t *testing.T) {
	e := start(t, `
default_upstream: user-center
upstreams:
  user-center:
    version_header: version
    instances:
      - {addr: "{{a}}", metadata: {version: "1"}}
      - {addr: "{{b}}", metadata: {version: "2"}}
      - {addr: "{{gray}}"}
  stable: {instances: [{addr: "{{stable}}"}]}
`, "")
	count := func(hdr ...string) map[string]int {
		seen := map[string]int{}
		for i := 0; i < 30; i++ {
			a, err := e.get("/", hdr...)
			if err != nil || a.status != 200 {
				t.Fatalf("%+v %v", a, err)
			}
			seen[a.backend]++
		}
		return seen
	}
	if got := count("version", "2"); got["b"] != 30 {
		t.Errorf("version 2 went to %v, want only b", got)
	}
	if got := count("version", "1"); got["a"] != 30 {
		t.Errorf("version 1 went to %v, want only a", got)
	}
	for _, hdr := range [][]string{nil, {"version", ""}, {"version", "9"}} {
		if got := count(hdr...); got["a"] != 10 || got["b"] != 10 || got["gray"] != 10 {
			t.Errorf("header %v: %v, want round robin over all three", hdr, got)
		}
	}
}

// TestPassiveEjection: an instance that keeps answering 500 is ejected and
// gets no traffic until its backoff ends.
func TestPassiveEjection(t *testing.T) {
	f := &flaky{}
	f.mode.Store(3) // every answer is a 500
	badAddr := startFlaky(t, f)
	e := start(t, `
default_upstream: pool
upstreams:
  pool:
    passive_health: {consecutive_failures: 2, base_ejection: 30s}
    instances: [{addr: "{{a}}"}, {addr: "`+badAddr+`"}]
`, "")
	for i := 0; i < 40; i++ {
		e.get("/")
	}
	before := f.count.Load()
	for i := 0; i < 20; i++ {
		if a, _ := e.get("/"); a.backend != "a" || a.status != 200 {
			t.Fatalf("after ejection: %+v", a)
		}
	}
	if f.count.Load() != before {
		t.Errorf("the ejected instance got %d requests", f.count.Load()-before)
	}
	resp, _ := http.Get(e.admin + "/metrics")
	body := readAll(resp)
	resp.Body.Close()
	if !strings.Contains(body, `graygate_pool_ejected_instances{pool="pool"} 1`) || !strings.Contains(body, `graygate_instance_ejections_total{addr="`+badAddr+`"} 1`) {
		t.Errorf("metrics do not show the ejection")
	}
}

// TestRouteVersionHeader turns seed 003's routing on for one route only.
func TestRouteVersionHeader(t *testing.T) {
	e := start(t, `
default_upstream: stable
upstreams:
  user-center:
    instances:
      - {addr: "{{a}}", metadata: {version: "1"}}
      - {addr: "{{b}}", metadata: {version: "2"}}
  stable: {instances: [{addr: "{{stable}}"}]}
routes:
  - {name: users, path_prefix: /users/, upstream: user-center, version_header: X-Version}
  - {name: other, path_prefix: /other/, upstream: user-center}
`, "")
	for i := 0; i < 10; i++ {
		if a, _ := e.get("/users/1", "X-Version", "2"); a.backend != "b" {
			t.Fatalf("users route, X-Version 2: %+v", a)
		}
	}
	seen := map[string]int{}
	for i := 0; i < 10; i++ {
		a, _ := e.get("/other/1", "X-Version", "2")
		seen[a.backend]++
	}
	if seen["a"] != 5 || seen["b"] != 5 {
		t.Errorf("a route without version_header ignores the header: %v", seen)
	}
}
