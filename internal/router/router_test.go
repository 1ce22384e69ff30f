package router

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/upstream"
)

var reg = upstream.NewRegistry(map[string]*upstream.Pool{
	"stable": upstream.NewPool("stable", []*upstream.Instance{{Addr: "127.0.0.1:1"}}),
	"gray":   upstream.NewPool("gray", []*upstream.Instance{{Addr: "127.0.0.1:2"}}),
	"a":      upstream.NewPool("a", []*upstream.Instance{{Addr: "127.0.0.1:3"}}),
	"b":      upstream.NewPool("b", []*upstream.Instance{{Addr: "127.0.0.1:4"}}),
	"web":    upstream.NewPool("web", []*upstream.Instance{{Addr: "127.0.0.1:5"}}),
})

func compile(t testing.TB, js string) *rule.Compiled {
	t.Helper()
	c, err := rule.Parse([]byte(js), rule.Env{Resolve: reg.Resolve, HasRoute: func(n string) bool { return n == "web" }})
	if err != nil {
		t.Fatalf("Parse(%s): %v", js, err)
	}
	return c
}

func build(t testing.TB, in Input) *Snapshot {
	t.Helper()
	if in.Default == nil {
		in.Default, _ = reg.Named("stable")
	}
	s, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(path string, kv ...string) *attr.Map {
	m := &attr.Map{MethodV: "GET", HostV: "example.com", PathV: path, Headers: map[string]string{}, Cookies: map[string]string{}, Queries: map[string]string{}, IP: netip.MustParseAddr("127.0.0.1")}
	for i := 0; i+1 < len(kv); i += 2 {
		switch kv[i] {
		case "host":
			m.HostV = kv[i+1]
		case "cookie":
			m.Cookies["user_id"] = kv[i+1]
		case "query":
			m.Queries["user_id"] = kv[i+1]
		default:
			m.Headers[kv[i]] = kv[i+1]
		}
	}
	return m
}

// userIn finds a uid whose decision under s matches want.
func userWhere(t *testing.T, s *Snapshot, path string, want func(Decision) bool) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		u := strconv.Itoa(i)
		if want(s.Decide(get(path, "X-User-Id", u), nil)) {
			return u
		}
	}
	t.Fatal("no such user")
	return ""
}

func TestDecide(t *testing.T) {
	gray := compile(t, `{"key":"gray_v2","type":"gray","gray_percent":10,"white_list":["uid:vip"],
		"conditions":{"path_prefix":["/api/"]},"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"v2.1"}}`)
	ab := compile(t, `{"key":"exp","type":"ab","experiment_id":"e1","groups":[
		{"name":"A","weight":50,"target":"a","control":true},{"name":"B","weight":50,"target":"b"}]}`)
	webOnly := compile(t, `{"key":"web_canary","type":"gray","route":"web","gray_percent":100,"targets":{"gray":"gray","stable":"web"}}`)
	s := build(t, Input{Rules: []*rule.Compiled{ab, gray, webOnly},
		Routes: []RouteSpec{{Name: "web", Host: "www.example.com", PathPrefix: "/", Default: mustPool("web")}}})
	grayUser := userWhere(t, s, "/api/x", func(d Decision) bool { return d.Group == "gray" })
	notGray := userWhere(t, s, "/api/x", func(d Decision) bool { return d.Group != "gray" })

	tests := []struct {
		name                  string
		r                     *attr.Map
		rule, group, tag, dst string
	}{
		{"whitelist first", get("/api/x", "X-User-Id", "vip"), "gray_v2", "gray", "v2.1", "gray"},
		{"bucket below threshold", get("/api/x", "X-User-Id", grayUser), "gray_v2", "gray", "v2.1", "gray"},
		{"falls through to ab", get("/api/x", "X-User-Id", notGray), "exp", "", "", ""},
		{"out of scope goes to ab", get("/other", "X-User-Id", "vip"), "exp", "", "", ""},
		{"cookie identity", get("/api/x", "cookie", "vip"), "gray_v2", "gray", "v2.1", "gray"},
		{"query identity", get("/api/x", "query", "vip"), "gray_v2", "gray", "v2.1", "gray"},
		{"route rule before global ones", get("/", "host", "www.example.com:8080", "X-User-Id", "x"), "web_canary", "gray", "gray", "gray"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := s.Decide(tt.r, nil)
			if d.Rule != tt.rule {
				t.Fatalf("Decide(%s).Rule = %q, want %q", tt.r.PathV, d.Rule, tt.rule)
			}
			if tt.group != "" && (d.Group != tt.group || d.Tag != tt.tag || d.Target.Name != tt.dst) {
				t.Errorf("Decide = %s/%s/%s, want %s/%s/%s", d.Group, d.Tag, d.Target.Name, tt.group, tt.tag, tt.dst)
			}
			if tt.rule == "exp" && d.Group != "A" && d.Group != "B" {
				t.Errorf("ab group = %q", d.Group)
			}
		})
	}
}

