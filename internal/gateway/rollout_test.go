package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/rollout"
	"github.com/graygate/graygate/internal/rollout/promtest"
	"github.com/graygate/graygate/internal/testport"
)

// countingBackend is an upstream that names itself, counts what reaches
// it, and answers 500 when fail says so.
func countingBackend(t *testing.T, name string, fail func(n int64) bool) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		w.Header().Set("X-Backend", name)
		if fail != nil && fail(i) {
			w.WriteHeader(http.StatusInternalServerError)
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &n
}

// recordedNotes is a rollout.Notifier that keeps what it is told.
type recordedNotes struct {
	mu  sync.Mutex
	got []string // event rule text
	all []map[string]any
}

func (n *recordedNotes) Notify(event, rule, text string, fields map[string]any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, event+" "+rule+" "+text)
	n.all = append(n.all, fields)
}

func (n *recordedNotes) events() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, g := range n.got {
		out = append(out, strings.SplitN(g, " ", 2)[0])
	}
	return out
}

// startRollouts runs a gateway over a stable and a gray upstream.
func startRollouts(t *testing.T, stable, gray, extra string, notes rollout.Notifier) *env {
	t.Helper()
	yaml := fmt.Sprintf("default_upstream: stable\nupstreams:\n  stable: {instances: [{addr: %q}]}\n  gray: {instances: [{addr: %q}]}\n%s", stable, gray, extra)
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	e := &env{t: t, backends: map[string]string{"stable": stable, "gray": gray}, options: func(o *Options) { o.RolloutNotifier = notes }}
	e.restart(cfg)
	return e
}

