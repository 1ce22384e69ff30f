package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/graygate/graygate/internal/experiment"
	"github.com/graygate/graygate/internal/tags/redistest"
)

// groupOf is the test's own model of the 50/50 split: xxh64(experiment_id
// + ":" + uid) % 10000 below 5000 is A.
func groupOf(exp, uid string) string {
	if xxhash.Sum64String(exp+":"+uid)%10000 < 5000 {
		return "A"
	}
	return "B"
}

// exposures are one GET per unit of units ids, each expected in its group.
func exposures(exp string, ids []string) []preq {
	out := make([]preq, len(ids))
	for i, id := range ids {
		out[i] = preq{method: "GET", path: "/shop/item", uid: id, status: 200, group: groupOf(exp, id)}
	}
	return out
}

func ids(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out
}

// syncBuffer is a log sink safe for concurrent writes.
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

// startShop starts a gateway with shopConfig(extra) whose log goes to a
// buffer, and whose OnSRM calls are recorded.
func startShop(t *testing.T, extra string) (*env, *syncBuffer, chan string) {
	t.Helper()
	return startShopYAML(t, shopConfig(t, extra))
}

// TestExperimentPlantedSRM drops 10% of group B's requests: the
// mismatch is flagged (results ok false, a WARN naming the experiment, the
// OnSRM hook, the metric), and with srm_action: freeze the rule is rolled
// back with the reason in its history, so everyone goes to control.
func TestExperimentPlantedSRM(t *testing.T) {
	hook := newHook(t, "")
	e, logs, srm := startShop(t, "  srm_action: freeze\nnotifications: [{name: ops, url: \""+hook.srv.URL+"\", events: [srm]}]")
	var reqs []preq
	dropped := 0
	for i, id := range ids("srm-", 0, 10000) {
		if groupOf("exp_checkout_2026", id) == "B" && i%10 == 0 {
			dropped++
			continue // the planted mismatch: a tenth of B never arrives
		}
		// Any group: the freeze may come while the traffic still flows.
		reqs = append(reqs, preq{method: "GET", path: "/shop/item", uid: id, status: 200})
	}
	pipeline(t, e, reqs, 8)
	e.flushExperiments()
	res, body := e.results("checkout")
	if res.SRM.OK || !res.SRM.Judged || !res.SRM.Alert || res.SRM.PValue == nil || *res.SRM.PValue >= 0.001 || res.SRM.SequentialPValue == nil || *res.SRM.SequentialPValue >= 0.001 {
		t.Fatalf("a planted SRM (%d of B's units dropped) is not flagged: %s", dropped, body)
	}
	select {
	case got := <-srm:
		if !strings.HasPrefix(got, "exp_checkout_2026 ") {
			t.Errorf("OnSRM(%s)", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("OnSRM was not called")
	}
	waitFor(t, "the freeze", 20*time.Second, func() bool {
		_, r := e.api("GET", "/api/v1/rules/checkout", nil)
		return r["rolled_back"] == true
	})
	_, hist := e.api("GET", "/api/v1/rules/checkout/history", nil)
	h, _ := json.Marshal(hist)
	if !strings.Contains(string(h), `"op":"rollback"`) || !strings.Contains(string(h), `"by":"srm"`) || !strings.Contains(string(h), `sample ratio mismatch in experiment \"exp_checkout_2026\"`) {
		t.Errorf("history lacks the freeze and its reason: %s", h)
	}
	if l := logs.String(); !strings.Contains(l, `"level":"WARN","msg":"sample ratio mismatch`) || !strings.Contains(l, `"experiment":"exp_checkout_2026"`) {
		t.Errorf("no WARN naming the experiment:\n%s", grepLines(l, "ratio"))
	}
	// Frozen: a B user goes to control, degraded by the rollback, and is
	// not exposed (not randomized).
	var bUser string
	for _, id := range ids("late-", 0, 100) {
		if groupOf("exp_checkout_2026", id) == "B" {
			bUser = id
			break
		}
	}
	a, err := e.get("/shop/item", "X-User-Id", bUser)
	if err != nil || a.group != "A" || a.degraded != "rollback" {
		t.Errorf("after the freeze a B user gets %+v %v", a, err)
	}
	e.flushExperiments()
	if after, _ := e.results("checkout"); !after.RolledBack || totalUnits(after) != totalUnits(res) {
		t.Errorf("after the freeze: rolled_back %v, units %d, want %d", after.RolledBack, totalUnits(after), totalUnits(res))
	}
	if m := e.metricsText(); !strings.Contains(m, `graygate_experiment_srm_p_value{experiment="exp_checkout_2026"}`) || !strings.Contains(m, `graygate_experiment_srm_sequential_p_value{experiment="exp_checkout_2026"}`) {
		t.Errorf("no SRM metric:\n%s", grepLines(m, "graygate_experiment"))
	}
	// The receiver subscribed to srm was told, once, with the numbers.
	got := hook.waitEvents(1, "the srm notification")
	b := got[0]
	units, _ := b["units"].(map[string]any)
	if b["event"] != "srm" || b["rule"] != "checkout" || b["experiment"] != "exp_checkout_2026" || b["frozen"] != true ||
		units["A"] == nil || units["B"] == nil || !strings.Contains(fmt.Sprint(b["text"]), "sample ratio mismatch in experiment exp_checkout_2026") {
		t.Errorf("srm notification = %v", b)
	}
	if p, _ := b["p_value"].(float64); p <= 0 || p >= 0.001 {
		t.Errorf("srm notification p_value = %v", b["p_value"])
	}
	if p, _ := b["sequential_p_value"].(float64); p <= 0 || p >= 0.001 {
		t.Errorf("srm notification sequential_p_value = %v", b["sequential_p_value"])
	}
	if n := len(hook.events()); n != 1 {
		t.Errorf("%d srm notifications, want one per mismatch", n)
	}
}

func totalUnits(r *experiment.Results) int64 {
	var n int64
	for _, g := range r.Groups {
		n += g.Units
	}
	return n
}

// TestExperimentCleanSplitNotFlagged runs 20 experiments of 1,000 units
// each, one per seed (a seed names the experiment and its units), with
// srm_action: freeze on: none is flagged and none frozen. Seed 4's χ²
// p-value dips to 0.00105 after about 510 units, so a health check that
// acted on χ² alone, reading it mid-run on a slow machine, froze it (CI
// did); the alert also needs the anytime-valid p-value.
func TestExperimentCleanSplitNotFlagged(t *testing.T) {
	e, logs, srm := startShop(t, "  srm_action: freeze")
	for seed := 1; seed <= 20; seed++ {
		exp := "clean_" + strconv.Itoa(seed)
		rule := map[string]any{"key": "checkout", "type": "ab", "experiment_id": exp, "conditions": map[string]any{"path_prefix": []string{"/shop/"}},
			"groups": []map[string]any{{"name": "A", "weight": 50, "target": "ga"}, {"name": "B", "weight": 50, "target": "gb"}}}
		e.mustPut("checkout", rule)
		pipeline(t, e, exposures(exp, ids(fmt.Sprintf("seed%d-user-", seed), 0, 1000)), 4)
		e.flushExperiments()
		res, body := e.results("checkout")
		if res.Experiment != exp || totalUnits(res) != 1000 {
			t.Fatalf("seed %d: %s", seed, body)
		}
		if !res.SRM.Judged || !res.SRM.OK || res.SRM.Alert {
			t.Errorf("seed %d: a clean split is flagged: %+v", seed, res.SRM)
		}
		t.Logf("seed %d: units %d/%d, SRM p = %.3f, sequential p = %.3f", seed, res.Groups[0].Units, res.Groups[1].Units, *res.SRM.PValue, *res.SRM.SequentialPValue)
	}
	if _, r := e.api("GET", "/api/v1/rules/checkout", nil); r["rolled_back"] != false {
		t.Errorf("a clean experiment was frozen: %v", r)
	}
	select {
	case got := <-srm:
		t.Errorf("OnSRM(%s) for a clean split", got)
	default:
	}
	if strings.Contains(logs.String(), "sample ratio mismatch") {
		t.Errorf("a clean split logged a mismatch")
	}
}

// TestExperimentRestart: a gateway stopped and started again on the same
// data dir keeps its counts, and units it saw before are not counted
// twice; a binomial conversion stays one, a mean value keeps adding up.
func TestExperimentRestart(t *testing.T) {
	units := loadUnits(t)[:2000]
	e, _, _ := startShop(t, "")
	shop(t, e, units[:1000], 4)
	e.flushExperiments()
	before, _ := e.results("checkout")
	cfg := e.gw.cfg
	e.shutdown()
	e.restart(cfg)
	again, _ := e.results("checkout")
	if !reflect.DeepEqual(before.Results, again.Results) {
		t.Fatalf("after a restart the results changed:\n%+v\n%+v", before.Results, again.Results)
	}
	// The first 1,000 units come back and order again; 1,000 more arrive.
	shop(t, e, units, 4)
	e.flushExperiments()
	after, _ := e.results("checkout")
	if totalUnits(after) != 2000 {
		t.Errorf("units after the restart = %d, want 2000", totalUnits(after))
	}
	for _, g := range after.Groups {
		var conv int64
		var revenue float64
		for _, u := range units {
			if u.group != g.Name {
				continue
			}
			if len(u.orders) > 0 {
				conv++
			}
			// The first 1,000 ordered twice (before and after the restart).
			times := 1.0
			if u.id < units[1000].id {
				times = 2
			}
			for _, a := range u.orders {
				v, _ := strconv.ParseFloat(a, 64)
				revenue += times * v
			}
		}
		if m := g.Metrics["purchase"]; m.Count != conv {
			t.Errorf("group %s: %d purchases, want %d (one per converted unit)", g.Name, m.Count, conv)
		}
		if m := g.Metrics["revenue"]; fmt.Sprintf("%.2f", m.Sum) != fmt.Sprintf("%.2f", revenue) {
			t.Errorf("group %s: revenue %.2f, want %.2f", g.Name, m.Sum, revenue)
		}
	}
}

// TestParkedConversionSurvivesRestart: a conversion posted before its
// unit's exposure is recorded waits for it across a restart of the
// gateway on the same data dir, and counts once the exposure comes
// through the data plane.
func TestParkedConversionSurvivesRestart(t *testing.T) {
	e, _, _ := startShop(t, "")
	// Dated ahead of the exposure to come (within the events API's five
	// minutes), as when a backend's clock runs ahead of this gateway's.
	ts := time.Now().Add(3 * time.Minute).UTC().Format(time.RFC3339Nano)
	code, out := e.postEvents("events-token", []any{map[string]any{"unit": "parked-1", "metric": "signup", "ts": ts}})
	if code != 200 || out["conversions"] != 1.0 {
		t.Fatalf("POST /api/v1/events = %d %v, want 200 with 1 conversion", code, out)
	}
	cfg := e.gw.cfg
	e.shutdown()
	e.restart(cfg)
	pipeline(t, e, exposures("exp_checkout_2026", []string{"parked-1"}), 1)
	e.flushExperiments()
	res, _ := e.results("checkout")
	n := int64(0)
	for _, g := range res.Groups {
		n += g.Metrics["signup"].Count
	}
	if n != 1 {
		t.Errorf("signups after the restart = %d, want 1 (the conversion waiting for its exposure)", n)
	}
}

// TestEventsDuplicateKeys: an event that gives a member twice is refused,
// named by its index and the member, and the rest of the batch is
// recorded; "events" given twice refuses the body and records nothing.
// encoding/json alone would have read the last value of each.
func TestEventsDuplicateKeys(t *testing.T) {
	e, _, _ := startShop(t, "")
	pipeline(t, e, exposures("exp_checkout_2026", []string{"dup-1", "dup-2"}), 1)
	code, out := e.postEvents("events-token", []any{
		json.RawMessage(`{"unit": "dup-1", "unit": "dup-2", "metric": "signup"}`),
		json.RawMessage(`{"unit": "dup-2", "metric": "revenue", "value": 5, "value": 500}`),
		map[string]any{"unit": "dup-1", "metric": "signup"},
	})
	if code != 400 || out["accepted"] != 1.0 || out["rejected"] != 2.0 {
		t.Fatalf("POST /api/v1/events = %d %v, want 400 with 1 accepted and 2 rejected", code, out)
	}
	d, _ := json.Marshal(out["details"])
	for _, want := range []string{
		`{"message":"duplicate key: \"unit\" is given more than once in the same object","path":"events[0].unit"}`,
		`{"message":"duplicate key: \"value\" is given more than once in the same object","path":"events[1].value"}`,
	} {
		if !strings.Contains(string(d), want) {
			t.Errorf("details %s lack %s", d, want)
		}
	}
	res, _ := e.results("checkout")
	signups, revenue := int64(0), 0.0
	for _, g := range res.Groups {
		signups += g.Metrics["signup"].Count
		revenue += g.Metrics["revenue"].Sum
	}
	if signups != 1 || revenue != 0 {
		t.Errorf("recorded %d signups and revenue %v, want 1 and 0", signups, revenue)
	}

	body := `{"events": [{"unit": "dup-2", "metric": "signup"}], "events": []}`
	req, _ := http.NewRequest("POST", e.admin+"/api/v1/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer events-token")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var refused struct {
		Details []struct{ Path, Message string }
	}
	_ = json.Unmarshal(raw, &refused)
	if resp.StatusCode != 400 || len(refused.Details) != 1 || refused.Details[0].Path != "events" || !strings.HasPrefix(refused.Details[0].Message, "duplicate key") {
		t.Errorf("a body with events twice = %d %s, want 400 naming events as a duplicate key", resp.StatusCode, raw)
	}
	res, _ = e.results("checkout")
	signups = 0
	for _, g := range res.Groups {
		signups += g.Metrics["signup"].Count
	}
	if signups != 1 {
		t.Errorf("after the refused body, %d signups, want 1", signups)
	}
}

// TestExperimentEventsAPI: per-event errors named by index and field,
// the valid events of the batch recorded; the events role may post events
// and nothing else; a viewer may not post them.
func TestExperimentEventsAPI(t *testing.T) {
	e, _, _ := startShop(t, "")
	pipeline(t, e, exposures("exp_checkout_2026", []string{"ev-1", "ev-2"}), 1)
	code, out := e.postEvents("events-token", []any{
		map[string]any{"unit": "ev-1", "metric": "signup"},
		map[string]any{"unit": "ev-1", "metric": "sign_up"},
		map[string]any{"unit": "ev-2", "metric": "revenue", "value": 19.99},
		map[string]any{"unit": "ev-2", "metric": "revenue", "value": "19.99"},
		map[string]any{"unit": "ev-2", "metric": "signup", "ts": "2026-02-30T00:00:00Z"},
		map[string]any{"metric": "signup"},
	})
	if code != 400 || out["accepted"] != 2.0 || out["rejected"] != 4.0 || out["error"] != "4 of 6 events rejected; the other 2 were recorded" {
		t.Fatalf("POST /api/v1/events = %d %v", code, out)
	}
	d, _ := json.Marshal(out["details"])
	for _, want := range []string{
		`{"message":"unknown metric \"sign_up\": no ab rule declares it; declared: purchase, revenue, signup","path":"events[1].metric"}`,
		`{"message":"expected a number, got \"19.99\"","path":"events[3].value"}`,
		`"path":"events[4].ts"`,
		`{"message":"is required: the identity value the gateway routes the user by","path":"events[5].unit"}`,
	} {
		if !strings.Contains(string(d), want) {
			t.Errorf("details %s lack %s", d, want)
		}
	}
	res, _ := e.results("checkout")
	signups, revenue := int64(0), 0.0
	for _, g := range res.Groups {
		signups += g.Metrics["signup"].Count
		revenue += g.Metrics["revenue"].Sum
	}
	if signups != 1 || revenue != 19.99 {
		t.Errorf("recorded: %d signups, %v revenue; want the two valid events", signups, revenue)
	}
	tests := []struct {
		name, method, path, token string
		want                      int
	}{
		{"events token posts events", "POST", "/api/v1/events", "events-token", 200},
		{"events token reads no rules", "GET", "/api/v1/rules", "events-token", 403},
		{"events token reads no results", "GET", "/api/v1/experiments/checkout/results", "events-token", 403},
		{"viewer reads results", "GET", "/api/v1/experiments/checkout/results", "viewer-token", 200},
		{"viewer posts no events", "POST", "/api/v1/events", "viewer-token", 403},
		{"no token", "POST", "/api/v1/events", "", 401},
		{"unknown experiment", "GET", "/api/v1/experiments/nope/results", "viewer-token", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, e.admin+tt.path, strings.NewReader(`{"events": []}`))
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%s %s with %q = %d %s, want %d", tt.method, tt.path, tt.token, resp.StatusCode, body, tt.want)
			}
		})
	}
}

