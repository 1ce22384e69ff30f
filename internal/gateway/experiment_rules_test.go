package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/experiment"
	"github.com/graygate/graygate/internal/tags/redistest"
	"github.com/graygate/graygate/internal/testproc"
)

// startShopYAML is startShop on a config text of the caller's, so that a
// test can reload a variant of it.
func startShopYAML(t *testing.T, yaml string) (*env, *syncBuffer, chan string) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	logs := &syncBuffer{}
	srm := make(chan string, 10)
	e := &env{t: t, options: func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		o.OnSRM = func(a experiment.SRMAlert) { srm <- fmt.Sprintf("%s %g", a.Experiment, a.PValue) }
	}}
	e.restart(cfg)
	return e, logs, srm
}

// reloadYAML makes yaml the gateway's config, keeping its data dir.
func (e *env) reloadYAML(yaml string) {
	e.t.Helper()
	err := e.gw.ReloadConfigFile(context.Background(), func() (*config.Config, error) {
		c, err := config.Parse([]byte(yaml))
		if err == nil {
			c.DataDir = e.gw.cfg.DataDir
		}
		return c, err
	})
	if err != nil {
		e.t.Fatalf("reload: %v", err)
	}
}

// detail reports whether a 400's details hold path with a message
// containing msg.
func detail(out map[string]any, path, msg string) bool {
	details, _ := out["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		if m["path"] == path && strings.Contains(fmt.Sprint(m["message"]), msg) {
			return true
		}
	}
	return false
}

// quiet waits d, flushing the experiments now and then, so that several
// health checks run.
func quiet(e *env, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		e.flushExperiments()
		time.Sleep(100 * time.Millisecond)
	}
}

func noSRM(t *testing.T, srm chan string, when string) {
	t.Helper()
	select {
	case got := <-srm:
		t.Errorf("%s: OnSRM(%s)", when, got)
	default:
	}
}

// TestGroupNamedHoldoutRefused: "holdout" is the group of held-out users;
// an ab group of that name is a 400 naming the field and the value, and is
// not stored.
func TestGroupNamedHoldoutRefused(t *testing.T) {
	e := start(t, baseConfig+"experiments: {holdout: {percent: 5}}\n", "")
	code, out := e.api("PUT", "/api/v1/rules/hc", `{"type":"ab","experiment_id":"hc","conditions":{"path_prefix":["/hc/"]},
		"groups":[{"name":"A","weight":50,"target":"a"},{"name":"holdout","weight":50,"target":"b"}]}`)
	if code != 400 || !detail(out, "groups[1].name", `"holdout" is reserved`) {
		t.Fatalf("PUT of a group named holdout = %d %v, want 400 naming groups[1].name", code, out)
	}
	if code, _ := e.api("GET", "/api/v1/rules/hc", nil); code != 404 {
		t.Errorf("the refused rule was stored: %d", code)
	}
}

// TestSharedExperimentIDThroughTheAPI: a second ab rule may reuse a
// running experiment_id only with the same groups, weights and control;
// otherwise its PUT is a 400 naming experiment_id and the rule that runs
// the experiment, nothing is stored, and the running rule serves on.
func TestSharedExperimentIDThroughTheAPI(t *testing.T) {
	e := start(t, baseConfig+"experiments: {srm_action: freeze}\n", "")
	e.mustPut("ccx", `{"type":"ab","experiment_id":"ccx_id","conditions":{"path_prefix":["/c/"]},"groups":[{"name":"A","weight":50,"target":"a"},{"name":"B","weight":50,"target":"b"}]}`)
	code, out := e.api("PUT", "/api/v1/rules/dup", `{"type":"ab","experiment_id":"ccx_id","conditions":{"path_prefix":["/d/"]},"groups":[{"name":"X","weight":50,"target":"a"},{"name":"Y","weight":50,"target":"b"}]}`)
	if code != 400 || !detail(out, "experiment_id", `"ccx_id" is the experiment of rule "ccx", whose groups are A 50, B 50 (control A)`) {
		t.Fatalf("PUT of another split under a running experiment_id = %d %v, want 400 naming experiment_id and rule ccx", code, out)
	}
	if code, _ := e.api("GET", "/api/v1/rules/dup", nil); code != 404 {
		t.Errorf("the refused rule was stored: %d", code)
	}
	if a, err := e.get("/c/x", "X-User-Id", "u1"); err != nil || a.rule != "ccx" {
		t.Errorf("rule ccx after the refused PUT: %+v %v", a, err)
	}
	// The same split on another route is one experiment in two rules.
	e.mustPut("dup", `{"type":"ab","experiment_id":"ccx_id","conditions":{"path_prefix":["/d/"]},"groups":[{"name":"A","weight":50,"target":"a"},{"name":"B","weight":50,"target":"b"}]}`)
	a, _ := e.get("/c/x", "X-User-Id", "u7")
	if d, err := e.get("/d/x", "X-User-Id", "u7"); err != nil || d.rule != "dup" || d.group != a.group {
		t.Errorf("the same user on the two rules of one experiment: %+v and %+v (%v)", a, d, err)
	}
}

