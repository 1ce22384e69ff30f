package gateway

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// heldGray is a gray backend that holds every request until release is
// closed, then answers 500.
type heldGray struct {
	arrived chan struct{}
	release chan struct{}
}

func (h *heldGray) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.arrived <- struct{}{}
	<-h.release
	w.WriteHeader(500)
}

// TestDroppedBreakerStaysQuiet: requests in flight on a gray
// target when the rule is pointed at another gray target finish on the
// old target's breaker, which the reload dropped. Their failures must
// not trip it into the world: no breaker_open for a target the rule no
// longer uses, and no graygate_breaker_state series for it, which
// nothing would ever reset (a stale "open" gauge fires its alert for
// ever).
func TestDroppedBreakerStaysQuiet(t *testing.T) {
	rcv := newHook(t, "")
	const inFlight = 6
	h := &heldGray{arrived: make(chan struct{}, inFlight), release: make(chan struct{})}
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	e := start(t, strings.Replace(baseConfig, `{{gray}}`, ln.Addr().String(), 1)+`
name: gw-reload
notifications:
  - {name: ops, url: "`+rcv.srv.URL+`/hooks/ops"}
`, "")
	brk := map[string]any{"window": "30s", "min_requests": inFlight, "open_for": "1m"}
	e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(1).Targets, "breaker": brk})

	var wg sync.WaitGroup
	answers := make([]answer, inFlight)
	for i := range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], _ = e.get("/", "X-User-Id", fmt.Sprint(i))
		}()
	}
	for i := range inFlight {
		select {
		case <-h.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d requests reached the gray backend", i, inFlight)
		}
	}
	// The operator points the rule at another gray version.
	e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 100,
		"targets": map[string]any{"gray": "a", "stable": "stable"}, "breaker": brk})
	close(h.release)
	wg.Wait()
	for i, a := range answers {
		if a.status != 500 {
			t.Errorf("in-flight request %d: %+v, want the old gray's 500", i, a)
		}
	}
	// The rule's gray users now reach the new target.
	if a, err := e.get("/", "X-User-Id", "after"); err != nil || a.backend != "a" || a.degraded != "" {
		t.Fatalf("after the switch: %+v %v", a, err)
	}
	// A notification sent before the fix arrives within milliseconds; give
	// one a generous moment, then look.
	time.Sleep(300 * time.Millisecond)
	if got := rcv.types(); len(got) != 0 {
		t.Errorf("notifications %v for a breaker the reload dropped, want none", got)
	}
	text := metricsText(t, e)
	if v := metricValue(text, `graygate_breaker_state{rule="canary",target="gray"}`); v != -1 {
		t.Errorf("graygate_breaker_state{rule=canary,target=gray} = %v after the rule left that target, want no series", v)
	}
	_, st := e.api("GET", "/api/v1/status", nil)
	bs, _ := st["breakers"].([]any)
	if len(bs) != 1 {
		t.Fatalf("status breakers %v, want only canary|a", bs)
	}
	if b := bs[0].(map[string]any); b["name"] != "canary|a" || b["state"] != "closed" {
		t.Errorf("status breaker %v %v, want canary|a closed", b["name"], b["state"])
	}
}

// TestLoweredProbesClose: an operator lowers a half-open
// breaker's half_open_probes to the number of probes that already
// succeeded. Nothing is left to probe, so the breaker closes on the
// change and says so; before, it sat half-open refusing gray for
// max(open_for, window) and then reopened with "0 of 3 probes did not
// report", paging the operator about a version that had recovered.
func TestLoweredProbesClose(t *testing.T) {
	rcv := newHook(t, "")
	f := &flaky{}
	grayAddr := startFlaky(t, f)
	e := start(t, strings.Replace(baseConfig, `{{gray}}`, grayAddr, 1)+`
notifications:
  - {name: ops, url: "`+rcv.srv.URL+`/hooks/ops", events: [breaker_open, breaker_close]}
`, "")
	rule := func(probes int) map[string]any {
		return map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(1).Targets,
			"breaker": map[string]any{"window": "3s", "min_requests": 5, "open_for": "1s", "half_open_probes": probes}}
	}
	e.mustPut("canary", rule(5))
	f.mode.Store(3) // every gray answer is a 500
	for i := 0; i < 5; i++ {
		e.get("/", "X-User-Id", fmt.Sprint(i))
	}
	if s := breakerState(e); s != "open" {
		t.Fatalf("breaker %q after 5 failures, want open", s)
	}
	f.mode.Store(0)
	time.Sleep(1100 * time.Millisecond) // open_for
	for i := 0; i < 3; i++ {
		if a, err := e.get("/", "X-User-Id", fmt.Sprint(i)); err != nil || a.backend != "gray" || a.degraded != "" {
			t.Fatalf("probe %d: %+v %v", i, a, err)
		}
	}
	if s := breakerState(e); s != "half-open" {
		t.Fatalf("breaker %q after 3 of 5 probes, want half-open", s)
	}
	e.mustPut("canary", rule(3))
	if s := breakerState(e); s != "closed" {
		t.Errorf("breaker %q once half_open_probes is 3 and 3 probes succeeded, want closed", s)
	}
	if a, err := e.get("/", "X-User-Id", "after"); err != nil || a.backend != "gray" || a.degraded != "" {
		t.Errorf("after the change: %+v %v, want gray", a, err)
	}
	evs := rcv.waitEvents(2, "breaker_open and breaker_close")
	if last := evs[len(evs)-1]; last["event"] != "breaker_close" || last["reason"] != "3 of 3 probes succeeded" {
		t.Errorf("last notification %v, want breaker_close with 3 of 3 probes succeeded", last)
	}
}

