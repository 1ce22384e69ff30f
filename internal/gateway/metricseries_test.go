package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRuleSeriesLifecycle: a rule's graygate_degraded_requests_total
// series exist from 0 as soon as it serves, one per reason, so that
// increase() sees its first rollback; and once the rule is deleted its
// series (requests, latency, degraded) are deleted after the retire grace,
// instead of staying until the process restarts. A rule put back within
// the grace keeps counting where it was.
func TestRuleSeriesLifecycle(t *testing.T) {
	const grace = 300 * time.Millisecond
	e := startWith(t, baseConfig, "", func(o *Options) { o.SeriesRetireGrace = grace })
	e.mustPut("canary", grayRule(100))
	m := e.metricsText()
	for _, r := range []string{"rollback", "breaker", "fallback"} {
		want := `graygate_degraded_requests_total{reason="` + r + `",rule="canary"} 0`
		if !strings.Contains(m, want) {
			t.Errorf("no %s before any request:\n%s", want, grepLines(m, "graygate_degraded_requests_total"))
		}
	}
	if code, out := e.api("POST", "/api/v1/rules/canary/rollback", nil); code != 200 {
		t.Fatalf("rollback: %d %v", code, out)
	}
	if a, err := e.get("/", "X-User-Id", "1"); err != nil || a.degraded != "rollback" {
		t.Fatalf("request after the rollback: %+v %v", a, err)
	}
	m = e.metricsText()
	if want := `graygate_degraded_requests_total{reason="rollback",rule="canary"} 1`; !strings.Contains(m, want) {
		t.Errorf("no %s:\n%s", want, grepLines(m, "graygate_degraded_requests_total"))
	}
	if !strings.Contains(m, `graygate_requests_total{code="2xx",group="stable",rule="canary"`) {
		t.Fatalf("no request series for canary:\n%s", grepLines(m, "graygate_requests_total"))
	}

	// Deleted and put back within the grace: the counts go on.
	if code, _ := e.api("DELETE", "/api/v1/rules/canary", nil); code != 200 {
		t.Fatal(code)
	}
	e.mustPut("canary", grayRule(100))
	time.Sleep(2 * grace)
	if m := e.metricsText(); !strings.Contains(m, `graygate_degraded_requests_total{reason="rollback",rule="canary"} 1`) {
		t.Errorf("a rule put back within the grace lost its counts:\n%s", grepLines(m, `rule="canary"`))
	}

	// Deleted for good: gone after the grace, not before.
	if code, _ := e.api("DELETE", "/api/v1/rules/canary", nil); code != 200 {
		t.Fatal(code)
	}
	if m := e.metricsText(); !strings.Contains(m, `rule="canary"`) {
		t.Errorf("the series went at once; requests still in flight would bring them back")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := e.metricsText()
		if !strings.Contains(m, `rule="canary"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("series of the deleted rule still there 5s later:\n%s", grepLines(m, `rule="canary"`))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Traffic goes on without the rule; its series stay gone.
	if _, err := e.get("/", "X-User-Id", "2"); err != nil {
		t.Fatal(err)
	}
	if m := e.metricsText(); strings.Contains(m, `rule="canary"`) {
		t.Errorf("the deleted rule's series came back:\n%s", grepLines(m, `rule="canary"`))
	}
}

// TestRateLimitMetrics: a per-identity rate limiter's identities, their
// bytes and its evictions are exported per route; evictions were not,
// so an operator could not tell that rotating ids were pushing real
// users out (each evicted identity comes back with a full bucket).
func TestRateLimitMetrics(t *testing.T) {
	e := start(t, baseConfig+"\nlimits: {rate_limit: {rps: 1000, burst: 1000, per_identity: true, max_identities: 3}}\n", "")
	for i := range 10 {
		if _, err := e.get("/", "X-User-Id", fmt.Sprintf("user-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	m := e.metricsText()
	for _, want := range []string{
		`graygate_ratelimit_identities{route=""} 3`,
		`graygate_ratelimit_evictions_total{route=""} 7`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("no %s:\n%s", want, grepLines(m, "graygate_ratelimit"))
		}
	}
	if !strings.Contains(m, `graygate_ratelimit_identity_bytes{route=""} `) {
		t.Errorf("no identity bytes:\n%s", grepLines(m, "graygate_ratelimit"))
	}
}

// TestConfigRuleSeriesFromStart: a rule the config file seeds serves from
// the first snapshot, which is not published like later ones: its
// degraded series are there from 0 too.
func TestConfigRuleSeriesFromStart(t *testing.T) {
	e := start(t, baseConfig+`
rules:
  - {key: seeded, type: gray, gray_percent: 10, targets: {gray: gray, stable: stable}}
`, "")
	m := e.metricsText()
	if want := `graygate_degraded_requests_total{reason="breaker",rule="seeded"} 0`; !strings.Contains(m, want) {
		t.Errorf("no %s right after the start:\n%s", want, grepLines(m, "graygate_degraded_requests_total"))
	}
}

// TestFirstErrorBurstCounts: a pool's 5xx series is there at 0 from its
// first answer of another class, so that the first burst of gray errors
// shows as an increase in rate() and increase(), which the shipped alert
// GraygateGrayErrorRateHigh reads. Before, the series appeared with the
// burst already in it, and Prometheus saw no increase at all.
func TestFirstErrorBurstCounts(t *testing.T) {
	var failing atomic.Bool
	gray, _ := countingBackend(t, "gray", func(int64) bool { return failing.Load() })
	e := start(t, strings.ReplaceAll(baseConfig, "{{gray}}", gray), "")
	e.mustPut("canary", grayRule(100))
	if a, err := e.get("/", "X-User-Id", "1"); err != nil || a.status != 200 {
		t.Fatalf("a healthy gray answer: %+v %v", a, err)
	}
	series := `graygate_requests_total{code="5xx",group="gray",rule="canary",upstream="gray"}`
	m := e.metricsText()
	if !strings.Contains(m, series+" 0") {
		t.Fatalf("no %s 0 after the first 2xx:\n%s", series, grepLines(m, "graygate_requests_total"))
	}
	failing.Store(true)
	for i := range 3 {
		if a, err := e.get("/", "X-User-Id", fmt.Sprint(i)); err != nil || a.status != 500 {
			t.Fatalf("a failing gray answer: %+v %v", a, err)
		}
	}
	if m := e.metricsText(); !strings.Contains(m, series+" 3") {
		t.Errorf("no %s 3 after three 500s:\n%s", series, grepLines(m, "graygate_requests_total"))
	}
}

// TestRetiredRuleRequestCounted: a request its rule sent upstream, still
// running when the rule's series are deleted (the retire grace after the
// rule went), does not bring them back, and is not lost either: it is
// counted in graygate_retired_rule_requests_total by status class.
func TestRetiredRuleRequestCounted(t *testing.T) {
	const grace = 300 * time.Millisecond
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
		}
		_, _ = io.WriteString(w, "slow")
	}))
	defer slow.Close()
	defer close(release)
	yaml := baseConfig + `  slow:   {instances: [{addr: "` + slow.Listener.Addr().String() + `"}]}` + "\n"
	e := startWith(t, yaml, "", func(o *Options) { o.SeriesRetireGrace = grace })
	e.mustPut("long", map[string]any{"type": "gray", "gray_percent": 100, "targets": map[string]string{"gray": "slow", "stable": "stable"},
		"breaker": map[string]any{"enabled": false}})
	if a, err := e.get("/fast", "X-User-Id", "1"); err != nil || a.rule != "long" {
		t.Fatalf("a request of the rule: %+v, %v", a, err)
	}
	if m := e.metricsText(); !strings.Contains(m, `graygate_retired_rule_requests_total{code="2xx"} 0`) {
		t.Errorf("the counter does not start at 0:\n%s", grepLines(m, "graygate_retired_rule_requests_total"))
	}
	type result struct {
		a   answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := e.get("/slow", "X-User-Id", "2")
		done <- result{a, err}
	}()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow request did not reach its upstream")
	}
	if code, _ := e.api("DELETE", "/api/v1/rules/long", nil); code != 200 {
		t.Fatal(code)
	}
	waitFor(t, "the deleted rule's series to go", 5*time.Second, func() bool {
		return !strings.Contains(e.metricsText(), `rule="long"`)
	})
	release <- struct{}{}
	r := <-done
	if r.err != nil || r.a.status != 200 || r.a.rule != "long" {
		t.Fatalf("the slow request: %+v, %v", r.a, r.err)
	}
	m := e.metricsText()
	if !strings.Contains(m, `graygate_retired_rule_requests_total{code="2xx"} 1`) {
		t.Errorf("the request that ended after its rule's series went is not counted:\n%s", grepLines(m, "graygate_retired_rule_requests_total"))
	}
	if strings.Contains(m, `rule="long"`) {
		t.Errorf("the deleted rule's series came back:\n%s", grepLines(m, `rule="long"`))
	}
}
