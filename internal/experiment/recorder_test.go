package experiment

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/stats"
)

func metricOf(t *testing.T, res *Results, group, metric string) stats.MetricResult {
	t.Helper()
	for _, g := range res.Groups {
		if g.Name == group {
			return g.Metrics[metric]
		}
	}
	t.Fatalf("no group %q in %+v", group, res.Groups)
	return stats.MetricResult{}
}

// TestObserve drives the recorder the way the data plane does and checks
// every rule of attribution.
func TestObserve(t *testing.T) {
	clk := newClock()
	logPath := filepath.Join(t.TempDir(), "exposures.jsonl")
	r := newRecorder(t, Options{Now: clk.Now, ExposureLog: logPath, Gateway: "gw-test"})
	snap := snapshot(t, router.Input{Versions: map[string]int64{"checkout": 3}}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))

	groups := map[string]string{}
	for i := range 40 {
		u := "u" + strconv.Itoa(i)
		d := serve(r, snap, "GET", "/shop/item", u, 200)
		groups[u] = d.Group
		serve(r, snap, "GET", "/shop/again", u, 200) // a repeat: not a second exposure
	}
	// Purchases: a POST to /api/order that succeeds converts; a failed one
	// does not; a GET does not. The revenue header adds to the unit's value.
	serve(r, snap, "POST", "/api/order/1", "u0", 201, "12.5")
	serve(r, snap, "POST", "/api/order/2", "u0", 201, "0.25") // a second order: converted once, revenue 12.75
	serve(r, snap, "POST", "/api/order/3", "u1", 500)
	serve(r, snap, "GET", "/api/order/4", "u2", 200)
	serve(r, snap, "POST", "/api/order/5", "u3", 200, "not a number")
	// A purchase outside the rule's scope converts an exposed unit, and
	// counts for nothing for a unit the experiment never saw.
	serve(r, snap, "POST", "/api/order", "u4", 201)
	serve(r, snap, "POST", "/api/order", "stranger", 201)
	flush(t, r)
	res := results(t, r, "checkout")
	if res.Experiment != "exp_checkout" || res.RuleVersion != 3 || res.Control != "A" || res.Rule != "checkout" || res.Store != "file" {
		t.Errorf("results header = %+v", res)
	}
	var total int64
	for _, g := range res.Groups {
		total += g.Units
	}
	if total != 40 {
		t.Fatalf("exposed units = %d, want 40: %+v", total, res.Groups)
	}
	want := map[string]int64{"A": 0, "B": 0}
	for _, u := range []string{"u0", "u3", "u4"} {
		want[groups[u]]++
	}
	g0 := groups["u0"]
	for g, n := range want {
		if m := metricOf(t, res, g, "purchase"); m.Count != n {
			t.Errorf("purchase in %s = %+v, want %d (u0 once, u3, u4; u1's order failed, u2 did not POST)", g, m, n)
		}
	}
	if m := metricOf(t, res, g0, "revenue"); m.Sum != 12.75 || m.SumSquares != 12.75*12.75 || m.Count != 1 {
		t.Errorf("revenue in %s = %+v, want sum 12.75 and sum_squares 12.75² (per-unit totals)", g0, m)
	}
	if n := r.Dropped(DropBadValue); n != 1 {
		t.Errorf("bad reported values dropped = %d, want 1", n)
	}
	// The exposure log has one line per first exposure.
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if len(l) != 6 || l["experiment"] != "exp_checkout" || l["rule_version"] != 3.0 || l["gateway"] != "gw-test" || l["group"] != groups[l["unit"].(string)] {
			t.Errorf("log line %s", sc.Text())
		}
		if ts, err := time.Parse(time.RFC3339Nano, l["ts"].(string)); err != nil || !ts.Equal(clk.Now().Add(-time.Millisecond)) {
			t.Errorf("log ts %v (%v), want the request start %v", l["ts"], err, clk.Now().Add(-time.Millisecond))
		}
		lines++
	}
	if lines != 40 {
		t.Errorf("exposure log has %d lines, want 40", lines)
	}
}