// TestExperimentExplainDoesNotExpose: explain and a dry run decide for a
// user but expose nobody; the user's first real request does.
func TestExperimentExplainDoesNotExpose(t *testing.T) {
	e, _, _ := startShop(t, "")
	code, out := e.api("POST", "/api/v1/explain", map[string]any{"path": "/shop/item", "headers": map[string]string{"X-User-Id": "quiet"}})
	if code != 200 || out["decision"] == nil {
		t.Fatalf("explain = %d %v", code, out)
	}
	_, rule := e.api("GET", "/api/v1/rules/checkout", nil)
	delete(rule, "version")
	if code, out := e.api("PUT", "/api/v1/rules/checkout?dry_run=1", rule); code != 200 {
		t.Fatalf("dry run = %d %v", code, out)
	}
	e.flushExperiments()
	if res, body := e.results("checkout"); totalUnits(res) != 0 {
		t.Fatalf("explain or a dry run exposed someone: %s", body)
	}
	pipeline(t, e, exposures("exp_checkout_2026", []string{"quiet"}), 1)
	e.flushExperiments()
	if res, body := e.results("checkout"); totalUnits(res) != 1 {
		t.Fatalf("a real request did not expose: %s", body)
	}
}

// TestExperimentRedisOutage stops the real redis-server mid-run: routing
// keeps working, the events that do not fit the buffer are dropped and
// counted, results say the store is unavailable, and once Redis is back
// the buffer reaches it.
func TestExperimentRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	e, logs, _ := startShop(t, fmt.Sprintf("  store: redis://%s/0\n  buffer_events: 200", srv.Addr()))
	pipeline(t, e, exposures("exp_checkout_2026", ids("pre-", 0, 100)), 2)
	e.flushExperiments()
	if res, _ := e.results("checkout"); res.Store != "redis" || totalUnits(res) != 100 {
		t.Fatalf("before the outage: %s, %d units", res.Store, totalUnits(res))
	}
	srv.Stop()
	// Every request is still served, in its group.
	pipeline(t, e, exposures("exp_checkout_2026", ids("during-", 0, 500)), 4)
	e.flushExperiments()
	waitFor(t, "the drops to be counted", 20*time.Second, func() bool {
		return strings.Contains(e.metricsText(), `graygate_experiment_events_dropped_total{reason="store_unavailable"} 300`)
	})
	req, _ := http.NewRequest("GET", e.admin+"/api/v1/experiments/checkout/results", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := e.client.Do(req); err != nil || resp.StatusCode != 503 {
		t.Errorf("results while Redis is down: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if !strings.Contains(logs.String(), "experiment store: writes failing") {
		t.Errorf("the outage is not logged")
	}
	srv.Restart() // empty: the 100 units it held are gone with it
	waitFor(t, "the buffer to reach Redis", 20*time.Second, func() bool {
		e.flushExperiments()
		req, _ := http.NewRequest("GET", e.admin+"/api/v1/experiments/checkout/results", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := e.client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var r struct{ Groups []struct{ Units int64 } }
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&r) != nil {
			return false
		}
		return len(r.Groups) == 2 && r.Groups[0].Units+r.Groups[1].Units == 200
	})
	if m := e.metricsText(); !strings.Contains(m, "graygate_experiment_store_buffered_events 0") {
		t.Errorf("events still buffered:\n%s", grepLines(m, "graygate_experiment"))
	}
}

// TestExperimentFleetAgrees runs three gateways on one real Redis and one
// gateway alone (its data dir) on the same request sequence: every unit
// is exposed on one gateway and seen again on another, orders on a third,
// events posted round the fleet. The fleet's results (from any gateway)
// and the lone gateway's agree exactly, and the fleet logs each unit's
// exposure once.
func TestExperimentFleetAgrees(t *testing.T) {
	srv := redistest.Start(t)
	units := loadUnits(t)[:3000]
	dir := t.TempDir()
	var fleet []*env
	for i := range 3 {
		e, _, _ := startShop(t, fmt.Sprintf("  store: redis://%s/0\n  exposure_log: %s/gw%d.jsonl\n  gateway: gw%d", srv.Addr(), dir, i, i))
		fleet = append(fleet, e)
	}
	alone, _, _ := startShop(t, "")
	// The same sequence for both: phase by phase, the fleet's share of each
	// phase split over its gateways by unit.
	phases := [][]preq{nil, nil, nil}
	for _, u := range units {
		r := shopRequests([]unit{u})
		phases[0] = append(phases[0], r[0]) // exposure
		phases[1] = append(phases[1], r[0]) // seen again
		phases[2] = append(phases[2], r[1:]...)
	}
	for p, reqs := range phases {
		byGW := make([][]preq, 3)
		for _, r := range reqs {
			n, _ := strconv.Atoi(strings.TrimPrefix(r.uid, "u"))
			byGW[(n+p)%3] = append(byGW[(n+p)%3], r)
		}
		var wg sync.WaitGroup
		for i, e := range fleet {
			wg.Add(1)
			go func() { defer wg.Done(); pipeline(t, e, byGW[i], 2) }()
		}
		wg.Wait()
		pipeline(t, alone, reqs, 4)
	}
	var events []map[string]any
	for _, u := range units {
		if u.signup == "1" {
			events = append(events, map[string]any{"unit": u.id, "metric": "signup", "ts": time.Now().UTC().Format(time.RFC3339Nano)})
		}
	}
	for i := 0; i < len(events); i += 300 {
		batch := events[i:min(i+300, len(events))]
		if code, out := fleet[(i/300)%3].postEvents("events-token", batch); code != 200 {
			t.Fatalf("fleet events: %d %v", code, out)
		}
		if code, out := alone.postEvents("events-token", batch); code != 200 {
			t.Fatalf("lone events: %d %v", code, out)
		}
	}
	for _, e := range append(fleet, alone) {
		e.flushExperiments()
	}
	want, _ := alone.results("checkout")
	if totalUnits(want) != int64(len(units)) {
		t.Fatalf("the lone gateway counts %d units, want %d", totalUnits(want), len(units))
	}
	want.Store = "redis"
	for i, e := range fleet {
		got, body := e.results("checkout")
		if !reflect.DeepEqual(got, want) {
			w, _ := json.Marshal(want)
			t.Errorf("gateway %d of the fleet:\n%s\nthe lone gateway:\n%s", i, body, w)
		}
	}
	for _, e := range fleet {
		e.shutdown() // flushes and closes the exposure logs
	}
	seen := map[string]int{}
	for i := range 3 {
		b, err := os.ReadFile(fmt.Sprintf("%s/gw%d.jsonl", dir, i))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var x struct{ Unit, Gateway string }
			if json.Unmarshal(l, &x) != nil || x.Gateway != fmt.Sprintf("gw%d", i) {
				t.Fatalf("gw%d log line %s", i, l)
			}
			seen[x.Unit]++
		}
	}
	if len(seen) != len(units) {
		t.Errorf("the fleet logged %d units, want %d", len(seen), len(units))
	}
	for u, n := range seen {
		if n != 1 {
			t.Errorf("unit %s logged %d times across the fleet", u, n)
		}
	}
}

