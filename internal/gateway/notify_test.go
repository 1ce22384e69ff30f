package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/notify"
	"github.com/graygate/graygate/internal/testport"
)

// hook is a webhook receiver on 127.0.0.1 that checks each request's
// signature with its own HMAC and keeps the bodies it accepted.
type hook struct {
	t      *testing.T
	srv    *httptest.Server
	secret []byte
	status atomic.Int32 // the answer; 0 is 200
	mu     sync.Mutex
	got    []map[string]any
	tries  int
}

func newHook(t *testing.T, secret string) *hook {
	h := &hook{t: t}
	if secret != "" {
		h.secret = []byte(secret)
	}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.tries++
		h.mu.Unlock()
		if h.secret != nil {
			m := hmac.New(sha256.New, h.secret)
			m.Write(raw)
			if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); r.Header.Get("X-Graygate-Signature") != want {
				t.Errorf("X-Graygate-Signature %q, want %q for %s", r.Header.Get("X-Graygate-Signature"), want, raw)
				w.WriteHeader(401)
				return
			}
		}
		if code := int(h.status.Load()); code != 0 {
			w.WriteHeader(code)
			return
		}
		var b map[string]any
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Errorf("body is not a JSON object: %s", raw)
		}
		h.mu.Lock()
		h.got = append(h.got, b)
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) events() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

func (h *hook) attempts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tries
}

// types returns the event types received so far, in order.
func (h *hook) types() []string {
	var out []string
	for _, b := range h.events() {
		out = append(out, fmt.Sprint(b["event"]))
	}
	return out
}

// waitEvents waits until the receiver has n events.
func (h *hook) waitEvents(n int, what string) []map[string]any {
	h.t.Helper()
	waitFor(h.t, what, 20*time.Second, func() bool { return len(h.events()) >= n })
	return h.events()
}