// TestUnleashSplitAsTheSDK: an Unleash-mode ab rule puts a user in the
// group an Unleash SDK gives them for the flag defined in Unleash with the
// same variants, through the real listener: 50/50 (stored 500/500) puts
// user 1001 of group id checkout-feature in control; an even three-way
// split, which Unleash stores 334/333/333, takes weights 33.4/33.3/33.3 and
// agrees with the SDK's walk for every id of unleash-variants.json.
func TestUnleashSplitAsTheSDK(t *testing.T) {
	e := start(t, baseConfig, "")
	e.mustPut("un50", `{"type":"ab","experiment_id":"un50","hash":"unleash","group_id":"checkout-feature","conditions":{"path_prefix":["/u/"]},
		"groups":[{"name":"control","weight":50,"target":"a"},{"name":"treatment","weight":50,"target":"b"}]}`)
	for uid, want := range map[string]string{"1001": "control", "1000": "treatment"} {
		if a, err := e.get("/u/x", "X-User-Id", uid); err != nil || a.group != want {
			t.Errorf("user %s: %+v %v, want %s", uid, a, err, want)
		}
	}
	e.mustPut("un3", `{"type":"ab","experiment_id":"un3","hash":"unleash","group_id":"checkout-feature","conditions":{"path_prefix":["/three/"]},
		"groups":[{"name":"A","weight":33.4,"target":"a"},{"name":"B","weight":33.3,"target":"b"},{"name":"C","weight":33.3,"target":"a"}]}`)
	var doc struct {
		Variants []struct {
			GroupID        string `json:"group_id"`
			ID             string
			UnleashWeights []int `json:"unleash_weights"`
			Expected       string
		} `json:"variants"`
	}
	data, err := os.ReadFile("../bucket/testdata/unleash-variants.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	n, seen := 0, map[string]bool{}
	for _, c := range doc.Variants {
		if c.GroupID != "checkout-feature" || fmt.Sprint(c.UnleashWeights) != "[334 333 333]" {
			continue
		}
		a, err := e.get("/three/x", "X-User-Id", c.ID)
		if err != nil || a.group != c.Expected {
			t.Errorf("user %q: %+v %v, Unleash gives %s", c.ID, a, err, c.Expected)
		}
		n++
		seen[c.Expected] = true
	}
	if n != 44 || len(seen) != 3 {
		t.Fatalf("%d vectors of the three-way split, groups %v", n, seen)
	}
}

// TestBinomialTinyValueThroughEventsAPI: a posted binomial event of value
// 1e-7 converts its unit, as any value but 0 does.
func TestBinomialTinyValueThroughEventsAPI(t *testing.T) {
	e, _, _ := startShop(t, "")
	pipeline(t, e, exposures("exp_checkout_2026", []string{"t1", "t2", "t3"}), 1)
	code, out := e.postEvents("events-token", []any{
		map[string]any{"unit": "t1", "metric": "signup", "value": 1e-7},
		map[string]any{"unit": "t2", "metric": "signup", "value": 0.000001},
		map[string]any{"unit": "t3", "metric": "signup", "value": 0},
	})
	if code != 200 || out["conversions"] != 2.0 {
		t.Fatalf("POST /api/v1/events = %d %v, want 200 with 2 conversions", code, out)
	}
	res, _ := e.results("checkout")
	n := int64(0)
	for _, g := range res.Groups {
		n += g.Metrics["signup"].Count
	}
	if n != 2 {
		t.Errorf("signups = %d, want 2 (1e-7 and 1e-6 convert, 0 does not)", n)
	}
}

// TestSRMAllocationChangeNotFlagged: ending the holdout (a live reload)
// and new weights by a PUT change what the split should be; units assigned
// before must not make the experiment mismatched and frozen at once, with
// no new traffic. The results say since when the split is judged.
func TestSRMAllocationChangeNotFlagged(t *testing.T) {
	base := shopConfig(t, "  srm_action: freeze")
	held := strings.Replace(base, "  srm_action: freeze", "  srm_action: freeze\n  holdout: {percent: 10}", 1)
	e, _, srm := startShopYAML(t, held)
	var reqs []preq
	for _, id := range ids("al-", 0, 3000) {
		reqs = append(reqs, preq{method: "GET", path: "/shop/item", uid: id, status: 200})
	}
	pipeline(t, e, reqs, 4)
	e.flushExperiments()
	if res, body := e.results("checkout"); !res.SRM.Judged || !res.SRM.OK {
		t.Fatalf("with the holdout: %s", body)
	}
	e.reloadYAML(base) // the holdout ends
	quiet(e, 1500*time.Millisecond)
	res, body := e.results("checkout")
	if _, r := e.api("GET", "/api/v1/rules/checkout", nil); r["rolled_back"] != false || res.SRM.Alert || !res.SRM.OK || res.SRMSince == "" {
		t.Fatalf("after the holdout ended: rolled_back %v, results %s", r["rolled_back"], body)
	}
	noSRM(t, srm, "after the holdout ended")
	e.mustPut("checkout", map[string]any{"type": "ab", "experiment_id": "exp_checkout_2026", "conditions": map[string]any{"path_prefix": []string{"/shop/", "/api/order/"}},
		"groups": []map[string]any{{"name": "A", "weight": 80, "target": "ga"}, {"name": "B", "weight": 20, "target": "gb"}}})
	quiet(e, 1500*time.Millisecond)
	if _, r := e.api("GET", "/api/v1/rules/checkout", nil); r["rolled_back"] != false {
		t.Fatalf("after 50/50 → 80/20: frozen: %v", r)
	}
	noSRM(t, srm, "after 50/50 → 80/20")
}

// TestSRMResumeSurvivesRestart: an operator's resume of a rule frozen for
// a sample-ratio mismatch holds across a restart; the alert is not sent
// again and the rule is not frozen again.
func TestSRMResumeSurvivesRestart(t *testing.T) {
	e, _, srm := startShop(t, "  srm_action: freeze")
	var reqs []preq
	for i, id := range ids("rs-", 0, 10000) {
		if groupOf("exp_checkout_2026", id) == "B" && i%10 == 0 {
			continue // a tenth of B never arrives
		}
		reqs = append(reqs, preq{method: "GET", path: "/shop/item", uid: id, status: 200})
	}
	pipeline(t, e, reqs, 8)
	e.flushExperiments()
	waitFor(t, "the freeze", 20*time.Second, func() bool {
		_, r := e.api("GET", "/api/v1/rules/checkout", nil)
		return r["rolled_back"] == true
	})
	select {
	case <-srm:
	case <-time.After(10 * time.Second):
		t.Fatal("OnSRM was not called")
	}
	if code, out := e.api("POST", "/api/v1/rules/checkout/resume", nil); code != 200 {
		t.Fatalf("resume = %d %v", code, out)
	}
	quiet(e, time.Second)
	cfg := e.gw.cfg
	e.shutdown()
	e.restart(cfg)
	quiet(e, 1500*time.Millisecond)
	if _, r := e.api("GET", "/api/v1/rules/checkout", nil); r["rolled_back"] != false {
		t.Errorf("after a restart the resumed rule is frozen again: %v", r)
	}
	noSRM(t, srm, "after the resume and a restart")
	_, hist := e.api("GET", "/api/v1/rules/checkout/history", nil)
	h, _ := json.Marshal(hist)
	if n := strings.Count(string(h), `"by":"srm"`); n != 1 {
		t.Errorf("%d freezes by srm in the history, want 1: %s", n, h)
	}
	if res, body := e.results("checkout"); res.SRMSince == "" || res.SRM.Alert {
		t.Errorf("results after the resume: %s", body)
	}
}

// TestEventsAPIRedisHung: with the fleet's Redis hung (SIGSTOP), POST
// /api/v1/events answers promptly once the events are buffered, and a
// full buffer is a prompt 503 with Retry-After that says why.
func TestEventsAPIRedisHung(t *testing.T) {
	srv := redistest.Start(t)
	e, _, _ := startShop(t, "  store: redis://"+srv.Addr()+"/0\n  buffer_events: 20")
	pipeline(t, e, exposures("exp_checkout_2026", ids("rh-", 0, 10)), 1)
	e.flushExperiments()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	info, err := c.Info(context.Background(), "server").Result()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	testproc.Freeze(t, pid)
	post := func() (*http.Response, []byte, time.Duration) {
		var events []map[string]any
		for i := range 15 {
			events = append(events, map[string]any{"unit": "rh-" + strconv.Itoa(i%10), "metric": "signup"})
		}
		js, _ := json.Marshal(map[string]any{"events": events})
		req, _ := http.NewRequest("POST", e.admin+"/api/v1/events", bytes.NewReader(js))
		req.Header.Set("Authorization", "Bearer events-token")
		began := time.Now()
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body, time.Since(began)
	}
	refused := false
	for i := 0; i < 3 && !refused; i++ {
		resp, body, took := post()
		switch {
		case resp.StatusCode == 200 && took < 1500*time.Millisecond:
		case resp.StatusCode == 503 && i > 0 && took < 500*time.Millisecond:
			refused = true
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || !strings.Contains(string(body), "experiments.buffer_events") {
				t.Errorf("503 with Retry-After %q: %s", resp.Header.Get("Retry-After"), body)
			}
		default:
			t.Fatalf("POST %d with Redis hung: %d after %v: %s", i+1, resp.StatusCode, took, body)
		}
	}
	if !refused {
		t.Errorf("a buffer of 20 took three POSTs of 15 while Redis was hung")
	}
}