// TestAttribution: the group is the one recorded at first exposure, never
// recomputed from a later rule; conversions outside the window and
// before the exposure do not count; a rolled-back rule exposes nobody.
func TestAttribution(t *testing.T) {
	clk := newClock()
	r := newRecorder(t, Options{Now: clk.Now})
	snap := snapshot(t, router.Input{Versions: map[string]int64{"checkout": 1}}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{Window: time.Hour}))
	d := serve(r, snap, "GET", "/shop/", "alice", 200)
	first := d.Group
	other := map[string]string{"A": "B", "B": "A"}[first]
	// The rule changes: everyone now goes to the other group.
	flipped := strings.Replace(checkoutRule, `"weight":50,"target":"a"},{"name":"B","weight":50`, map[string]string{
		"A": `"weight":0,"target":"a"},{"name":"B","weight":100`, "B": `"weight":100,"target":"a"},{"name":"B","weight":0`}[first], 1)
	snap2 := snapshot(t, router.Input{Versions: map[string]int64{"checkout": 2}}, flipped)
	r.SetCatalog(NewCatalog(snap2, Settings{Window: time.Hour}))
	if d := serve(r, snap2, "GET", "/shop/", "alice", 200); d.Group != other {
		t.Fatalf("the flipped rule sends alice to %s", d.Group)
	}
	serve(r, snap2, "POST", "/api/order/1", "alice", 200, "5")
	clk.Add(2 * time.Hour)
	serve(r, snap2, "POST", "/api/order", "bob", 200) // bob is not exposed yet …
	clk.Add(time.Second)
	serve(r, snap2, "GET", "/shop/", "bob", 200)               // … and his order came first
	serve(r, snap2, "POST", "/api/order/2", "alice", 200, "7") // outside alice's window
	flush(t, r)
	res := results(t, r, "checkout")
	if res.RuleVersion != 2 {
		t.Errorf("rule_version = %d, want the current 2", res.RuleVersion)
	}
	if m := metricOf(t, res, first, "purchase"); m.Units != 1 || m.Count != 1 {
		t.Errorf("alice's group %s: %+v, want her unit and her conversion there", first, m)
	}
	if m := metricOf(t, res, first, "revenue"); m.Sum != 5 {
		t.Errorf("alice's revenue = %v, want 5 (7 came after the window)", m.Sum)
	}
	if m := metricOf(t, res, other, "purchase"); m.Units != 1 || m.Count != 0 {
		t.Errorf("bob's group %s: %+v, want bob exposed, not converted", other, m)
	}
	// Rolled back: nobody new is exposed, but exposed units still convert.
	rolled := snapshot(t, router.Input{Versions: map[string]int64{"checkout": 3}, RolledBack: map[string]bool{"checkout": true}}, checkoutRule)
	r.SetCatalog(NewCatalog(rolled, Settings{Window: time.Hour}))
	serve(r, rolled, "GET", "/shop/", "carol", 200)
	serve(r, rolled, "POST", "/api/order", "bob", 200)
	flush(t, r)
	res = results(t, r, "checkout")
	if !res.RolledBack {
		t.Errorf("results do not say rolled_back")
	}
	u1, _ := groupOf(res, "A")
	u2, _ := groupOf(res, "B")
	if u1+u2 != 2 {
		t.Errorf("units while rolled back = %d, want still 2 (carol was not randomized)", u1+u2)
	}
	if m := metricOf(t, res, other, "purchase"); m.Count != 1 {
		t.Errorf("bob's purchase while rolled back: %+v", m)
	}
}