// load sends requests through the data plane until stop is called: every
// other one of the whitelisted user "vip" (so that gray has traffic at any
// percentage, however slow a loaded machine serves), the rest of random
// users. It returns how many went to each X-Gray-Group.
func load(e *env, workers int) (stop func() map[string]int) {
	var mu sync.Mutex
	groups := map[string]int{}
	s := underLoad(workers, func(w, n int) {
		uid := "vip"
		if n%2 == 1 {
			uid = fmt.Sprintf("user-%d-%d-%d", w, n, rand.IntN(1<<30))
		}
		a, err := e.get("/", "X-User-Id", uid)
		if err != nil {
			return
		}
		mu.Lock()
		groups[a.group]++
		mu.Unlock()
	})
	var once sync.Once
	return func() map[string]int {
		once.Do(s)
		mu.Lock()
		defer mu.Unlock()
		return maps(groups)
	}
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// waitRollout polls GET .../rollout until its state is want (and, with
// step >= 0, its step), within d.
func waitRollout(t *testing.T, e *env, key, want string, step int, d time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(d)
	var last map[string]any
	for {
		code, v := e.api("GET", "/api/v1/rules/"+key+"/rollout", nil)
		if code == 200 {
			last = v
			if v["state"] == want && (step < 0 || v["step"] == float64(step)) {
				return v
			}
			if want != "aborted" && v["state"] == "aborted" {
				t.Fatalf("the rollout aborted: %v", v)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for rollout %s to be %s (step %d); last %d %v", key, want, step, code, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitServing waits until the data plane serves the rule's current
// version.
func waitServing(t *testing.T, e *env, key string) {
	t.Helper()
	_, r := e.api("GET", "/api/v1/rules/"+key, nil)
	rev, _ := r["revision"].(float64)
	waitFor(t, "the data plane to serve revision "+fmt.Sprint(rev), 10*time.Second, func() bool {
		return e.gw.Router().Load().Revision >= int64(rev)
	})
}

// tolerant keeps a loaded test machine's slow seconds from opening the
// breaker of tests that are not about it.
const tolerant = `,"breaker":{"p99_latency":"30s"}`

const canaryRule = `{"type":"gray","gray_percent":0,"white_list":["uid:vip"],"targets":{"gray":"gray","stable":"stable"}%s,"rollout":%s}`

// TestRolloutHealthyCompletes: a healthy gray version goes through
// 5 → pause 1s → analysis → 50 → 100 while real requests flow through the
// listener, one version per step by the rollout.
func TestRolloutHealthyCompletes(t *testing.T) {
	stable, _ := countingBackend(t, "stable", nil)
	gray, grayHits := countingBackend(t, "gray", nil)
	notes := &recordedNotes{}
	e := startRollouts(t, stable, gray, "", notes)
	stop := load(e, 8)
	defer stop()
	// A second of a loaded machine may see few requests: inconclusive,
	// tolerated.
	e.mustPut("canary", fmt.Sprintf(canaryRule, tolerant, `{"steps":[{"percent":5},{"pause":"1s"},{"analysis":"health"},{"percent":50},{"percent":100}],
		"analyses":{"health":{"interval":"1s","count":3,"inconclusive_limit":3,"checks":[
			{"metric":"error_rate","max":0.01,"min_requests":2},
			{"metric":"error_rate_vs_stable","max":0.01,"min_requests":2},
			{"metric":"p99_ms","max":5000,"min_requests":2}]}}}`))
	v := waitRollout(t, e, "canary", "completed", 5, 60*time.Second)
	groups := stop()
	if v["percent"] != 100.0 {
		t.Errorf("percent = %v", v["percent"])
	}
	ms, _ := v["measurements"].([]any)
	if len(ms) < 3 {
		t.Errorf("measurements = %v", v["measurements"])
	}
	if grayHits.Load() == 0 || groups["gray"] == 0 || groups["stable"] != 0 {
		t.Errorf("gray backend hits %d, groups %v", grayHits.Load(), groups)
	}
	waitServing(t, e, "canary")
	for i := range 20 {
		a, err := e.get("/", "X-User-Id", fmt.Sprint("after-", i))
		if err != nil || a.backend != "gray" || a.group != "gray" {
			t.Fatalf("at 100%%: %+v %v", a, err)
		}
	}
	_, h := e.api("GET", "/api/v1/rules/canary/history", nil)
	var byRollout int
	for _, it := range h["history"].([]any) {
		if it.(map[string]any)["by"] == rollout.Actor {
			byRollout++
		}
	}
	if byRollout != 6 {
		t.Errorf("%d versions by the rollout, want 6 (start and five steps): %v", byRollout, h["history"])
	}
	waitFor(t, "the completed notification", 5*time.Second, func() bool { return slices.Contains(notes.events(), rollout.EventCompleted) })
}

// TestRolloutAbortsFailingGray: a gray version that fails 30% of requests
// is aborted at the first analysis, after which no request reaches gray;
// the whitelist keeps working unless abort_whitelist.
func TestRolloutAbortsFailingGray(t *testing.T) {
	for _, abortWhitelist := range []bool{true, false} {
		t.Run(fmt.Sprintf("abort_whitelist %v", abortWhitelist), func(t *testing.T) {
			stable, _ := countingBackend(t, "stable", nil)
			gray, grayHits := countingBackend(t, "gray", func(n int64) bool { return n%10 < 3 })
			notes := &recordedNotes{}
			e := startRollouts(t, stable, gray, "", notes)
			stop := load(e, 6)
			e.mustPut("canary", fmt.Sprintf(canaryRule, `,"breaker":{"error_rate":90,"p99_latency":"30s"}`, fmt.Sprintf(`{"abort_whitelist":%v,
				"steps":[{"percent":50},{"analysis":"health"},{"percent":100}],
				"analyses":{"health":{"interval":"1s","count":3,"inconclusive_limit":3,"checks":[{"metric":"error_rate","max":0.05,"min_requests":5}]}}}`, abortWhitelist)))
			v := waitRollout(t, e, "canary", "aborted", 1, 60*time.Second)
			groups := stop()
			if groups["gray"] == 0 {
				t.Fatalf("no gray traffic before the abort: %v", groups)
			}
			if v["percent"] != 0.0 || !strings.Contains(v["message"].(string), "check error_rate failed") {
				t.Errorf("view = %v", v)
			}
			_, r := e.api("GET", "/api/v1/rules/canary", nil)
			f := r["rollout"].(map[string]any)["status"].(map[string]any)["failure"].(map[string]any)
			// The gray backend fails 3 of every 10 answers, in a fixed
			// pattern, so n of them in a row hold between 3*(n/10) and
			// 3*(n/10)+3 failures: a window of few requests (a loaded
			// machine) may read anywhere in that range.
			val, _ := f["value"].(float64)
			n, _ := f["requests"].(float64)
			lo, hi := 3*math.Floor(n/10)/n, (3*math.Floor(n/10)+3)/n
			if f["check"] != "error_rate" || f["threshold"] != "max 0.05" || n < 5 || val < lo-1e-9 || val > hi+1e-9 {
				t.Errorf("failure = %v, want a value in [%.2f, %.2f] for %v requests", f, lo, hi, n)
			}
			waitServing(t, e, "canary")
			before := grayHits.Load()
			for i := range 200 {
				a, err := e.get("/", "X-User-Id", fmt.Sprint("after-abort-", i))
				if err != nil || a.group == "gray" || a.backend != "stable" {
					t.Fatalf("after the abort: %+v %v", a, err)
				}
			}
			if got := grayHits.Load() - before; got != 0 {
				t.Errorf("%d requests reached gray after the abort", got)
			}
			a, err := e.get("/", "X-User-Id", "vip")
			if err != nil || (a.backend == "gray") == abortWhitelist {
				t.Errorf("whitelisted user after the abort: %+v %v", a, err)
			}
			waitFor(t, "the aborted notification", 5*time.Second, func() bool { return slices.Contains(notes.events(), rollout.EventAborted) })
		})
	}
}

// TestRolloutCountsGrayTransportFailures: a gray target that refuses
// connections is replayed on stable, so clients see 200s, but the
// analysis counts the failed gray attempts and aborts.
func TestRolloutCountsGrayTransportFailures(t *testing.T) {
	stable, _ := countingBackend(t, "stable", nil)
	dead := testport.Refused(t) // a closed listener's port may be given to the gateway's own listeners
	e := startRollouts(t, stable, dead, "", nil)
	stop := load(e, 4)
	defer stop()
	e.mustPut("canary", fmt.Sprintf(canaryRule, `,"breaker":{"enabled":false}`, `{"steps":[{"percent":50},{"analysis":"health"}],
		"analyses":{"health":{"interval":"1s","count":3,"inconclusive_limit":3,"checks":[{"metric":"error_rate","max":0.05,"min_requests":5}]}}}`))
	v := waitRollout(t, e, "canary", "aborted", 1, 60*time.Second)
	groups := stop()
	if groups["gray"] != 0 {
		t.Errorf("clients saw gray answers from a dead target: %v", groups)
	}
	if !strings.Contains(v["message"].(string), "1 is above max 0.05") {
		t.Errorf("message = %v", v["message"])
	}
}

// TestRolloutBreakerAborts: the gray target's breaker opens during the
// rollout and the rollout aborts with the breaker's reason.
func TestRolloutBreakerAborts(t *testing.T) {
	stable, _ := countingBackend(t, "stable", nil)
	gray, _ := countingBackend(t, "gray", func(int64) bool { return true })
	notes := &recordedNotes{}
	e := startRollouts(t, stable, gray, "", notes)
	stop := load(e, 4)
	defer stop()
	e.mustPut("canary", fmt.Sprintf(canaryRule, "", `{"steps":[{"percent":100},{"pause":"1h"}]}`))
	// At step 0 or 1: on a loaded machine the breaker may open before the
	// engine has moved past the first step.
	v := waitRollout(t, e, "canary", "aborted", -1, 60*time.Second)
	if msg := v["message"].(string); !strings.Contains(msg, "breaker opened: error rate") {
		t.Errorf("message = %q", msg)
	}
	waitFor(t, "the aborted notification", 5*time.Second, func() bool { return slices.Contains(notes.events(), rollout.EventAborted) })
	notes.mu.Lock()
	defer notes.mu.Unlock()
	for i, g := range notes.got {
		if strings.HasPrefix(g, rollout.EventAborted) && notes.all[i]["check"] != "breaker" {
			t.Errorf("aborted fields = %v", notes.all[i])
		}
	}
}

// TestRolloutPauseUntilPromotedAndControl: a pause: {} waits until an
// admin promotes; viewers may read but not act; a PUT cannot forge the
// status; actions that do not fit are refused with the right codes.
func TestRolloutPauseUntilPromotedAndControl(t *testing.T) {
	stable, _ := countingBackend(t, "stable", nil)
	gray, _ := countingBackend(t, "gray", nil)
	e := startRollouts(t, stable, gray, "admin: {tokens: [{name: watcher, token: vtok, role: viewer}]}\n", nil)
	stop := load(e, 4)
	defer stop()
	e.mustPut("canary", fmt.Sprintf(canaryRule, tolerant, `{"steps":[{"percent":10},{"pause":{}},{"percent":100}],"background_analysis":"bg",
		"analyses":{"bg":{"interval":"1s","count":3,"inconclusive_limit":100,"checks":[{"metric":"error_rate","max":0.05}]}}}`))
	waitRollout(t, e, "canary", "paused", 1, 30*time.Second)
	// Time passes (the background analysis measures), and it still waits.
	var v map[string]any
	waitFor(t, "three background measurements", 30*time.Second, func() bool {
		_, v = e.api("GET", "/api/v1/rules/canary/rollout", nil)
		ms, _ := v["measurements"].([]any)
		return len(ms) >= 3
	})
	if v["state"] != "paused" || v["step"] != 1.0 || v["percent"] != 10.0 || !strings.Contains(v["message"].(string), "waiting for promote") {
		t.Fatalf("after three measurements: %v", v)
	}
	viewer := func(method, path, body string) int {
		req, _ := http.NewRequest(method, e.admin+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer vtok")
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := viewer("GET", "/api/v1/rules/canary/rollout", ""); c != 200 {
		t.Errorf("viewer GET = %d", c)
	}
	for _, a := range rollout.Actions {
		if c := viewer("POST", "/api/v1/rules/canary/rollout/"+string(a), "{}"); c != 403 {
			t.Errorf("viewer POST %s = %d, want 403", a, c)
		}
	}
	// A GET body PUT back with a forged status keeps the stored one.
	_, r := e.api("GET", "/api/v1/rules/canary", nil)
	r["rollout"].(map[string]any)["status"] = map[string]any{"state": "completed", "step": 3, "started_at": "2026-01-01T00:00:00Z", "step_started_at": "2026-01-01T00:00:00Z"}
	r["gray_percent"] = 10
	if code, out := e.api("PUT", "/api/v1/rules/canary", r); code != 200 {
		t.Fatalf("PUT back = %d %v", code, out)
	}
	if _, v = e.api("GET", "/api/v1/rules/canary/rollout", nil); v["state"] != "paused" || v["step"] != 1.0 {
		t.Fatalf("the forged status took: %v", v)
	}
	tests := []struct {
		action, body string
		code         int
		want         string
	}{
		{"resume", "", 409, "waits for promote"},
		{"retry", "", 409, "retry restarts an aborted rollout"},
		{"explode", "", 404, "no rollout action"},
		{"pause", `{"full":true}`, 400, "full"},
		{"promote", `{"fast":true}`, 400, "fast"},
	}
	for _, tt := range tests {
		code, out := e.api("POST", "/api/v1/rules/canary/rollout/"+tt.action, tt.body)
		if b, _ := json.Marshal(out); code != tt.code || !strings.Contains(string(b), tt.want) {
			t.Errorf("POST %s %s = %d %s, want %d ...%s...", tt.action, tt.body, code, b, tt.code, tt.want)
		}
	}
	if code, _ := e.api("GET", "/api/v1/rules/nope/rollout", nil); code != 404 {
		t.Errorf("GET rollout of a missing rule = %d", code)
	}
	e.mustPut("plain", `{"type":"gray","gray_percent":1,"targets":{"gray":"gray","stable":"stable"}}`)
	if code, out := e.api("GET", "/api/v1/rules/plain/rollout", nil); code != 404 || !strings.Contains(out["error"].(string), "no rollout") {
		t.Errorf("GET rollout of a rule without one = %d %v", code, out)
	}
	code, out := e.api("POST", "/api/v1/rules/canary/rollout/promote", `{"reason":"ship it"}`)
	if code != 200 {
		t.Fatalf("promote = %d %v", code, out)
	}
	waitRollout(t, e, "canary", "completed", 3, 30*time.Second)
	waitServing(t, e, "canary")
	a, err := e.get("/", "X-User-Id", "anyone")
	if err != nil || a.backend != "gray" {
		t.Errorf("after promote: %+v %v", a, err)
	}
	_, h := e.api("GET", "/api/v1/rules/canary/history", nil)
	found := false
	for _, it := range h["history"].([]any) {
		m := it.(map[string]any)
		found = found || (m["by"] == "default" && strings.Contains(m["reason"].(string), "promoted by default: ship it"))
	}
	if !found {
		t.Errorf("no promote version by the admin token in %v", h["history"])
	}
}

// TestRolloutPrometheusCheck: a real Prometheus scrapes the gateway every
// second; a rollout's prometheus check reads the gray error rate from it
// and the rollout completes, while a query with an empty result is
// inconclusive and pauses another rollout.
func TestRolloutPrometheusCheck(t *testing.T) {
	promtest.Binary(t)
	stable, _ := countingBackend(t, "stable", nil)
	gray, _ := countingBackend(t, "gray", nil)
	e := startRollouts(t, stable, gray, "", nil)
	prom := promtest.Start(t, strings.TrimPrefix(e.admin, "http://"))
	stop := load(e, 4)
	defer stop()
	cli, err := api.NewClient(api.Config{Address: prom.URL(), Client: &http.Client{Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "prometheus to scrape the gateway", 60*time.Second, func() bool {
		val, _, _, err := promv1.NewAPI(cli).Query(context.Background(), `up{job="graygate"}`, time.Time{})
		vec, ok := val.(model.Vector)
		return err == nil && ok && len(vec) == 1 && vec[0].Value == 1
	})
	query := `(sum(rate(graygate_requests_total{rule="canary",group="gray",code="5xx"}[10s])) or vector(0)) / sum(rate(graygate_requests_total{rule="canary",group="gray"}[10s]))`
	q, _ := json.Marshal(query)
	e.mustPut("canary", fmt.Sprintf(canaryRule, tolerant, fmt.Sprintf(`{"steps":[{"percent":50},{"pause":"3s"},{"analysis":"prom"},{"percent":100}],
		"analyses":{"prom":{"interval":"2s","count":2,"inconclusive_limit":3,"checks":[{"prometheus":{"address":%q,"query":%s,"max":0.05}}]}}}`, prom.URL(), q)))
	e.mustPut("empty", `{"type":"gray","gray_percent":0,"conditions":{"path_prefix":["/never/"]},"targets":{"gray":"gray","stable":"stable"},"rollout":`+
		fmt.Sprintf(`{"steps":[{"analysis":"prom"},{"percent":100}],"analyses":{"prom":{"interval":"1s","checks":[{"prometheus":{"address":%q,"query":"graygate_no_such_metric","max":1}}]}}}`, prom.URL())+`}`)
	v := waitRollout(t, e, "canary", "completed", 4, 90*time.Second)
	var passed int
	for _, m := range v["measurements"].([]any) {
		c := m.(map[string]any)["checks"].([]any)[0].(map[string]any)
		if c["check"] == "prometheus" && c["result"] == "passed" {
			passed++
		}
	}
	if passed < 2 {
		t.Errorf("%d passed prometheus measurements in %v", passed, v["measurements"])
	}
	v = waitRollout(t, e, "empty", "paused", 0, 30*time.Second)
	if msg := v["message"].(string); !strings.Contains(msg, "empty result") {
		t.Errorf("empty rollout message = %q", msg)
	}
}

// TestRolloutNotificationsReachWebhooks: a rollout's events go out through
// the configured notifications, signed, in order: its steps, then its
// completion.
func TestRolloutNotificationsReachWebhooks(t *testing.T) {
	stable, _ := countingBackend(t, "stable", nil)
	gray, _ := countingBackend(t, "gray", nil)
	h := newHook(t, "rollout-secret")
	t.Setenv("ROLLOUT_HOOK_SECRET", "rollout-secret")
	extra := fmt.Sprintf("notifications: [{name: ops, url: %q, events: [rollout_step, rollout_completed, rollout_aborted], secret_env: ROLLOUT_HOOK_SECRET}]\n", h.srv.URL)
	e := startRollouts(t, stable, gray, extra, nil)
	e.mustPut("canary", fmt.Sprintf(canaryRule, tolerant, `{"steps":[{"percent":5},{"percent":50},{"percent":100}]}`))
	waitRollout(t, e, "canary", "completed", 3, 60*time.Second)
	got := h.waitEvents(4, "the rollout's notifications")
	var types []string
	for _, b := range got {
		types = append(types, fmt.Sprint(b["event"]))
		if b["rule"] != "canary" || b["text"] == "" {
			t.Errorf("event %v: rule %v, text %q", b["event"], b["rule"], b["text"])
		}
	}
	if last := types[len(types)-1]; last != rollout.EventCompleted {
		t.Errorf("events %v, want the steps and then %s last", types, rollout.EventCompleted)
	}
	steps := 0
	for _, ty := range types[:len(types)-1] {
		if ty != rollout.EventStep {
			t.Errorf("events %v: %s before completion, want only %s", types, ty, rollout.EventStep)
		}
		steps++
	}
	if steps < 2 {
		t.Errorf("events %v: %d step events, want one per step", types, steps)
	}
}

// TestRolloutActionIfMatch: a rollout action with If-Match acts only on
// the rule's version the caller saw, as PUT and a rule's rollback do; the
// rollout document carries that version as its ETag.
func TestRolloutActionIfMatch(t *testing.T) {
	stable, _ := countingBackend(t, "stable", nil)
	gray, _ := countingBackend(t, "gray", nil)
	e := startRollouts(t, stable, gray, "", nil)
	e.mustPut("canary", fmt.Sprintf(canaryRule, tolerant, `{"steps":[{"percent":10},{"pause":{}},{"pause":{}},{"pause":{}},{"percent":100}]}`))
	waitRollout(t, e, "canary", "paused", 1, 30*time.Second)
	_, r := e.api("GET", "/api/v1/rules/canary", nil)
	seen := fmt.Sprint(r["version"])
	req, _ := http.NewRequest("GET", e.admin+"/api/v1/rules/canary/rollout", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if etag := resp.Header.Get("ETag"); etag != strconv.Quote(seen) {
		t.Errorf("GET rollout ETag = %q, want %q (the rule's version)", etag, strconv.Quote(seen))
	}
	code, out := e.api("POST", "/api/v1/rules/canary/rollout/promote", `{"reason":"first click"}`, "If-Match", seen)
	if code != 200 || out["step"] != 2.0 {
		t.Fatalf("promote with the version seen = %d %v", code, out)
	}
	// A second operator who saw the same version: 409, and the rollout
	// stays at the gate it reached.
	code, out = e.api("POST", "/api/v1/rules/canary/rollout/promote", `{"reason":"second click"}`, "If-Match", seen)
	if msg := fmt.Sprint(out["error"]); code != 409 || !strings.Contains(msg, "If-Match wanted "+seen) || !strings.Contains(msg, "paused at step 2 of 5 (pause until promoted)") {
		t.Errorf("promote with a stale If-Match = %d %v, want 409 naming step 2", code, out)
	}
	for _, action := range []string{"pause", "abort"} {
		if code, out := e.api("POST", "/api/v1/rules/canary/rollout/"+action, nil, "If-Match", `"`+seen+`"`); code != 409 {
			t.Errorf("%s with a stale If-Match = %d %v, want 409", action, code, out)
		}
	}
	for _, bad := range []string{"abc", "0"} {
		if code, out := e.api("POST", "/api/v1/rules/canary/rollout/promote", nil, "If-Match", bad); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "If-Match") {
			t.Errorf("If-Match %q = %d %v, want 400", bad, code, out)
		}
	}
	if _, v := e.api("GET", "/api/v1/rules/canary/rollout", nil); v["state"] != "paused" || v["step"] != 2.0 {
		t.Fatalf("after the refused actions: %v", v)
	}
	// Without If-Match, and with the current version, promote works.
	if code, out := e.api("POST", "/api/v1/rules/canary/rollout/promote", nil); code != 200 || out["step"] != 3.0 {
		t.Fatalf("plain promote = %d %v", code, out)
	}
	_, r = e.api("GET", "/api/v1/rules/canary", nil)
	if code, out := e.api("POST", "/api/v1/rules/canary/rollout/promote", nil, "If-Match", fmt.Sprint(r["version"])); code != 200 {
		t.Fatalf("promote with the current version = %d %v", code, out)
	}
	waitRollout(t, e, "canary", "completed", 5, 30*time.Second)
}

// TestRolloutPlanCannotLowerGrayPercent: a plan whose steps would lower
// the rule's gray_percent is a 400 naming the step; a running rollout's
// rule, whose gray_percent its own steps raised, can still be PUT back.
func TestRolloutPlanCannotLowerGrayPercent(t *testing.T) {
	stable, _ := countingBackend(t, "stable", nil)
	gray, _ := countingBackend(t, "gray", nil)
	e := startRollouts(t, stable, gray, "", nil)
	lowering := `{"type":"gray","gray_percent":30,"targets":{"gray":"gray","stable":"stable"},"rollout":{"steps":[{"percent":10},{"pause":{}},{"percent":50}]}}`
	code, out := e.api("PUT", "/api/v1/rules/lower", lowering)
	if b, _ := json.Marshal(out); code != 400 || !strings.Contains(string(b), `"path":"rollout.steps[0].percent"`) || !strings.Contains(string(b), "10 is below the rule's gray_percent 30") {
		t.Fatalf("PUT of a plan starting below gray_percent = %d %s, want 400 naming rollout.steps[0].percent", code, b)
	}
	if code, _ := e.api("GET", "/api/v1/rules/lower", nil); code != 404 {
		t.Errorf("the refused rule was stored: GET = %d", code)
	}
	// One bad step is one problem.
	code, out = e.api("PUT", "/api/v1/rules/lower", `{"type":"gray","gray_percent":0,"targets":{"gray":"gray","stable":"stable"},"rollout":{"steps":[{"percent":10},{"pause":30}]}}`)
	if ds, _ := out["details"].([]any); code != 400 || len(ds) != 1 || !strings.Contains(fmt.Sprint(ds[0]), "rollout.steps[1].pause") || !strings.Contains(fmt.Sprint(ds[0]), "got 30") {
		t.Errorf("PUT with {\"pause\": 30} = %d %v, want one problem at rollout.steps[1].pause naming 30", code, out)
	}

	e.mustPut("canary", fmt.Sprintf(canaryRule, tolerant, `{"steps":[{"percent":5},{"percent":20},{"pause":{}},{"percent":100}]}`))
	waitRollout(t, e, "canary", "paused", 2, 30*time.Second)
	_, r := e.api("GET", "/api/v1/rules/canary", nil)
	if r["gray_percent"] != 20.0 {
		t.Fatalf("gray_percent at the gate = %v", r["gray_percent"])
	}
	if code, out := e.api("PUT", "/api/v1/rules/canary", r); code != 200 {
		t.Fatalf("PUT back of the running rollout's rule = %d %v", code, out)
	}
	r["gray_percent"] = 40 // by hand, above the steps done, below the one to come
	if code, out := e.api("PUT", "/api/v1/rules/canary", r); code != 200 {
		t.Fatalf("PUT back with gray_percent 40 = %d %v", code, out)
	}
	if _, v := e.api("GET", "/api/v1/rules/canary/rollout", nil); v["state"] != "paused" || v["step"] != 2.0 || v["percent"] != 40.0 {
		t.Fatalf("after the PUTs back: %v", v)
	}
	// A new plan starts over from step 0, which would lower 40 to 10.
	r["rollout"] = map[string]any{"steps": []any{map[string]any{"percent": 10}, map[string]any{"percent": 100}}}
	code, out = e.api("PUT", "/api/v1/rules/canary", r)
	if b, _ := json.Marshal(out); code != 400 || !strings.Contains(string(b), "10 is below the rule's gray_percent 40") {
		t.Errorf("PUT of a new plan below gray_percent = %d %s, want 400", code, b)
	}
}

// TestRolloutHeldByRollback: one-click rollback, of the rule or of every
// rule, holds its rollout where it is (the scene is preserved: no step,
// no version), and the resume lets it go on.
func TestRolloutHeldByRollback(t *testing.T) {
	for _, path := range []string{"/api/v1/rules/canary", "/api/v1"} {
		t.Run(path, func(t *testing.T) {
			stable, _ := countingBackend(t, "stable", nil)
			gray, _ := countingBackend(t, "gray", nil)
			e := startRollouts(t, stable, gray, "", nil)
			e.mustPut("canary", fmt.Sprintf(canaryRule, tolerant, `{"steps":[{"percent":10},{"pause":"2s"},{"percent":50},{"percent":100}]}`))
			waitRollout(t, e, "canary", "progressing", 1, 30*time.Second)
			if code, out := e.api("POST", path+"/rollback", `{"reason":"gray looks wrong"}`); code != 200 {
				t.Fatalf("rollback = %d %v", code, out)
			}
			_, r := e.api("GET", "/api/v1/rules/canary", nil)
			held := r["version"]
			// Twice the pause: the rollout does not move.
			end := time.Now().Add(4 * time.Second)
			for time.Now().Before(end) {
				_, v := e.api("GET", "/api/v1/rules/canary/rollout", nil)
				if v["step"] != 1.0 || v["percent"] != 10.0 {
					t.Fatalf("the rollout moved while rolled back: %v", v)
				}
				time.Sleep(100 * time.Millisecond)
			}
			_, v := e.api("GET", "/api/v1/rules/canary/rollout", nil)
			if msg := fmt.Sprint(v["message"]); !strings.Contains(msg, "held while") {
				t.Errorf("message while rolled back = %q", msg)
			}
			if _, r = e.api("GET", "/api/v1/rules/canary", nil); r["version"] != held {
				t.Errorf("version %v while rolled back, want %v: no write", r["version"], held)
			}
			if code, out := e.api("POST", "/api/v1/rules/canary/rollout/promote", nil); code != 409 || !strings.Contains(fmt.Sprint(out["error"]), "rolled back") {
				t.Errorf("promote while rolled back = %d %v, want 409", code, out)
			}
			if code, out := e.api("POST", path+"/resume", nil); code != 200 {
				t.Fatalf("resume = %d %v", code, out)
			}
			waitRollout(t, e, "canary", "completed", 4, 30*time.Second)
		})
	}
}

// TestRolloutQueryVetted: a prometheus check whose query its Prometheus
// cannot parse is refused when the rule is written (and by its dry run),
// naming the check and quoting Prometheus, instead of aborting the
// rollout at its first analysis. A Prometheus that cannot be asked
// vets nothing: the write goes through.
func TestRolloutQueryVetted(t *testing.T) {
	promtest.Binary(t)
	stable, _ := countingBackend(t, "stable", nil)
	gray, _ := countingBackend(t, "gray", nil)
	e := startRollouts(t, stable, gray, "", nil)
	prom := promtest.Start(t)
	rollout := func(address, query string) string {
		q, _ := json.Marshal(query)
		return fmt.Sprintf(canaryRule, tolerant, fmt.Sprintf(`{"steps":[{"percent":5},{"analysis":"prom"},{"percent":100}],
			"analyses":{"prom":{"interval":"1s","checks":[{"metric":"error_rate","max":0.5},{"prometheus":{"address":%q,"query":%s,"max":0.05}}]}}}`, address, q))
	}
	bad := rollout(prom.URL(), `sum(rate(graygate_requests_total{rule="canary"}[1m])`)
	for _, path := range []string{"/api/v1/rules/canary?dry_run=1", "/api/v1/rules/canary"} {
		code, out := e.api("PUT", path, bad)
		details := fmt.Sprint(out["details"])
		if code != 400 || !strings.Contains(details, "rollout.analyses.prom.checks[1].prometheus.query") || !strings.Contains(details, "unclosed left parenthesis") {
			t.Errorf("PUT %s with a query that does not parse: %d %v, want 400 naming the check and Prometheus's error", path, code, out)
		}
	}
	if code, _ := e.api("GET", "/api/v1/rules/canary", nil); code != 404 {
		t.Errorf("the refused rule was stored: GET is %d", code)
	}
	if code, out := e.api("PUT", "/api/v1/rules/canary", rollout(prom.URL(), `sum(rate(graygate_requests_total{rule="canary"}[1m]))`)); code != 201 {
		t.Errorf("PUT with a query that parses: %d %v", code, out)
	}
	prom.Stop()
	if code, out := e.api("PUT", "/api/v1/rules/other", rollout(prom.URL(), `sum(up`)); code != 201 {
		t.Errorf("PUT with Prometheus down: %d %v, want it stored (nothing can vet it)", code, out)
	}
}
