package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// metricLine returns the value of the series of /metrics whose name and
// labels are series (as the text format writes them), and whether it is
// there.
func (e *env) metricLine(series string) (string, bool) {
	_, body := e.plain("/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v, true
		}
	}
	return "", false
}

// TestBreakerStateMetricFollowsTheClock: graygate_breaker_state says what
// /api/v1/status says. A gray rule's breaker reads 0 (closed) as soon as
// the rule serves, 2 once it opened, and 1 once its open_for is over,
// without a request in between: an open breaker turns half-open by the
// clock, and the gauge, set only at transitions a request made, used to
// say open until the next request came (GraygateBreakerOpen kept firing).
// A deleted rule's series goes away.
func TestBreakerStateMetricFollowsTheClock(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	gray := strings.TrimPrefix(failing.URL, "http://")
	e := start(t, baseConfig, "")
	e.mustPut("canary", fmt.Sprintf(`{"type":"gray","gray_percent":100,"targets":{"gray":%q,"stable":"stable"},
		"breaker":{"min_requests":5,"open_for":"1s"}}`, gray))
	series := fmt.Sprintf(`graygate_breaker_state{rule="canary",target=%q}`, gray)
	waitMetric := func(want string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			v, ok := e.metricLine(series)
			if ok && v == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %q (present %v), want %s", series, v, ok, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitMetric("0", 5*time.Second) // closed, before any request

	for i := range 10 {
		if _, err := e.get(fmt.Sprintf("/trip-%d", i), "X-User-Id", "1"); err != nil {
			t.Fatal(err)
		}
	}
	a, err := e.get("/after", "X-User-Id", "1")
	if err != nil || a.degraded != "breaker" {
		t.Fatalf("after 10 failures the breaker should send gray to stable: %+v %v", a, err)
	}
	if v, _ := e.metricLine(series); v != "2" {
		t.Fatalf("%s = %q right after it opened, want 2", series, v)
	}
	// No request now: open_for (1s) runs out by the clock alone. /metrics
	// is read first, before the status API (whose read would make the
	// transition too).
	waitMetric("1", 5*time.Second)
	_, st := e.api("GET", "/api/v1/status", nil)
	bs, _ := st["breakers"].([]any)
	if len(bs) != 1 || bs[0].(map[string]any)["state"] != "half-open" {
		t.Errorf("status breakers = %v, want one half-open, as /metrics says", bs)
	}

	if code, out := e.api("DELETE", "/api/v1/rules/canary", nil); code != 200 {
		t.Fatalf("DELETE canary = %d %v", code, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := e.metricLine(series); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exported after the rule was deleted", series)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