// TestHoldoutGroup: held-out units are counted as their own group, with
// the holdout's share as its weight.
func TestHoldoutGroup(t *testing.T) {
	r := newRecorder(t, Options{})
	snap := snapshot(t, router.Input{Holdout: rule.NewHoldout(20, "")}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	held := 0
	for i := range 2000 {
		if d := serve(r, snap, "GET", "/shop/", "h"+strconv.Itoa(i), 200); d.Group == GroupHoldout {
			held++
		}
	}
	flush(t, r)
	res := results(t, r, "checkout")
	if n, ok := groupOf(res, GroupHoldout); !ok || int(n) != held || held == 0 {
		t.Fatalf("holdout units = %d (%v), want %d", n, ok, held)
	}
	for _, g := range res.Groups {
		want := map[string]float64{"A": 40, "B": 40, GroupHoldout: 20}[g.Name]
		if g.Weight != want {
			t.Errorf("group %s weight %v, want %v", g.Name, g.Weight, want)
		}
	}
	if !res.SRM.Judged || !res.SRM.OK {
		t.Errorf("a clean split with a holdout: %+v", res.SRM)
	}
}

func TestPostEvents(t *testing.T) {
	clk := newClock()
	r := newRecorder(t, Options{Now: clk.Now})
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	d := serve(r, snap, "GET", "/shop/", "u1", 200)
	before := clk.Now().Add(-time.Hour).Format(time.RFC3339)
	after := clk.Now().Add(time.Minute).Format(time.RFC3339Nano)
	body := `{"events": [
	  {"unit": "u1", "metric": "signup", "value": 1, "ts": "` + after + `"},
	  {"unit": "u1", "metric": "nosuch"},
	  {"unit": "", "metric": "signup"},
	  {"unit": "u1", "metric": "revenue"},
	  {"unit": "u1", "metric": "revenue", "value": 3.5, "ts": "yesterday"},
	  {"unit": "u1", "metric": "revenue", "value": 2.25},
	  {"unit": "u1", "metric": "revenue", "value": 1, "ts": "` + before + `"},
	  {"unit": "u1", "metric": "signup", "colour": "red"},
	  {"unit": "u1", "metric": "revenue", "value": "7"},
	  7
	]}`
	res, err := r.PostEvents(context.Background(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 3 || res.Rejected != 7 {
		t.Errorf("accepted %d, rejected %d, want 3 and 7", res.Accepted, res.Rejected)
	}
	var got []string
	for _, p := range res.Problems {
		got = append(got, p.Path+": "+p.Message)
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`events[1].metric: unknown metric "nosuch": no ab rule declares it; declared: purchase, revenue, signup`,
		`events[2].unit: is required`,
		`events[3].value: is required: "revenue" is a mean metric of experiment "exp_checkout"`,
		`events[4].ts: must be an RFC 3339 time such as "2026-11-30T10:30:00Z", got "yesterday"`,
		`events[7].colour: unknown field`,
		`events[8].value: expected a number, got "7"`,
		`events[9]: expected an object, got 7`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("problems\n%s\nlack %q", all, want)
		}
	}
	// The valid events were recorded at once: the signup, and 2.25 of
	// revenue (the event dated before the exposure does not count).
	out := results(t, r, "checkout")
	if m := metricOf(t, out, d.Group, "signup"); m.Count != 1 {
		t.Errorf("signup = %+v", m)
	}
	if m := metricOf(t, out, d.Group, "revenue"); m.Sum != 2.25 {
		t.Errorf("revenue = %+v, want 2.25", m)
	}
	for _, bad := range []string{`[]`, `{"events": {}}`, `{}`, `{"events": [], "x": 1}`, `nope`} {
		if _, err := r.PostEvents(context.Background(), []byte(bad)); err == nil {
			t.Errorf("PostEvents(%s) accepted", bad)
		}
	}
}

// TestSRMFlagsOnce: a mismatched split is flagged once: OnSRM, and with
// freeze the Freeze callback with a reason.
func TestSRMFlagsOnce(t *testing.T) {
	var mu sync.Mutex
	var srm []string
	frozen := make(chan string, 4)
	r := newRecorder(t, Options{
		OnSRM: func(a SRMAlert) {
			mu.Lock()
			srm = append(srm, a.Experiment)
			mu.Unlock()
			if a.PValue >= a.Threshold || a.SequentialPValue >= a.Threshold || a.Threshold != 0.001 || a.Rule != "checkout" || !a.Frozen || a.Units["A"] == 0 || a.Units["B"] == 0 {
				t.Errorf("OnSRM(%+v)", a)
			}
		},
		Freeze: func(_ context.Context, rule string, version int64, reason string) error {
			frozen <- fmt.Sprintf("%s v%d: %s", rule, version, reason)
			return nil
		},
	})
	snap := snapshot(t, router.Input{}, checkoutRule)
	version := snap.Version("checkout")
	r.SetCatalog(NewCatalog(snap, Settings{Freeze: true}))
	for i := range 3000 {
		u := "s" + strconv.Itoa(i)
		d := snap.Decide(request("/shop/", "GET", u), nil)
		if d.Group == "B" && i%5 == 0 {
			continue // drop 20% of group B
		}
		r.Observe(&d, 200, "GET", "/shop/", nil, start)
	}
	flush(t, r)
	flush(t, r)
	select {
	case got := <-frozen:
		if want := fmt.Sprintf(`checkout v%d: sample ratio mismatch in experiment "exp_checkout": SRM p-value`, version); !strings.HasPrefix(got, want) || !strings.Contains(got, "sequential p-value") {
			t.Errorf("freeze reason %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no freeze")
	}
	res := results(t, r, "checkout")
	if res.SRM.OK || !res.SRM.Judged {
		t.Errorf("SRM = %+v", res.SRM)
	}
	mu.Lock()
	if len(srm) != 1 || srm[0] != "exp_checkout" {
		t.Errorf("OnSRM calls = %v, want one", srm)
	}
	mu.Unlock()
	if len(frozen) != 0 {
		t.Errorf("frozen twice")
	}
}

// TestSRMFreezeOfAChangedRule: a Freeze that finds the rule changed since
// its check (ErrRuleChanged) freezes nothing, and the next check, which
// judges what serves then, may flag and freeze again.
func TestSRMFreezeOfAChangedRule(t *testing.T) {
	calls := make(chan int64, 4)
	var n atomic.Int32
	r := newRecorder(t, Options{
		FlushInterval: time.Millisecond, // a health check every 250 ms
		Freeze: func(_ context.Context, rule string, version int64, reason string) error {
			calls <- version
			if n.Add(1) == 1 {
				return fmt.Errorf("rule %q is at version %d: %w", rule, version+1, ErrRuleChanged)
			}
			return nil
		},
	})
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{Freeze: true}))
	for i := range 3000 {
		u := "c" + strconv.Itoa(i)
		d := snap.Decide(request("/shop/", "GET", u), nil)
		if d.Group == "B" && i%5 == 0 {
			continue
		}
		r.Observe(&d, 200, "GET", "/shop/", nil, start)
	}
	for want := range 2 {
		deadline := time.After(10 * time.Second)
		for len(calls) == 0 {
			flush(t, r)
			select {
			case <-deadline:
				t.Fatalf("freeze %d was not called", want+1)
			case <-time.After(50 * time.Millisecond):
			}
		}
		if v := <-calls; v != snap.Version("checkout") {
			t.Errorf("freeze %d of version %d, want %d", want+1, v, snap.Version("checkout"))
		}
	}
}

func TestResultsUnknown(t *testing.T) {
	r := newRecorder(t, Options{})
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	if _, err := r.Results(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), "no such experiment") {
		t.Errorf("unknown key: %v", err)
	}
	if res, err := r.Results(context.Background(), "exp_checkout"); err != nil || res.Rule != "checkout" {
		t.Errorf("by experiment id: %v %v", res, err)
	}
}