// TestFreezeRollsBackOnlyTheJudgedVersion: srm_action: freeze rolls back
// the rule version whose split was judged; a rule changed since (here, a
// new experiment) is left serving, with experiment.ErrRuleChanged, and
// nothing is recorded in its history.
func TestFreezeRollsBackOnlyTheJudgedVersion(t *testing.T) {
	e, _, _ := startShop(t, "  srm_action: freeze")
	_, r := e.api("GET", "/api/v1/rules/checkout", nil)
	judged, _ := r["version"].(float64)
	rule := map[string]any{"key": "checkout", "type": "ab", "experiment_id": "exp_next", "conditions": map[string]any{"path_prefix": []string{"/shop/"}},
		"groups": []map[string]any{{"name": "A", "weight": 50, "target": "ga"}, {"name": "B", "weight": 50, "target": "gb"}}}
	e.mustPut("checkout", rule)
	err := e.gw.freeze(t.Context(), "checkout", int64(judged), "sample ratio mismatch in experiment \"exp_checkout_2026\"")
	if !errors.Is(err, experiment.ErrRuleChanged) {
		t.Fatalf("freeze of version %v after a change: %v, want ErrRuleChanged", judged, err)
	}
	_, r = e.api("GET", "/api/v1/rules/checkout", nil)
	if r["rolled_back"] != false {
		t.Fatalf("the changed rule was rolled back: %v", r)
	}
	current, _ := r["version"].(float64)
	if err := e.gw.freeze(t.Context(), "checkout", int64(current), "sample ratio mismatch in experiment \"exp_next\""); err != nil {
		t.Fatalf("freeze of the current version %v: %v", current, err)
	}
	_, r = e.api("GET", "/api/v1/rules/checkout", nil)
	if r["rolled_back"] != true {
		t.Errorf("the judged version was not rolled back: %v", r)
	}
	_, hist := e.api("GET", "/api/v1/rules/checkout/history", nil)
	if h, _ := json.Marshal(hist); strings.Count(string(h), `"op":"rollback"`) != 1 || !strings.Contains(string(h), `exp_next`) {
		t.Errorf("history should hold one rollback, of exp_next: %s", h)
	}
}