func mustPool(name string) *upstream.Pool { p, _ := reg.Named(name); return p }

func TestPriorityAndDefault(t *testing.T) {
	// ab rules come after gray rules by default, whatever their keys.
	ab := compile(t, `{"key":"a_first_by_key","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":100,"target":"a"}]}`)
	gray := compile(t, `{"key":"z_gray","type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"}}`)
	s := build(t, Input{Rules: []*rule.Compiled{ab, gray}})
	if d := s.Decide(get("/", "X-User-Id", "1"), nil); d.Rule != "z_gray" {
		t.Errorf("gray rule should be evaluated before ab: got %q", d.Rule)
	}
	// An explicit priority wins.
	ab2 := compile(t, `{"key":"a_first_by_key","type":"ab","priority":1,"experiment_id":"e","groups":[{"name":"A","weight":100,"target":"a"}]}`)
	s = build(t, Input{Rules: []*rule.Compiled{ab2, gray}})
	if d := s.Decide(get("/", "X-User-Id", "1"), nil); d.Rule != "a_first_by_key" {
		t.Errorf("priority 1 should go first: got %q", d.Rule)
	}
	// No rule claims: the default upstream, group "default".
	zero := compile(t, `{"key":"g","type":"gray","gray_percent":0,"targets":{"gray":"gray","stable":"stable"}}`)
	s = build(t, Input{Rules: []*rule.Compiled{zero}})
	if d := s.Decide(get("/", "X-User-Id", "1"), nil); d.Group != GroupDefault || d.Target.Name != "stable" || d.Rule != "" {
		t.Errorf("unclaimed = %+v", d)
	}
}

func TestAnonymousIdentity(t *testing.T) {
	zero := compile(t, `{"key":"g","type":"gray","gray_percent":50,"targets":{"gray":"gray","stable":"stable"}}`)
	s := build(t, Input{Rules: []*rule.Compiled{zero}})
	d := s.Decide(get("/"), nil)
	if !d.Identity.Issued || d.Identity.Cookie != "gg_uid" || len(d.Identity.Value) != 32 {
		t.Fatalf("anonymous identity = %+v", d.Identity)
	}
	// The issued cookie brings the same user back.
	r := get("/")
	r.Cookies["gg_uid"] = d.Identity.Value
	d2 := s.Decide(r, nil)
	if d2.Identity.Issued || d2.Identity.Value != d.Identity.Value || d2.Group != d.Group {
		t.Errorf("returning visitor = %+v, first = %+v", d2, d)
	}
	s = build(t, Input{Rules: []*rule.Compiled{zero}, Identity: identity.Config{Anonymous: "ip"}})
	if d := s.Decide(get("/"), nil); d.Identity.Value != "ip_127.0.0.1" || d.Identity.Issued {
		t.Errorf("ip fallback = %+v", d.Identity)
	}
}

func TestRollback(t *testing.T) {
	gray := compile(t, `{"key":"g","type":"gray","gray_percent":100,"white_list":["uid:vip"],"targets":{"gray":"gray","stable":"stable"}}`)
	ab := compile(t, `{"key":"x","type":"ab","experiment_id":"e","conditions":{"path_prefix":["/ab"]},"groups":[{"name":"A","weight":0,"target":"a","control":true},{"name":"B","weight":100,"target":"b"}]}`)
	for _, in := range []Input{{RolledBackAll: true}, {RolledBack: map[string]bool{"g": true, "x": true}}} {
		in.Rules = []*rule.Compiled{gray, ab}
		s := build(t, in)
		for _, u := range []string{"vip", "1", "2"} {
			d := s.Decide(get("/", "X-User-Id", u), nil)
			if d.Group != GroupStable || d.Degraded != DegradedRollback || d.Target.Name != "stable" {
				t.Errorf("rolled back gray, user %s = %+v", u, d)
			}
		}
		// The gray rule comes first and claims everyone at 100%, so /ab is
		// its, rolled back to stable; the ab rule alone is checked below.
		if d := s.Decide(get("/ab", "X-User-Id", "1"), nil); d.Rule != "g" || d.Group != GroupStable || d.Degraded != DegradedRollback {
			t.Errorf("rolled back, /ab = %+v, want rule g sent to stable", d)
		}
	}
	s := build(t, Input{Rules: []*rule.Compiled{ab}, RolledBackAll: true})
	if d := s.Decide(get("/ab", "X-User-Id", "1"), nil); d.Group != "A" || d.Degraded != DegradedRollback {
		t.Errorf("rolled back ab = %+v, want control group A", d)
	}
}

