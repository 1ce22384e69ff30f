package scaling

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/upstream"
)

// ruleCounts and whitelistSizes are the points of the scaling curve.
var (
	ruleCounts     = []int{1, 100, 1000, 10000}
	whitelistSizes = []int{1000, 10000, 100000, 1000000}
)

// fixture is one compiled snapshot and the requests to decide against it.
type fixture struct {
	snap *router.Snapshot
	// reqs are decided in turn; they differ only in their user id so that
	// hashing sees varied input, as under real traffic. mkReqs makes them
	// after the snapshot's heap has been measured.
	reqs   []*attr.Map
	mkReqs func() []*attr.Map
	// wantRule is the rule every request in reqs must be decided by ("" for
	// the default upstream); wantGroup its group ("" for any).
	wantRule, wantGroup string
}

func newRegistry() *upstream.Registry {
	return upstream.NewRegistry(map[string]*upstream.Pool{
		"stable": upstream.NewPool("stable", []*upstream.Instance{{Addr: "127.0.0.1:1"}}),
		"gray":   upstream.NewPool("gray", []*upstream.Instance{{Addr: "127.0.0.1:2"}}),
	})
}

// grayRule is the JSON of one gray rule as an operator would write it.
type grayRule struct {
	Key         string          `json:"key"`
	Type        string          `json:"type"`
	Route       string          `json:"route,omitempty"`
	GrayPercent float64         `json:"gray_percent"`
	Conditions  map[string]any  `json:"conditions,omitempty"`
	WhiteList   []string        `json:"white_list,omitempty"`
	Targets     json.RawMessage `json:"targets"`
}

var targets = json.RawMessage(`{"gray":"gray","stable":"stable"}`)

func parse(tb testing.TB, reg *upstream.Registry, routes map[string]bool, r grayRule) *rule.Compiled {
	tb.Helper()
	js, err := json.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := rule.Parse(js, rule.Env{Resolve: reg.Resolve, HasRoute: func(n string) bool { return routes[n] }})
	if err != nil {
		tb.Fatalf("rule.Parse(%s): %v", r.Key, err)
	}
	return c
}

func requests(host, path string, uid func(i int) string) []*attr.Map {
	reqs := make([]*attr.Map, 1024)
	for i := range reqs {
		reqs[i] = &attr.Map{
			MethodV: "GET", HostV: host, PathV: path,
			Headers: map[string]string{"X-User-Id": uid(i)},
			Cookies: map[string]string{}, Queries: map[string]string{},
			IP: netip.MustParseAddr("127.0.0.1"),
		}
	}
	return reqs
}

func randomUID(i int) string { return strconv.Itoa(1_000_003 * (i + 1) % 1_000_000_007) }

// rulesFixture builds n gray rules (10%) laid out as layout says; the
// request always targets the rule that sorts last:
//
//   - "paths": global rules, rule i on path_prefix /pI/, the request on the
//     last rule's path. The router's first-segment index applies.
//   - "routes": n/10 host routes (at least 1); rule i belongs to route i mod
//     routes and sits on /pI/. The request goes to the last rule's host and path.
//   - "unindexed": rules i < n-1 are scoped by header_exists on a header the
//     request lacks, which no index can skip; the last has no condition. This
//     is the linear worst case, for comparison.
func rulesFixture(tb testing.TB, layout string, n int) fixture {
	reg := newRegistry()
	stable, _ := reg.Named("stable")
	in := router.Input{Default: stable}
	routes := map[string]bool{}
	nRoutes := max(n/10, 1)
	if layout == "routes" {
		for j := 0; j < nRoutes; j++ {
			name := fmt.Sprintf("route%d", j)
			routes[name] = true
			in.Routes = append(in.Routes, router.RouteSpec{Name: name, Host: fmt.Sprintf("h%d.example.com", j), Default: stable})
		}
	}
	host, path := "example.com", "/"
	for i := 0; i < n; i++ {
		r := grayRule{Key: fmt.Sprintf("r%06d", i), Type: "gray", GrayPercent: 10, Targets: targets}
		switch layout {
		case "paths":
			r.Conditions = map[string]any{"path_prefix": []string{fmt.Sprintf("/p%d/", i)}}
			path = fmt.Sprintf("/p%d/x", i)
		case "routes":
			r.Route = fmt.Sprintf("route%d", i%nRoutes)
			r.Conditions = map[string]any{"path_prefix": []string{fmt.Sprintf("/p%d/", i)}}
			host, path = fmt.Sprintf("h%d.example.com", i%nRoutes), fmt.Sprintf("/p%d/x", i)
		case "unindexed":
			if i < n-1 {
				r.Conditions = map[string]any{"header_exists": []string{fmt.Sprintf("X-Absent-%d", i)}}
			}
		default:
			tb.Fatalf("unknown layout %q", layout)
		}
		in.Rules = append(in.Rules, parse(tb, reg, routes, r))
	}
	snap, err := router.Build(in)
	if err != nil {
		tb.Fatal(err)
	}
	// Users in the gray 10% are claimed by the last rule, the others fall
	// through to the default: either way every rule before it was considered.
	return fixture{snap: snap, mkReqs: func() []*attr.Map { return requests(host, path, randomUID) }}
}