// TestExperimentDataDirRemovedWhileServing: the data dir deleted under a
// running gateway (rm -rf, a /tmp cleaner) lost every exposure and
// conversion recorded afterwards, and the next start found no
// experiment data at all: the journal was a deleted file. The next flush
// now writes the experiment data back, and a restart counts every unit,
// before and after the removal.
func TestExperimentDataDirRemovedWhileServing(t *testing.T) {
	units := loadUnits(t)[:600]
	e, _, _ := startShop(t, "")
	shop(t, e, units[:300], 4)
	e.flushExperiments()
	cfg := e.gw.cfg
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	shop(t, e, units[300:], 4)
	e.flushExperiments()
	if got, _ := e.results("checkout"); totalUnits(got) != 600 {
		t.Fatalf("units while serving = %d, want 600", totalUnits(got))
	}
	e.shutdown()
	e.restart(cfg)
	if got, _ := e.results("checkout"); totalUnits(got) != 600 {
		t.Errorf("units after a restart on the removed-then-written-back data dir = %d, want 600", totalUnits(got))
	}
}

// TestNoExposureCountedWhileIdle: a conversion posted for a unit that is
// never exposed is counted in /metrics as no_exposure once its minute is
// up, with no request and no event after it, in the data-dir store and in
// Redis. Before, only a later batch of events (in Redis, of the same
// experiment) swept it.
func TestNoExposureCountedWhileIdle(t *testing.T) {
	for _, store := range []string{"file", "redis"} {
		t.Run(store, func(t *testing.T) {
			extra := ""
			if store == "redis" {
				extra = fmt.Sprintf("  store: redis://%s/0", redistest.Start(t).Addr())
			}
			var offset atomic.Int64 // added to the real clock, so network deadlines stay real
			e := startWith(t, shopConfig(t, extra), "", func(o *Options) {
				o.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			})
			code, out := e.postEvents("events-token", []any{map[string]any{"unit": "never-exposed", "metric": "signup"}})
			if code != 200 || out["conversions"] != 1.0 {
				t.Fatalf("POST /api/v1/events = %d %v, want 200 with 1 conversion", code, out)
			}
			const counted = `graygate_experiment_events_dropped_total{reason="no_exposure"} 1`
			time.Sleep(300 * time.Millisecond) // three flushes
			if m := e.metricsText(); strings.Contains(m, counted) {
				t.Fatalf("no_exposure counted before the wait ended:\n%s", grepLines(m, "dropped"))
			}
			offset.Store(int64(time.Minute + time.Second))
			waitFor(t, "no_exposure counted after the end of the wait, with no traffic", 10*time.Second, func() bool {
				return strings.Contains(e.metricsText(), counted)
			})
		})
	}
}
