package console_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rolloutPlan is a plan an operator steers by hand: 10%, a long timed
// pause, 20%, a pause until promoted, 50%; with a background analysis
// whose limits never act on their own, so that only the console's
// buttons move it.
var rolloutPlan = map[string]any{
	"steps": []any{
		map[string]any{"percent": 10},
		map[string]any{"pause": "1h"},
		map[string]any{"percent": 20},
		map[string]any{"pause": map[string]any{}},
		map[string]any{"percent": 50},
	},
	"analyses": map[string]any{
		"health": map[string]any{
			"interval": "2s", "count": 3, "failure_limit": 3, "inconclusive_limit": 3,
			"checks": []any{
				map[string]any{"metric": "error_rate", "max": 0.05},
				map[string]any{"metric": "p99_ms", "max": 5000},
			},
		},
	},
	"background_analysis": "health",
}

// putRule replaces rule key with its current fields changed by edit, as
// an operator's PUT.
func (e *gw) putRule(key string, edit func(r map[string]any)) {
	e.t.Helper()
	code, r := e.api("GET", "/api/v1/rules/"+key, nil)
	if code != 200 {
		e.t.Fatalf("GET rule %s = %d %v", key, code, r)
	}
	for _, k := range []string{"key", "version", "revision", "updated_at", "updated_by", "rolled_back", "reason"} {
		delete(r, k)
	}
	edit(r)
	if code, out := e.api("PUT", "/api/v1/rules/"+key, r); code != 200 {
		e.t.Fatalf("PUT rule %s = %d %v", key, code, out)
	}
}

// rolloutState reads the rollout's state and step from the API.
func (e *gw) rolloutState(key string) (string, int, float64) {
	e.t.Helper()
	code, v := e.api("GET", "/api/v1/rules/"+key+"/rollout", nil)
	if code != 200 {
		e.t.Fatalf("GET rollout of %s = %d %v", key, code, v)
	}
	step, _ := v["step"].(float64)
	pct, _ := v["percent"].(float64)
	state, _ := v["state"].(string)
	return state, int(step), pct
}