func metricsText(t *testing.T, e *env) string {
	t.Helper()
	resp, err := e.client.Get(e.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return readAll(resp)
}

// metricValue reads one series' value from the text exposition; -1 if absent.
func metricValue(text, series string) float64 {
	re := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestNotificationsEndToEnd: through the real listeners, a gray upstream
// that fails opens the breaker and the receiver gets breaker_open with the
// reason; recovery sends breaker_close; POST /api/v1/rollback and resume,
// global and per rule, send rollback and resume with the actor and the
// reason; a rollback that changes nothing sends nothing. Every request is
// signed, and the counters show on /metrics.
func TestNotificationsEndToEnd(t *testing.T) {
	t.Setenv("GRAYGATE_TEST_HOOK_SECRET", "hook-s3cret")
	rcv := newHook(t, "hook-s3cret")
	f := &flaky{}
	grayAddr := startFlaky(t, f)
	e := start(t, strings.Replace(baseConfig, `{{gray}}`, grayAddr, 1)+`
name: gw-e2e
notifications:
  - {name: ops, url: "`+rcv.srv.URL+`/hooks/ops", secret_env: GRAYGATE_TEST_HOOK_SECRET}
`, "")
	e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(1).Targets,
		"breaker": map[string]any{"window": "3s", "min_requests": 10, "open_for": "1s", "half_open_probes": 3}})

	f.mode.Store(1) // half the gray answers are 500s
	opened := false
	for i := 0; i < 200 && !opened; i++ {
		a, _ := e.get("/", "X-User-Id", fmt.Sprint(i))
		opened = a.degraded == "breaker"
	}
	if !opened {
		t.Fatal("the breaker did not open")
	}
	open := rcv.waitEvents(1, "breaker_open")[0]
	if open["event"] != "breaker_open" || open["rule"] != "canary" || open["gateway"] != "gw-e2e" || open["target"] != "gray" ||
		open["from"] != "closed" || open["to"] != "open" {
		t.Errorf("breaker_open body: %v", open)
	}
	// The sentence quotes the reason escaped as Slack asks ("&gt;").
	if r, _ := open["reason"].(string); !strings.Contains(r, "error rate") || !strings.Contains(r, " > ") ||
		!strings.Contains(fmt.Sprint(open["text"]), "[gw-e2e] breaker opened for rule canary (gray target gray): "+strings.ReplaceAll(r, ">", "&gt;")) {
		t.Errorf("breaker_open reason %q, text %q", open["reason"], open["text"])
	}
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(open["time"])); err != nil {
		t.Errorf("time %v: %v", open["time"], err)
	}

	f.mode.Store(0)
	waitFor(t, "the breaker to close after recovery", 20*time.Second, func() bool {
		e.get("/", "X-User-Id", "probe")
		return breakerState(e) == "closed"
	})
	cl := rcv.waitEvents(2, "breaker_close")[1]
	if cl["event"] != "breaker_close" || cl["rule"] != "canary" || !strings.Contains(fmt.Sprint(cl["reason"]), "probes succeeded") {
		t.Errorf("breaker_close body: %v", cl)
	}

	if code, out := e.api("POST", "/api/v1/rollback", map[string]any{"reason": "bad deploy"}); code != 200 {
		t.Fatalf("rollback = %d %v", code, out)
	}
	if code, _ := e.api("POST", "/api/v1/rollback", nil); code != 200 { // already on: commits nothing
		t.Fatalf("second rollback = %d", code)
	}
	if code, _ := e.api("POST", "/api/v1/resume", nil, "X-Change-Reason", "fixed"); code != 200 {
		t.Fatalf("resume = %d", code)
	}
	if code, _ := e.api("POST", "/api/v1/rules/canary/rollback", map[string]any{"reason": "canary only"}); code != 200 {
		t.Fatalf("rule rollback = %d", code)
	}
	if code, _ := e.api("POST", "/api/v1/rules/canary/resume", nil); code != 200 {
		t.Fatalf("rule resume = %d", code)
	}
	got := rcv.waitEvents(6, "the rollback and resume events")
	if types := rcv.types(); !slices.Equal(types, []string{"breaker_open", "breaker_close", "rollback", "resume", "rollback", "resume"}) {
		t.Fatalf("events in order: %v", types)
	}
	want := []struct{ rule, scope, reason, text string }{
		{"", "global", "bad deploy", "[gw-e2e] default rolled back every rule: gray traffic goes to stable, experiments to their control group (reason: bad deploy)"},
		{"", "global", "fixed", "[gw-e2e] default resumed every rule: rules route as written again (reason: fixed)"},
		{"canary", "rule", "canary only", "[gw-e2e] default rolled back rule canary: its users go to its stable target or its control group (reason: canary only)"},
		{"canary", "rule", "", "[gw-e2e] default resumed rule canary: it routes as written again"},
	}
	for i, w := range want {
		b := got[2+i]
		if b["rule"] != w.rule || b["scope"] != w.scope || b["reason"] != w.reason || b["actor"] != "default" || b["text"] != w.text {
			t.Errorf("event %d: %v, want %+v", 2+i, b, w)
		}
		if rev, _ := b["revision"].(float64); rev < 1 {
			t.Errorf("event %d: revision %v", 2+i, b["revision"])
		}
	}

	// A delivery is counted once its answer is read, which may be just
	// after the receiver has seen it: poll the counters.
	wantSeries := map[string]float64{
		`graygate_notifications_sent_total{event="breaker_open",receiver="ops"}`:   1,
		`graygate_notifications_sent_total{event="rollback",receiver="ops"}`:       2,
		`graygate_notifications_sent_total{event="resume",receiver="ops"}`:         2,
		`graygate_notifications_sent_total{event="srm",receiver="ops"}`:            0,
		`graygate_notifications_failed_total{event="breaker_open",receiver="ops"}`: 0,
		`graygate_notifications_dropped_total{receiver="ops"}`:                     0,
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := metricsText(t, e)
		var wrong []string
		for series, want := range wantSeries {
			if got := metricValue(m, series); got != want {
				wrong = append(wrong, fmt.Sprintf("%s = %v, want %v", series, got, want))
			}
		}
		if len(wrong) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s", strings.Join(wrong, "; "))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeadReceiversDoNotSlowRouting: with a receiver whose port is closed
// and one that accepts and never answers, data-plane requests through the
// real listener keep their latency while ten breakers open under them and
// other events pour in; a healthy receiver beside them gets every
// breaker_open; the dead ones' failures and drops are counted.
func TestDeadReceiversDoNotSlowRouting(t *testing.T) {
	healthy := newHook(t, "")
	var hung atomic.Int32
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hung.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); hang.Close() })
	// The gray upstream refuses connections: each gray request fails over
	// to stable (200) and counts against its breaker.
	grayAddr, dir := testport.Refused(t), t.TempDir()
	e := startWith(t, strings.Replace(baseConfig, `{{gray}}`, grayAddr, 1), dir, func(o *Options) {
		o.Notify = notify.Delivery{QueueSize: 16, MaxAttempts: 2, Timeout: time.Minute,
			Backoff: notify.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}}
	})
	const rules, requests = 10, 200
	// measure sends requests round-robin over fresh rules whose breakers
	// open on their fifth failure, and returns the p99 latency.
	measure := func(prefix string) time.Duration {
		for i := range rules {
			e.mustPut(fmt.Sprintf("%s%d", prefix, i), map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(1).Targets,
				"conditions": map[string]any{"path_prefix": []string{fmt.Sprintf("/%s%d/", prefix, i)}},
				"breaker":    map[string]any{"window": "30s", "min_requests": 5}})
		}
		lat := make([]time.Duration, 0, requests)
		for n := range requests {
			start := time.Now()
			a, err := e.get(fmt.Sprintf("/%s%d/x", prefix, n%rules), "X-User-Id", fmt.Sprint(n))
			lat = append(lat, time.Since(start))
			if err != nil || a.status != 200 || a.backend != "stable" {
				t.Fatalf("request %d: %+v %v", n, a, err)
			}
		}
		slices.Sort(lat)
		return lat[len(lat)*99/100-1]
	}
	baseline := measure("a")

	yaml := strings.Replace(baseConfig, `{{gray}}`, grayAddr, 1) + `
notifications:
  - {name: refused, url: "http://` + testport.Refused(t) + `/hook"}
  - {name: hung, url: "` + hang.URL + `/hook"}
  - {name: healthy, url: "` + healthy.srv.URL + `/hook", events: [breaker_open]}
`
	for name, addr := range e.backends {
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", addr)
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dir
	if err := e.gw.ReloadConfig(context.Background(), cfg); err != nil {
		t.Fatalf("reload with the receivers: %v", err)
	}
	// Fill the dead receivers' queues, then keep events coming while the
	// requests run.
	for i := range 200 {
		e.gw.Notify(notify.Event{Type: notify.SRM, Rule: "exp", Fields: map[string]any{"n": i}})
	}
	waitFor(t, "the hung receiver to hold an event", 10*time.Second, func() bool { return hung.Load() >= 1 })
	stop := make(chan struct{})
	var flood sync.WaitGroup
	flood.Add(1)
	go func() {
		defer flood.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.gw.Notify(notify.Event{Type: notify.RolloutStep, Rule: "exp", Fields: map[string]any{"step": i}})
			time.Sleep(time.Millisecond) // paced: a storm, not a CPU hog
		}
	}()
	storm := measure("b")
	close(stop)
	flood.Wait()
	t.Logf("p99 of %d requests: %s without receivers, %s with a refused and a hung receiver during a breaker storm", requests, baseline, storm)
	// The hung receiver holds each attempt for a minute: a request that
	// waited on a notification would take that long.
	if storm > time.Second {
		t.Errorf("p99 %s with dead receivers (baseline %s)", storm, baseline)
	}
	opened := healthy.waitEvents(rules, "breaker_open for every b rule")
	var keys []string
	for _, b := range opened {
		keys = append(keys, fmt.Sprint(b["rule"]))
	}
	slices.Sort(keys)
	if fmt.Sprint(keys) != "[b0 b1 b2 b3 b4 b5 b6 b7 b8 b9]" {
		t.Errorf("the healthy receiver got breaker_open for %v", keys)
	}
	waitFor(t, "failures of the refused receiver and drops of the hung one on /metrics", 20*time.Second, func() bool {
		m := metricsText(t, e)
		return metricValue(m, `graygate_notifications_failed_total{event="srm",receiver="refused"}`) > 0 &&
			metricValue(m, `graygate_notifications_dropped_total{receiver="hung"}`) > 0 &&
			metricValue(m, `graygate_notifications_dropped_total{receiver="refused"}`) > 0
	})
	if metricValue(metricsText(t, e), `graygate_notifications_dropped_total{receiver="healthy"}`) != 0 {
		t.Error("the healthy receiver dropped events")
	}
	if n := hung.Load(); n != 1 {
		t.Errorf("the hung receiver got %d requests, want 1 (it holds the first)", n)
	}
}