// TestColoring: an inbound X-Gray-Tag is honoured only with trust_gray_tag
// and only from a trusted peer; from anyone else it is ignored, so that a
// client cannot name gray and skip the whitelist and the bucket.
func TestColoring(t *testing.T) {
	gray := compile(t, `{"key":"g","type":"gray","gray_percent":0,"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"v2.1"}}`)
	honour := build(t, Input{Rules: []*rule.Compiled{gray}, TrustGrayTag: true})
	off := build(t, Input{Rules: []*rule.Compiled{gray}})
	tests := []struct {
		name      string
		s         *Snapshot
		trusted   bool
		tag       string
		wantGroup string
		wantTag   string
		ignored   bool
	}{
		{"trust_gray_tag, trusted peer", honour, true, "v2.1", GroupGray, "v2.1", false},
		{"trust_gray_tag, untrusted peer", honour, false, "v2.1", GroupDefault, "", true},
		{"trust_gray_tag off, trusted peer", off, true, "v2.1", GroupDefault, "", false},
		{"unknown color from a trusted peer propagates", honour, true, "other-service-tag", GroupDefault, "other-service-tag", false},
		{"unknown color from an untrusted peer is dropped", honour, false, "other-service-tag", GroupDefault, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := get("/", "X-User-Id", "1", "X-Gray-Tag", tt.tag)
			r.Trusted = tt.trusted
			d := tt.s.Decide(r, nil)
			if d.Group != tt.wantGroup || d.Tag != tt.wantTag {
				t.Errorf("Decide = group %q tag %q, want %q %q", d.Group, d.Tag, tt.wantGroup, tt.wantTag)
			}
			var tr Trace
			if d2 := tt.s.Decide(r, &tr); d2 != d {
				t.Errorf("traced decision %+v differs from the live one %+v", d2, d)
			}
			if got := tr.IgnoredColor != ""; got != tt.ignored || tr.PeerTrusted != tt.trusted {
				t.Errorf("trace ignored color %q, peer trusted %v; want ignored %v, trusted %v", tr.IgnoredColor, tr.PeerTrusted, tt.ignored, tt.trusted)
			}
		})
	}
}

func TestExplainTrace(t *testing.T) {
	gray := compile(t, `{"key":"g","type":"gray","gray_percent":0,"conditions":{"path_prefix":["/api/"]},"targets":{"gray":"gray","stable":"stable"}}`)
	ab := compile(t, `{"key":"x","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":100,"target":"a"}]}`)
	s := build(t, Input{Rules: []*rule.Compiled{gray, ab}})
	var tr Trace
	d := s.Decide(get("/api/1", "X-User-Id", "u1"), &tr)
	if len(tr.Rules) != 2 || tr.Rules[0].Claimed || tr.Rules[0].Bucket == nil || !tr.Rules[1].Claimed || tr.Identity.Value != "u1" {
		t.Fatalf("trace = %+v", tr)
	}
	if d2 := s.Decide(get("/api/1", "X-User-Id", "u1"), nil); d2 != d {
		t.Errorf("traced decision %+v differs from the live one %+v", d, d2)
	}
}

func manyRules(t testing.TB, n int) []*rule.Compiled {
	var out []*rule.Compiled
	for i := 0; i < n-1; i++ {
		out = append(out, compile(t, fmt.Sprintf(`{"key":"r%04d","type":"gray","gray_percent":10,
			"conditions":{"path_prefix":["/svc%d/"]},"targets":{"gray":"gray","stable":"stable"}}`, i, i)))
	}
	out = append(out, compile(t, `{"key":"zlast","type":"gray","gray_percent":10,"white_list":["uid:a","uid:b"],
		"conditions":{"path_prefix":["/api/"]},"targets":{"gray":"gray","stable":"stable"}}`))
	return out
}