// whitelistFixture builds gray rules at 0% holding n "uid:" whitelist
// entries between them: one rule up to rule.MaxWhitelist entries, then as
// many rules as it takes (1,000,000 entries are 10 rules). With hit the
// requests' users are in the last rule's list, so every rule's list is
// looked up; without, no list holds them and the request falls through to
// the default upstream after the same lookups.
func whitelistFixture(tb testing.TB, n int, hit bool) fixture {
	reg := newRegistry()
	stable, _ := reg.Named("stable")
	in := router.Input{Default: stable}
	nRules := (n + rule.MaxWhitelist - 1) / rule.MaxWhitelist
	per := n / nRules
	for k := 0; k < nRules; k++ {
		wl := make([]string, per)
		for i := range wl {
			wl[i] = fmt.Sprintf("uid:wl-%d-%d", k, i)
		}
		in.Rules = append(in.Rules, parse(tb, reg, nil, grayRule{Key: fmt.Sprintf("wl%02d", k), Type: "gray", GrayPercent: 0, WhiteList: wl, Targets: targets}))
	}
	snap, err := router.Build(in)
	if err != nil {
		tb.Fatal(err)
	}
	f := fixture{snap: snap}
	if hit {
		last := nRules - 1
		f.mkReqs = func() []*attr.Map {
			return requests("example.com", "/api/x", func(i int) string { return fmt.Sprintf("wl-%d-%d", last, (i*7919)%per) })
		}
		f.wantRule, f.wantGroup = fmt.Sprintf("wl%02d", last), router.GroupGray
	} else {
		f.mkReqs = func() []*attr.Map { return requests("example.com", "/api/x", randomUID) }
	}
	return f
}

// warm builds one small fixture before the first measurement, so that
// one-time allocations (package-level caches, the first map growth of the
// JSON decoder) are not charged to the first point of the curve.
var warm sync.Once

// heapOf returns what build returns, with its requests made, and the live
// heap the snapshot added.
func heapOf(tb testing.TB, build func() fixture) (fixture, uint64) {
	warm.Do(func() { runtime.KeepAlive(rulesFixture(tb, "routes", 10)) })
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := build()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	f.reqs = f.mkReqs()
	if after.HeapAlloc < before.HeapAlloc {
		return f, 0
	}
	return f, after.HeapAlloc - before.HeapAlloc
}

var sink router.Decision

func run(b *testing.B, build func() fixture) {
	f, heap := heapOf(b, build)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		sink = f.snap.Decide(f.reqs[i&1023], nil)
		i++
	}
	b.ReportMetric(float64(heap), "heap-B")
	runtime.KeepAlive(f.snap)
}

// BenchmarkDecideRules measures one decision as the rule count grows.
func BenchmarkDecideRules(b *testing.B) {
	for _, layout := range []string{"paths", "routes", "unindexed"} {
		for _, n := range ruleCounts {
			b.Run(fmt.Sprintf("%s/n=%d", layout, n), func(b *testing.B) {
				run(b, func() fixture { return rulesFixture(b, layout, n) })
			})
		}
	}
}

// BenchmarkWhitelist measures one decision as the whitelist grows.
func BenchmarkWhitelist(b *testing.B) {
	for _, n := range whitelistSizes {
		for _, hit := range []bool{true, false} {
			name := "miss"
			if hit {
				name = "hit"
			}
			b.Run(fmt.Sprintf("n=%d/%s", n, name), func(b *testing.B) {
				run(b, func() fixture { return whitelistFixture(b, n, hit) })
			})
		}
	}
}

// TestFixtures checks, at small sizes, that the fixtures decide what the
// benchmarks claim they do, so a change in rule semantics can't turn a
// benchmark into a measurement of something else.
func TestFixtures(t *testing.T) {
	tests := []struct {
		name string
		f    fixture
		// lastRule is the rule that claims the gray share of requests.
		lastRule string
	}{
		{"paths", rulesFixture(t, "paths", 50), "r000049"},
		{"routes", rulesFixture(t, "routes", 50), "r000049"},
		{"unindexed", rulesFixture(t, "unindexed", 50), "r000049"},
		{"whitelist hit", whitelistFixture(t, 200, true), "wl00"},
		{"whitelist miss", whitelistFixture(t, 200, false), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.reqs = tt.f.mkReqs()
			gray := 0
			for _, r := range tt.f.reqs {
				d := tt.f.snap.Decide(r, nil)
				switch {
				case tt.f.wantGroup != "":
					if d.Rule != tt.f.wantRule || d.Group != tt.f.wantGroup {
						t.Fatalf("Decide(%s) = %s/%s, want %s/%s", r.Headers["X-User-Id"], d.Rule, d.Group, tt.f.wantRule, tt.f.wantGroup)
					}
				case d.Rule == tt.lastRule && tt.lastRule != "":
					gray++
				case d.Rule != "":
					t.Fatalf("Decide(%s).Rule = %q, want %q or the default", r.Headers["X-User-Id"], d.Rule, tt.lastRule)
				}
			}
			if tt.f.wantGroup == "" && tt.lastRule != "" && (gray < 50 || gray > 170) {
				t.Errorf("the last rule claimed %d of %d requests, want about 10%%", gray, len(tt.f.reqs))
			}
			if allocs := testing.AllocsPerRun(100, func() { sink = tt.f.snap.Decide(tt.f.reqs[0], nil) }); allocs != 0 {
				t.Errorf("Decide allocates %.0f times per call, want 0", allocs)
			}
		})
	}
}