// TestRemovedOpenBreakerSaysClosed: the breaker of a gray target is
// dropped with the rule, or when the rule moves to another gray target.
// One that was open is reported closed (breaker_close, to "removed", with
// why): the receivers that were told it opened would otherwise wait for
// its end for ever.
func TestRemovedOpenBreakerSaysClosed(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(e *env)
		reason string
	}{
		{"deleted", func(e *env) {
			if code, out := e.api("DELETE", "/api/v1/rules/canary", nil); code != 200 && code != 204 {
				t.Fatalf("delete: %d %v", code, out)
			}
		}, "rule canary was deleted"},
		{"moved", func(e *env) {
			e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 100,
				"targets": map[string]any{"gray": "a", "stable": "stable"}})
		}, "rule canary no longer sends gray traffic to gray"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, rcv := openCanaryBreaker(t, "1m", "breaker_open, breaker_close")
			tt.change(e)
			evs := rcv.waitEvents(2, "breaker_open, then breaker_close")
			last := evs[len(evs)-1]
			if last["event"] != "breaker_close" || last["to"] != "removed" || last["from"] != "open" || last["reason"] != tt.reason {
				t.Errorf("last notification %v, want breaker_close from open to removed: %s", last, tt.reason)
			}
		})
	}
}

// TestFailedProbeSaysWhat: the breaker_open sent when a half-open probe
// fails says what failed (the gray answer's status here), as the first
// breaker_open says which error rate tripped it; it said "probe failed".
func TestFailedProbeSaysWhat(t *testing.T) {
	e, rcv := openCanaryBreaker(t, "1s", "breaker_open")
	time.Sleep(1100 * time.Millisecond) // open_for
	e.get("/", "X-User-Id", "probe")    // the probe gets a 500 too
	evs := rcv.waitEvents(2, "breaker_open, then breaker_open after the probe")
	if last := evs[len(evs)-1]; last["event"] != "breaker_open" || last["from"] != "half-open" || last["reason"] != "probe failed: status 500" {
		t.Errorf("last notification %v, want breaker_open from half-open: probe failed: status 500", last)
	}
}

// openCanaryBreaker starts a gateway whose gray target answers every
// request 500, with a webhook receiver of events (a YAML list body), puts
// rule canary (all users gray, a breaker with openFor) and trips its
// breaker with five requests.
func openCanaryBreaker(t *testing.T, openFor, events string) (*env, *hook) {
	t.Helper()
	rcv := newHook(t, "")
	f := &flaky{}
	e := start(t, strings.Replace(baseConfig, `{{gray}}`, startFlaky(t, f), 1)+`
notifications:
  - {name: ops, url: "`+rcv.srv.URL+`/hooks/ops", events: [`+events+`]}
`, "")
	e.mustPut("canary", map[string]any{"type": "gray", "gray_percent": 100, "targets": grayRule(1).Targets,
		"breaker": map[string]any{"window": "30s", "min_requests": 5, "open_for": openFor}})
	f.mode.Store(3) // every gray answer is a 500
	for i := 0; i < 5; i++ {
		e.get("/", "X-User-Id", fmt.Sprint(i))
	}
	if s := breakerState(e); s != "open" {
		t.Fatalf("breaker %q after 5 failures, want open", s)
	}
	return e, rcv
}