// TestDecideDoesNotAllocate holds the 0-allocation promise for a known user.
func TestDecideDoesNotAllocate(t *testing.T) {
	s := build(t, Input{Rules: manyRules(t, 100)})
	r := get("/api/user/1", "X-User-Id", "12345")
	if a := testing.AllocsPerRun(200, func() { s.Decide(r, nil) }); a != 0 {
		t.Errorf("Decide allocates %v times", a)
	}
}

// TestSwapRace serves from many goroutines while snapshots swap; every
// decision must come wholly from one snapshot (run with -race).
func TestSwapRace(t *testing.T) {
	mk := func(pct int) *Snapshot {
		return build(t, Input{Revision: int64(pct), Rules: []*rule.Compiled{
			compile(t, fmt.Sprintf(`{"key":"g","type":"gray","gray_percent":%d,"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"t%d"}}`, pct, pct)),
		}})
	}
	snaps := []*Snapshot{mk(0), mk(100)}
	rt := New(snaps[0])
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan string, 1)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := get("/", "X-User-Id", "u")
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := rt.Decide(r)
				// 0%: default group, no tag; 100%: gray with tag t100. Never a mix.
				if (d.Group == "gray") != (d.Tag == "t100") {
					select {
					case errs <- fmt.Sprintf("mixed decision %+v", d):
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		rt.Store(snaps[i%2])
	}
	close(stop)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

// BenchmarkDecide100Rules decides as the data plane does, into the
// request's own Decision (DecideInto).
func BenchmarkDecide100Rules(b *testing.B) {
	s := build(b, Input{Rules: manyRules(b, 100)})
	r := get("/api/user/1", "X-User-Id", "12345")
	var d Decision
	b.ReportAllocs()
	for b.Loop() {
		s.DecideInto(r, nil, &d)
	}
}

// TestIndexAgreesWithFullScan compares the indexed hot path with explain's
// full scan over rules with every kind of path prefix.
func TestIndexAgreesWithFullScan(t *testing.T) {
	prefixes := []string{`"/api/"`, `"/api"`, `"/api/user/"`, `"/"`, `"/ap"`, `"/shop/"`, `"/api/","/shop/"`, ``}
	var rules []*rule.Compiled
	for i, p := range prefixes {
		cond := ""
		if p != "" {
			cond = fmt.Sprintf(`"conditions":{"path_prefix":[%s]},`, p)
		}
		rules = append(rules, compile(t, fmt.Sprintf(`{"key":"r%d","type":"gray","priority":%d,"gray_percent":30,%s"targets":{"gray":"gray","stable":"stable"}}`, i, 10-i, cond)))
	}
	s := build(t, Input{Rules: rules})
	paths := []string{"/", "/api", "/api/", "/api/user/1", "/apiary/x", "/ap", "/shop/cart", "/shop", "/other/x", ""}
	// reused is decided into again and again, as the data plane's flow is:
	// nothing of an earlier decision may survive into a later one.
	var reused Decision
	for _, p := range paths {
		for u := 0; u < 200; u++ {
			r := get(p, "X-User-Id", strconv.Itoa(u))
			var tr Trace
			full := s.Decide(r, &tr)
			fast := s.Decide(r, nil)
			if full != fast {
				t.Fatalf("path %q user %d: indexed %+v, full scan %+v", p, u, fast, full)
			}
			if s.DecideInto(r, nil, &reused); reused != fast {
				t.Fatalf("path %q user %d: DecideInto over an earlier decision gave %+v, Decide %+v", p, u, reused, fast)
			}
		}
	}
}

// BenchmarkDecide100RulesAllApply is the worst case: 100 rules with no path
// condition, each of which hashes the user before the last one claims.
func BenchmarkDecide100RulesAllApply(b *testing.B) {
	var rules []*rule.Compiled
	for i := 0; i < 99; i++ {
		rules = append(rules, compile(b, fmt.Sprintf(`{"key":"r%04d","type":"gray","gray_percent":0.01,"targets":{"gray":"gray","stable":"stable"}}`, i)))
	}
	rules = append(rules, compile(b, `{"key":"zlast","type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"}}`))
	s := build(b, Input{Rules: rules})
	r := get("/api/user/1", "X-User-Id", "12345")
	b.ReportAllocs()
	for b.Loop() {
		s.Decide(r, nil)
	}
}

func TestBreakerDegradesGrayToStable(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	brk, err := breaker.New(breaker.Config{}, breaker.Options{Name: "g", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	g := compile(t, `{"key":"g","type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"},"target_tags":{"stable":"v1"}}`)
	s := build(t, Input{Rules: []*rule.Compiled{g}, Breakers: map[string]*breaker.Breaker{"g": brk}})
	d := s.Decide(get("/", "X-User-Id", "1"), nil)
	if d.Group != "gray" || d.Breaker != brk || d.StableTag != "v1" {
		t.Fatalf("closed breaker: %+v", d)
	}
	if d.Guard() {
		t.Fatalf("closed breaker refused: %+v", d)
	}
	brk.Record(d.Ticket, breaker.Outcome{Latency: time.Millisecond, Failed: true, End: now})
	for i := 0; i < 30; i++ {
		d := s.Decide(get("/", "X-User-Id", fmt.Sprint(i)), nil)
		if d.Guard() {
			break
		}
		brk.Record(d.Ticket, breaker.Outcome{Latency: time.Millisecond, Failed: true, End: now})
	}
	if brk.State() != breaker.Open {
		t.Fatalf("breaker did not open: %v", brk.Snapshot())
	}
	// Decide itself never asks the breaker; Guard, which the data plane
	// calls after its limits, degrades the decision.
	d = s.Decide(get("/", "X-User-Id", "1"), nil)
	if d.Group != GroupGray || d.Breaker != brk {
		t.Errorf("open breaker before Guard: %+v", d)
	}
	if !d.Guard() || d.Group != GroupStable || d.Degraded != DegradedBreaker || d.Target.Name != "stable" || d.Intended.Name != "gray" || d.Tag != "v1" || d.Breaker != nil {
		t.Errorf("open breaker after Guard: %+v", d)
	}
	var tr Trace
	s.Decide(get("/", "X-User-Id", "1"), &tr)
	if !strings.HasPrefix(tr.Rules[0].Breaker, "open: error rate") {
		t.Errorf("trace breaker = %q", tr.Rules[0].Breaker)
	}
	// After open_for the breaker lets probes through; explain must not spend them.
	now = now.Add(61 * time.Second)
	for i := 0; i < 10; i++ {
		s.Decide(get("/", "X-User-Id", "1"), &tr)
	}
	probes := 0
	for i := 0; i < 10; i++ {
		if d := s.Decide(get("/", "X-User-Id", "1"), nil); !d.Guard() {
			probes++
		}
	}
	if probes != 5 {
		t.Errorf("half-open let %d probes through, want 5", probes)
	}
}

// TestDegradeLabels: a decision carries the stable target's tag, and a
// fallback relabels a gray rule's request as stable but keeps an
// experiment's request in the group it was assigned.
func TestDegradeLabels(t *testing.T) {
	gray := compile(t, `{"key":"g","type":"gray","gray_percent":100,"conditions":{"path_prefix":["/g/"]},"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"v2","stable":"v1"}}`)
	ab := compile(t, `{"key":"x","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":50,"target":"a","tag":"ctl","control":true},{"name":"B","weight":50,"target":"b"}]}`)
	s := build(t, Input{Rules: []*rule.Compiled{gray, ab}})
	tests := []struct {
		name, path                                         string
		group                                              func(Decision) bool
		wantStableTag, wantExperiment                      string
		wantGroupAfter, wantTagAfter, wantTarget, wantFrom string
	}{
		{"gray rule", "/g/1", func(d Decision) bool { return d.Group == GroupGray }, "v1", "", GroupStable, "v1", "stable", "gray"},
		{"experiment group", "/x", func(d Decision) bool { return d.Group == "B" }, "ctl", "e", "B", "ctl", "a", "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := userWhere(t, s, tt.path, tt.group)
			d := s.Decide(get(tt.path, "X-User-Id", u), nil)
			if d.StableTag != tt.wantStableTag || d.Experiment != tt.wantExperiment {
				t.Errorf("StableTag %q, Experiment %q; want %q, %q", d.StableTag, d.Experiment, tt.wantStableTag, tt.wantExperiment)
			}
			d.FallBack()
			if d.Group != tt.wantGroupAfter || d.Tag != tt.wantTagAfter || d.Degraded != DegradedFallback || d.Target.Name != tt.wantTarget || d.Intended.Name != tt.wantFrom {
				t.Errorf("after FallBack: group %q tag %q degraded %q target %s intended %s; want %q %q fallback %s %s",
					d.Group, d.Tag, d.Degraded, d.Target.Name, d.Intended.Name, tt.wantGroupAfter, tt.wantTagAfter, tt.wantTarget, tt.wantFrom)
			}
		})
	}
}

// TestExplainOfColoredRequestSpendsNoProbe: explaining a request colored
// by a trusted hop reads the gray target's breaker but never takes a
// half-open probe, and shows the open breaker's degradation.
func TestExplainOfColoredRequestSpendsNoProbe(t *testing.T) {
	now := time.Unix(1000, 0)
	brk, err := breaker.New(breaker.Config{MinRequests: 2}, breaker.Options{Name: "g", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	g := compile(t, `{"key":"g","type":"gray","gray_percent":0,"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"v2","stable":"v1"}}`)
	s := build(t, Input{Rules: []*rule.Compiled{g}, Breakers: map[string]*breaker.Breaker{"g": brk}, TrustGrayTag: true})
	colored := get("/", "X-User-Id", "1", "X-Gray-Tag", "v2")
	colored.Trusted = true
	for range 2 {
		tk, _ := brk.Allow()
		brk.Record(tk, breaker.Outcome{Failed: true, End: now})
	}
	var tr Trace
	if d := s.Decide(colored, &tr); d.Degraded != DegradedBreaker || d.Tag != "v1" || len(tr.Rules) != 1 || !strings.HasPrefix(tr.Rules[0].Breaker, "open") {
		t.Errorf("explain with the breaker open: %+v, trace %+v", d, tr)
	}
	now = now.Add(61 * time.Second)
	for range 10 {
		s.Decide(colored, &Trace{})
	}
	probes := 0
	for range 10 {
		if d := s.Decide(colored, nil); !d.Guard() {
			probes++
		}
	}
	if probes != 5 {
		t.Errorf("half-open let %d colored probes through after explain, want 5", probes)
	}
}

// TestRefusedIdentity: an identity over identity.max_length ends the
// decision before any rule: no target, no breaker ticket (a gray rule that
// claims everyone would otherwise take one), the refusal in Reject and in
// the trace.
func TestRefusedIdentity(t *testing.T) {
	brk, err := breaker.New(breaker.Config{}, breaker.Options{Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	g := compile(t, `{"key":"g","type":"gray","gray_percent":100,"targets":{"gray":"gray","stable":"stable"}}`)
	s := build(t, Input{Rules: []*rule.Compiled{g}, Breakers: map[string]*breaker.Breaker{"g": brk}, Identity: identity.Config{MaxLength: 8}})
	tests := []struct {
		name   string
		req    *attr.Map
		reject string
	}{
		{"header", get("/", "X-User-Id", "123456789"), `identity "X-User-Id" is 9 bytes, over identity.max_length 8`},
		{"cookie", get("/", "cookie", "123456789"), `identity cookie "user_id" is 9 bytes, over identity.max_length 8`},
		{"query", get("/", "query", "1234567890"), `identity query "user_id" is 10 bytes, over identity.max_length 8`},
		{"at the limit", get("/", "X-User-Id", "12345678"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr Trace
			d := s.Decide(tt.req, &tr)
			if d.Reject != tt.reject {
				t.Fatalf("Reject = %q, want %q", d.Reject, tt.reject)
			}
			if tt.reject == "" {
				if d.Target == nil || d.Rule != "g" {
					t.Errorf("accepted id: %+v", d)
				}
				return
			}
			if d.Target != nil || d.Rule != "" || d.Policy == nil || d.Identity.Refused == nil || len(tr.Rules) != 0 ||
				tr.Reason != "refused before any rule (400): "+tt.reject {
				t.Errorf("refused: decision %+v, trace %+v", d, tr)
			}
			if d := s.Decide(tt.req, nil); d.Breaker != nil || d.Reject != tt.reject {
				t.Errorf("live refused decision: %+v", d)
			}
		})
	}
}