// TestConcurrentRequestsOfAUnit: a unit's two concurrent requests finish
// out of order (the later one first); the purchase on the earlier one
// still counts, because the exposure is the earliest request's.
func TestConcurrentRequestsOfAUnit(t *testing.T) {
	r := newRecorder(t, Options{})
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	page := snap.Decide(request("/shop/item", "GET", "dana"), nil)
	order := snap.Decide(request("/api/order/1", "POST", "dana"), nil)
	r.Observe(&page, 200, "GET", "/shop/item", nil, start.Add(time.Second))
	r.Observe(&order, 201, "POST", "/api/order/1", [][]byte{[]byte("9.5")}, start)
	flush(t, r)
	res := results(t, r, "checkout")
	if m := metricOf(t, res, page.Group, "purchase"); m.Units != 1 || m.Count != 1 {
		t.Errorf("purchase = %+v, want dana exposed once and converted", m)
	}
	if m := metricOf(t, res, page.Group, "revenue"); m.Sum != 9.5 {
		t.Errorf("revenue = %+v, want 9.5", m)
	}
}

// TestUnitTooLongIsCounted: with identity.max_length raised past
// MaxUnitBytes, a request's unit reaches the recorder longer than it
// keeps. Such a unit is served but never exposed, and that is counted
// (unit_too_long), not silent: the ids lost are not a random sample.
func TestUnitTooLongIsCounted(t *testing.T) {
	r := newRecorder(t, Options{})
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	tests := []struct {
		name    string
		bytes   int
		exposed bool
	}{
		{"at the bound", MaxUnitBytes, true},
		{"a byte over", MaxUnitBytes + 1, false},
		{"raised identity.max_length", 1500, false},
	}
	var want int64 // units exposed so far
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := r.Dropped(DropUnitTooLong)
			d := snap.Decide(request("/shop/item", "GET", "u"), nil)
			d.Identity.Value = strconv.Itoa(i) + strings.Repeat("x", tt.bytes-1)
			r.Observe(&d, 200, "GET", "/shop/item", nil, start)
			flush(t, r)
			if tt.exposed {
				want++
			}
			var units int64
			for _, g := range results(t, r, "checkout").Groups {
				units += g.Units
			}
			dropped := r.Dropped(DropUnitTooLong) - before
			if units != want || dropped != map[bool]uint64{true: 0, false: 1}[tt.exposed] {
				t.Errorf("a %d-byte unit: %d units exposed in all and %d counted as %s; want %d exposed, exposed %v", tt.bytes, units, dropped, DropUnitTooLong, want, tt.exposed)
			}
		})
	}
}