// TestNotificationsReload: the notifications list applies on reload,
// live. A receiver that keeps its name keeps its queue: an event queued
// while its old URL failed goes to its new URL, before later events. A
// reload whose notifications are invalid changes nothing and says why.
func TestNotificationsReload(t *testing.T) {
	down := newHook(t, "")
	down.status.Store(503)
	up := newHook(t, "")
	dir := t.TempDir()
	e := startWith(t, baseConfig, dir, func(o *Options) {
		o.Notify = notify.Delivery{MaxAttempts: 1 << 20, Backoff: notify.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}}
	})
	reload := func(extra string) error {
		y := baseConfig + extra
		for name, addr := range e.backends {
			y = strings.ReplaceAll(y, "{{"+name+"}}", addr)
		}
		return e.gw.ReloadConfigFile(context.Background(), func() (*config.Config, error) {
			c, err := config.Parse([]byte(y))
			if err == nil {
				c.DataDir = dir
			}
			return c, err
		})
	}
	e.mustPut("canary", grayRule(10))
	// No receivers yet: nothing is sent anywhere.
	if code, _ := e.api("POST", "/api/v1/rollback", nil); code != 200 {
		t.Fatal("rollback")
	}
	if err := reload("notifications: [{name: ops, url: \"" + down.srv.URL + "/hook\"}]\n"); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.api("POST", "/api/v1/resume", nil); code != 200 {
		t.Fatal("resume")
	}
	waitFor(t, "the failing URL to be tried twice", 20*time.Second, func() bool { return down.attempts() >= 2 })

	err := reload("notifications: [{name: ops, url: \"" + up.srv.URL + "/hook\", events: [brekaer_open]}]\n")
	if err == nil || !strings.Contains(err.Error(), `notifications[0].events[0]: unknown event "brekaer_open"`) {
		t.Fatalf("reload with a misspelled event = %v", err)
	}
	if _, st := e.api("GET", "/api/v1/status", nil); !strings.Contains(fmt.Sprint(st["last_error"]), "brekaer_open") {
		t.Errorf("status last_error = %v", st["last_error"])
	}
	if err := reload("name: gw-reloaded\nnotifications: [{name: ops, url: \"" + up.srv.URL + "/hook\"}]\n"); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.api("POST", "/api/v1/rules/canary/rollback", nil); code != 200 {
		t.Fatal("rule rollback")
	}
	got := up.waitEvents(2, "the queued resume and the rule rollback at the new URL")
	if types := up.types(); !slices.Equal(types, []string{"resume", "rollback"}) {
		t.Fatalf("new URL got %v", types)
	}
	if got[1]["rule"] != "canary" || got[1]["gateway"] != "gw-reloaded" {
		t.Errorf("rule rollback after the reload: %v", got[1])
	}
	if len(down.events()) != 0 {
		t.Errorf("the failing URL accepted %v", down.types())
	}
	// Removing every receiver stops sending.
	if err := reload(""); err != nil {
		t.Fatal(err)
	}
	tries := up.attempts()
	if code, _ := e.api("POST", "/api/v1/rules/canary/resume", nil); code != 200 {
		t.Fatal("rule resume")
	}
	if err := reload("notifications: [{name: ops2, url: \"" + up.srv.URL + "/hook\"}]\n"); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.api("POST", "/api/v1/resume", nil); code != 200 { // a no-op: already resumed
		t.Fatal("resume")
	}
	if code, _ := e.api("POST", "/api/v1/rollback", nil); code != 200 {
		t.Fatal("rollback")
	}
	got = up.waitEvents(3, "the rollback after the receiver came back")
	if got[2]["event"] != "rollback" || got[2]["rule"] != "" || up.attempts() != tries+1 {
		t.Errorf("after removing and re-adding: %v (%d attempts, had %d)", up.types(), up.attempts(), tries)
	}
}