// waitRollout polls the API until the rollout is in state at step.
func (e *gw) waitRollout(key, state string, step int) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, st, _ := e.rolloutState(key)
		if s == state && st == step {
			return
		}
		if time.Now().After(deadline) {
			_, v := e.api("GET", "/api/v1/rules/"+key+"/rollout", nil)
			e.t.Fatalf("rollout of %s is %s at step %d, want %s at step %d (message %q)", key, s, st, state, step, v["message"])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// background sends requests of the whitelisted user (who always reaches
// gray) and of others through the data plane until the test ends, so
// that the analysis has gray traffic to measure. Bounded in count.
func (e *gw) background(t *testing.T, path string) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 20000 {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			uid := "10001"
			if i%2 == 1 {
				uid = fmt.Sprint(i)
			}
			req, _ := http.NewRequest("GET", e.data+path, nil)
			req.Header.Set("X-User-Id", uid)
			if resp, err := e.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// TestBrowserRollout steers a real rollout from its rule page: the
// timeline shows the plan with the current step, the analysis checks
// with their last values and thresholds, and the events; Pause, Resume,
// Promote, Abort, Retry and Promote fully each ask first, naming the rule, and change the
// rollout the API reports and the traffic the data plane routes. A viewer
// sees the timeline and no button.
func TestBrowserRollout(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	e.background(t, "/api/user/profile")
	e.putRule("user_center_v2", func(r map[string]any) { r["gray_percent"] = 0; r["rollout"] = rolloutPlan })
	e.waitRollout("user_center_v2", "progressing", 1)

	b.login(e, adminToken)
	b.waitText(`tr[data-rule="user_center_v2"] .rollout-state`, "progressing · step 1/5")
	b.waitText(`tr[data-rule="checkout_button"] .rollout-state`, "—")
	b.click(`tr[data-rule="user_center_v2"] a.rule-key`)
	b.waitFor("the rollout timeline", `document.querySelector('#rollout[data-state="progressing"] #rollout-steps')`)
	if n := b.count("#rollout-steps li.step"); n != 5 {
		t.Errorf("the timeline has %d steps, want 5", n)
	}
	b.waitText(`#rollout-steps li[data-step="0"][data-place="done"]`, "percent 10")
	b.waitText(`#rollout-steps li[data-step="1"][data-place="current"][aria-current="step"]`, "pause 1h0m0s")
	b.waitText(`#rollout-steps li[data-step="3"][data-place="pending"]`, "pause until promoted")
	b.waitText("#rollout-percent", "gray 10%")
	b.waitText("#rollout-step", "step 1 of 5")
	// The background analysis measures the gray traffic: the checks show
	// a value against their threshold.
	b.waitForThen(func() string {
		return fmt.Sprintf("a measured error_rate (the checks say %q)", b.text("#rollout-checks"))
	},
		`(() => { const r = document.querySelector('#rollout-checks tr[data-check="health/error_rate"]');
			return r && r.querySelector('[data-col="value"]').textContent === '0' && r.dataset.result === 'passed'; })()`)
	b.waitText(`#rollout-checks tr[data-check="health/error_rate"] [data-col="threshold"]`, "max 0.05")
	b.waitText(`#rollout-checks tr[data-check="health/p99_ms"] [data-col="threshold"]`, "max 5000")
	b.waitText("#rollout-background", "error_rate 0 (max 0.05")
	b.waitText("#rollout-events", "rollout started: step 0 of 5 (percent 10)")

	// Pause: a cancelled press changes nothing; a confirmed one pauses.
	b.click("#rollout-pause")
	b.waitFor("the confirmation dialog", `document.querySelector('dialog[open]')`)
	b.click("dialog[open] [data-cancel]")
	b.waitFor("the dialog to close", `!document.querySelector('dialog[open]')`)
	if s, st, _ := e.rolloutState("user_center_v2"); s != "progressing" || st != 1 {
		t.Fatalf("after a cancelled pause the rollout is %s at step %d", s, st)
	}
	b.click("#rollout-pause")
	b.confirm("user_center_v2")
	e.waitRollout("user_center_v2", "paused", 1)
	b.waitFor("the paused timeline", `document.querySelector('#rollout[data-state="paused"] #rollout-steps li[data-step="1"].current.paused')`)
	b.waitText("#rollout-events", "by default")
	b.waitText("#rollout-events", "console: pause")
	if n := b.count("#rollout-pause"); n != 0 {
		t.Error("a paused rollout still offers Pause")
	}

	b.click("#rollout-resume")
	b.confirm("user_center_v2")
	e.waitRollout("user_center_v2", "progressing", 1)
	b.waitFor("the timeline going on", `document.querySelector('#rollout[data-state="progressing"] #rollout-pause')`)

	// Promote skips the hour's pause: 20%, then the pause until promoted.
	b.click("#rollout-promote")
	b.confirm("user_center_v2")
	e.waitRollout("user_center_v2", "paused", 3)
	b.waitText(`#rollout-steps li[data-step="3"][data-place="current"]`, "pause until promoted")
	b.waitText("#rollout-percent", "gray 20%")
	e.checkSplit(20, 200)

	// Abort: gray goes to 0 and the data plane follows.
	b.click("#rollout-abort")
	b.confirm("Abort the rollout of user_center_v2")
	e.waitRollout("user_center_v2", "aborted", 3)
	if _, _, pct := e.rolloutState("user_center_v2"); pct != 0 {
		t.Errorf("after Abort the rollout's percent is %v, want 0", pct)
	}
	b.waitFor("the aborted timeline", `document.querySelector('#rollout[data-state="aborted"] #rollout-steps li[data-step="3"].current.aborted')`)
	b.waitText("#rollout-percent", "gray 0%")
	b.waitFor("Retry instead of Abort", `document.querySelector('#rollout-retry') && !document.querySelector('#rollout-abort')`)
	for u := 1; u <= 100; u++ {
		if a := e.get("/api/user/profile", fmt.Sprint(u)); a.group == "gray" {
			t.Fatalf("after Abort user %d still goes to gray", u)
		}
	}
	b.open(e.admin + "/ui/")
	b.waitText(`tr[data-rule="user_center_v2"] .rollout-state`, "aborted · step 3/5")

	// Retry starts the plan again from step 0; Promote fully then takes it
	// to its last step: 50% gray.
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitFor("Retry", `document.querySelector('#rollout-retry')`)
	b.click("#rollout-retry")
	b.confirm("Retry user_center_v2")
	e.waitRollout("user_center_v2", "progressing", 1)
	b.waitText("#rollout-percent", "gray 10%")
	b.waitFor("Promote fully", `document.querySelector('#rollout-promote-full')`)
	b.click("#rollout-promote-full")
	b.confirm("user_center_v2")
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, _, pct := e.rolloutState("user_center_v2")
		if s == "completed" && pct == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Promote fully the rollout is %s at %v%%, want completed at its last step's 50%%", s, pct)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.waitFor("the completed timeline", `document.querySelector('#rollout[data-state="completed"]')`)
	e.checkSplit(50, 200)

	// A viewer sees the timeline and no control.
	b.click("#logout")
	b.login(e, viewerToken)
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitFor("the rollout timeline", `document.querySelector('#rollout[data-state="completed"] #rollout-steps')`)
	b.waitText("#rollout-events", "console: abort")
	if n := b.count("#rollout-actions, #rollout button"); n != 0 {
		t.Errorf("a viewer sees %d rollout controls", n)
	}
	if n := eval[int](b, writeControlsJS); n != 0 {
		t.Errorf("the rule page shows a viewer %d write controls", n)
	}
}

// metricRule adds a purchase metric to checkout_button: a POST to
// /shop/buy that succeeds converts the unit.
func metricRule(r map[string]any) {
	r["metrics"] = []any{map[string]any{"name": "purchase", "type": "binomial",
		"match": map[string]any{"method": "POST", "path_prefix": "/shop/buy", "status": "2xx"}}}
}

// groupOf asks explain which group of checkout_button user uid is in;
// explain exposes nobody.
func (e *gw) groupOf(uid string) string {
	e.t.Helper()
	code, out := e.api("POST", "/api/v1/explain", map[string]any{"path": "/shop/cart", "headers": map[string]string{"X-User-Id": uid}})
	if code != 200 {
		e.t.Fatalf("explain = %d %v", code, out)
	}
	g, _ := out["group"].(string)
	if g == "" {
		if d, ok := out["decision"].(map[string]any); ok {
			g, _ = d["group"].(string)
		}
	}
	return g
}

// TestBrowserExperimentResults sends an experiment's traffic through the
// data plane and reads its results on the rule page: the SRM card, not
// judged before there are units and healthy after; the metric's table
// with units, means, the lift with its CI, the p-value and the marker.
func TestBrowserExperimentResults(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	e.putRule("checkout_button", metricRule)
	b.login(e, adminToken)
	b.open(e.admin + "/ui/#/rules/checkout_button")
	b.waitText("#srm", "not judged yet")
	b.waitFor("the purchase table", `document.querySelector('#experiment table[data-metric="purchase"] tr[data-group="B"]')`)
	if n := b.count("#rollout, #mirror-diff"); n != 0 {
		t.Errorf("an ab rule's page shows %d rollout or mirror sections", n)
	}

	// 300 users see the shop; B's buy far more often than A's.
	units := map[string]int{}
	for u := range 300 {
		uid := fmt.Sprintf("u%d", u)
		a := e.get("/shop/cart", uid)
		units[a.group]++
		if (a.group == "B" && u%2 == 0) || (a.group == "A" && u%6 == 0) {
			if c := e.send("POST", "/shop/buy", uid); c.status != 200 {
				t.Fatalf("POST /shop/buy as %s = %d", uid, c.status)
			}
		}
	}
	t.Logf("units per group: %v", units)
	pval := `#experiment table[data-metric="purchase"] tr[data-group="B"] [data-col="p"]`
	b.waitForThen(func() string { return fmt.Sprintf("all units counted (the page says %q)", b.text("#srm-groups")) },
		fmt.Sprintf(`(() => { const a = document.querySelector('#srm-groups li[data-group="A"]'), b = document.querySelector('#srm-groups li[data-group="B"]');
			return a && b && a.textContent.startsWith('A %d unit') && b.textContent.startsWith('B %d unit'); })()`, units["A"], units["B"]))
	b.waitFor("the p-value", fmt.Sprintf(`/^\d/.test(document.querySelector(%s).textContent)`, js(pval)))
	b.waitFor("a healthy split", `document.querySelector('#srm[data-srm="ok"]')`)
	b.waitText("#srm-verdict", "≥ 0.001")
	b.waitText("#srm-verdict", "sequential p = ")

	// The page shows what the API computed.
	_, res := e.api("GET", "/api/v1/experiments/checkout_button/results", nil)
	var cmp map[string]any
	for _, c := range res["comparisons"].([]any) {
		if c := c.(map[string]any); c["group"] == "B" && c["metric"] == "purchase" {
			cmp = c
		}
	}
	if cmp == nil {
		t.Fatalf("the results have no B/purchase comparison: %v", res)
	}
	lift := cmp["lift"].(float64)
	ci := cmp["ci95"].([]any)
	p := cmp["p_value"].(float64)
	row := `#experiment table[data-metric="purchase"] tr[data-group="B"]`
	b.waitText(row+` [data-col="lift"]`, fmt.Sprintf("+%.2f%%", lift*100))
	b.waitText(row+` [data-col="ci"]`, fmt.Sprintf("[%+.2f%%, %+.2f%%]", ci[0].(float64)*100, ci[1].(float64)*100))
	b.waitText(row+` [data-col="units"]`, fmt.Sprint(units["B"]))
	b.waitText(pval, pText(p))
	wantMark := "no"
	if p < 0.05 {
		wantMark = "yes"
	}
	if got := eval[string](b, `document.querySelector('`+row+` [data-significant]').dataset.significant`); got != wantMark {
		t.Errorf("significance marker %q for p = %v, want %q", got, p, wantMark)
	}
	b.waitText(`#experiment table[data-metric="purchase"] tr[data-group="A"] [data-col="lift"]`, "baseline")
	b.waitText("#experiment-about", "control A")
}

// pText is how the console shows a p-value (dom.js fmtNum): four
// significant digits, in exponent form below 1e-4 as JavaScript writes it
// ("3.627e-5").
func pText(p float64) string {
	if p == 0 {
		return "0"
	}
	if p < 1e-4 {
		m, ex, _ := strings.Cut(strconv.FormatFloat(p, 'e', 3, 64), "e")
		n, _ := strconv.Atoi(ex)
		return fmt.Sprintf("%se%d", m, n)
	}
	return strconv.FormatFloat(p, 'g', 4, 64)
}

// TestBrowserSRMMismatch exposes many more users of one group than of the
// other through the data plane (explain, which exposes nobody, says who
// is where) and sees the SRM card turn to a mismatch.
func TestBrowserSRMMismatch(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	e.putRule("checkout_button", metricRule)
	want := map[string]int{"A": 60, "B": 8}
	sent := map[string]int{}
	for u := 0; sent["A"] < want["A"] || sent["B"] < want["B"]; u++ {
		if u > 5000 {
			t.Fatalf("found only %v users", sent)
		}
		uid := fmt.Sprintf("s%d", u)
		g := e.groupOf(uid)
		if sent[g] >= want[g] {
			continue
		}
		if a := e.get("/shop/cart", uid); a.group != g {
			t.Fatalf("user %s: explain said %q, the data plane %q", uid, g, a.group)
		}
		sent[g]++
	}
	b.login(e, adminToken)
	b.open(e.admin + "/ui/#/rules/checkout_button")
	b.waitFor("a mismatch", `document.querySelector('#srm[data-srm="mismatch"]')`)
	b.waitText("#srm-verdict", "sample ratio mismatch")
	b.waitText("#srm-verdict", "< 0.001")
	b.waitText(`#srm-groups li[data-group="A"]`, "A 60 unit(s)")
	b.waitText(`#srm-groups li[data-group="B"]`, "B 8 unit(s)")
}

// TestBrowserMirrorDiff gives the canary a mirror with a diff: the data
// plane copies stable users' requests to the gray version and compares
// its answers with stable's, and with a second stable answer for noise;
// the rule page's diff table shows the counts and the differing fields.
func TestBrowserMirrorDiff(t *testing.T) {
	b := newTab(t)
	e := startGateway(t, nil)
	e.putRule("user_center_v2", func(r map[string]any) {
		r["mirror"] = map[string]any{"target": "gray", "percent": 100, "diff": map[string]any{"secondary": "stable", "ignore": []string{"headers.date"}}}
	})
	b.login(e, adminToken)
	b.open(e.admin + "/ui/#/rules/user_center_v2")
	b.waitText("#mirror-fields", "No answer compared yet.")
	b.waitText(`#mirror-counts [data-count="requests"] dd`, "0")
	// Users the canary leaves on stable are mirrored; the rest go to gray.
	stable := 0
	for u := 1; u <= 60; u++ {
		if a := e.get("/api/user/profile", fmt.Sprint(u)); a.group != "gray" {
			stable++
		}
	}
	b.waitFor("the diff table", `document.querySelector('#mirror-fields tr[data-path="body"][data-regression="true"]')`)
	if n := b.count("#rollout, #experiment"); n != 0 {
		t.Errorf("a rule without a rollout shows %d rollout or experiment sections", n)
	}
	// Wait until the page has every compared copy the data plane sent.
	var doc map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, doc = e.api("GET", "/api/v1/rules/user_center_v2/diff", nil)
		if doc["requests"] == float64(stable) && doc["compared"] == doc["requests"] && doc["noise_compared"] == doc["requests"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copies were not all compared: %v", doc)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, k := range []string{"requests", "compared", "status_mismatch", "noise_compared"} {
		b.waitText(fmt.Sprintf(`#mirror-counts [data-count=%q] dd`, k), fmt.Sprint(doc[k]))
	}
	b.waitText("#mirror-about", "mirrors to gray, noise from stable")
	b.waitText("#mirror-about", "ignoring headers.date")
	var body map[string]any
	for _, f := range doc["fields"].([]any) {
		if f := f.(map[string]any); f["path"] == "body" {
			body = f
		}
	}
	if body == nil {
		t.Fatalf("the API's diff has no body field: %v", doc)
	}
	row := `#mirror-fields tr[data-path="body"]`
	b.waitText(row+` [data-col="raw"]`, "100.0%")
	b.waitText(row+` [data-col="noise"]`, "0.0%")
	b.waitText(row+` [data-col="regression"]`, "regression")
	ex := body["examples"].([]any)[0].(map[string]any)
	b.waitText(row+` [data-col="examples"]`, fmt.Sprintf("%s: %s → %s", ex["request"], ex["primary"], ex["candidate"]))
}