// TestSRMOfAStarvedGroup: an experiment whose B units never arrive (a
// client that crashes in B before its first request, the classic cause
// of a sample-ratio mismatch) is flagged although B has fewer than
// stats.SRMMinUnits units (it has none): the check gates on the units a
// group expects. The WARN names the experiment and its units, and no
// phase start, as in the first phase every unit is judged.
func TestSRMOfAStarvedGroup(t *testing.T) {
	var logs syncBuffer
	alerts := make(chan SRMAlert, 4)
	r := newRecorder(t, Options{
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		OnSRM:  func(a SRMAlert) { alerts <- a },
	})
	snap := snapshot(t, router.Input{}, checkoutRule)
	r.SetCatalog(NewCatalog(snap, Settings{}))
	for i, sent := 0, 0; sent < 200; i++ {
		d := snap.Decide(request("/shop/", "GET", "starved"+strconv.Itoa(i)), nil)
		if d.Group != "A" {
			continue
		}
		r.Observe(&d, 200, "GET", "/shop/", nil, start)
		sent++
	}
	flush(t, r)
	flush(t, r)
	res := results(t, r, "checkout")
	if !res.SRM.Judged || res.SRM.OK || !res.SRM.Alert {
		t.Fatalf("200 units in A and none in B at 50/50: SRM %+v, want judged, not ok, alert", res.SRM)
	}
	select {
	case a := <-alerts:
		if a.Experiment != "exp_checkout" || a.Units["A"] != 200 || a.Units["B"] != 0 || !a.Since.IsZero() {
			t.Errorf("OnSRM(%+v)", a)
		}
	default:
		t.Fatal("no OnSRM for a split of 200 to 0")
	}
	var warn map[string]any
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "sample ratio mismatch") {
			if err := json.Unmarshal([]byte(line), &warn); err != nil {
				t.Fatal(err)
			}
		}
	}
	if warn == nil || warn["level"] != "WARN" || warn["experiment"] != "exp_checkout" {
		t.Fatalf("no WARN naming the experiment in\n%s", logs.String())
	}
	if since, ok := warn["since"]; ok {
		t.Errorf("the WARN of a first phase has since %v", since)
	}
}

// syncBuffer is a bytes.Buffer safe for the writer's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
