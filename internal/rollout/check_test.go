package rollout

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/rule"
)

func f64(v float64) *float64 { return &v }

func testMeasurer(src Source) *measurer {
	return &measurer{source: src, client: &http.Client{Transport: &http.Transport{}}, now: time.Now}
}

// TestPrometheusCheck answers /api/v1/query as Prometheus does (the JSON
// of its HTTP API) and checks what each answer makes of the check.
func TestPrometheusCheck(t *testing.T) {
	tests := []struct {
		name    string
		answer  string // the data object; "" for a 500
		want    string
		value   float64
		message string
	}{
		{"vector below max", `{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"0.02"]}]}`, rule.ResultPassed, 0.02, "0.02 within min 0, max 0.05"},
		{"vector above max", `{"resultType":"vector","result":[{"metric":{"rule":"canary"},"value":[1700000000,"0.3"]}]}`, rule.ResultFailed, 0.3, "0.3 is above max 0.05"},
		{"scalar below min", `{"resultType":"scalar","result":[1700000000,"-1"]}`, rule.ResultFailed, -1, "-1 is below min 0"},
		{"empty result", `{"resultType":"vector","result":[]}`, rule.ResultInconclusive, 0, "empty result"},
		{"NaN", `{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"NaN"]}]}`, rule.ResultInconclusive, 0, "NaN"},
		{"two series", `{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}`, rule.ResultError, 0, "2 series"},
		{"a matrix", `{"resultType":"matrix","result":[]}`, rule.ResultError, 0, "matrix"},
		{"server error", "", rule.ResultError, 0, "prometheus http://"},
		// An infinity is judged, and recorded without a value (JSON has
		// no number for it).
		{"+Inf", `{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"+Inf"]}]}`, rule.ResultFailed, math.Inf(1), "+Inf is above max 0.05 (the query returned an infinity"},
		{"-Inf", `{"resultType":"scalar","result":[1700000000,"-Inf"]}`, rule.ResultFailed, math.Inf(-1), "-Inf is below min 0 (the query returned an infinity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotQuery string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/api/v1/query" {
					http.NotFound(w, r)
					return
				}
				_ = r.ParseForm()
				gotQuery = r.Form.Get("query")
				w.Header().Set("Content-Type", "application/json")
				if tt.answer == "" {
					w.WriteHeader(500)
					io.WriteString(w, `{"status":"error","errorType":"internal","error":"boom"}`)
					return
				}
				io.WriteString(w, `{"status":"success","data":`+tt.answer+`}`)
			}))
			defer srv.Close()
			c := rule.Check{Prometheus: &rule.PrometheusCheck{Address: srv.URL, Query: `sum(rate(x[1m]))`, Min: f64(0), Max: f64(0.05)}}
			res := testMeasurer(newFakeSource()).prometheus(context.Background(), c)
			if res.Result != tt.want || !strings.Contains(res.Message, tt.message) {
				t.Fatalf("result = %s %q, want %s ...%s...", res.Result, res.Message, tt.want, tt.message)
			}
			switch {
			case math.IsInf(tt.value, 0):
				if res.Value != nil {
					t.Errorf("value = %v, want none", *res.Value)
				}
				if _, err := json.Marshal(res); err != nil {
					t.Errorf("the result does not encode: %v", err)
				}
			case tt.want == rule.ResultPassed || tt.want == rule.ResultFailed:
				if res.Value == nil || *res.Value != tt.value {
					t.Errorf("value = %v, want %v", res.Value, tt.value)
				}
			}
			if gotQuery != `sum(rate(x[1m]))` {
				t.Errorf("query sent = %q", gotQuery)
			}
			if res.Check != "prometheus" || res.Threshold != "min 0, max 0.05" {
				t.Errorf("check %q threshold %q", res.Check, res.Threshold)
			}
		})
	}
}

func TestPrometheusTimeoutIsAnError(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := rule.Check{Prometheus: &rule.PrometheusCheck{Address: srv.URL, Query: "up", Max: f64(1), Timeout: breaker.Duration(50 * time.Millisecond)}}
	res := testMeasurer(newFakeSource()).prometheus(context.Background(), c)
	if res.Result != rule.ResultError || !strings.Contains(res.Message, "no answer within 50ms") {
		t.Errorf("result = %s %q", res.Result, res.Message)
	}
}

// TestWebhookCheck: Flagger's contract. 2xx passes, anything else fails,
// no answer within the timeout is an error; the body is the rollout's
// state.
func TestWebhookCheck(t *testing.T) {
	var mu sync.Mutex
	var got []WebhookPayload
	answer := 200
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p WebhookPayload
		if r.URL.Path == "/elsewhere" {
			return // a 200 page a redirect could lead to
		}
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&p) != nil {
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		got = append(got, p)
		code := answer
		mu.Unlock()
		if code == 307 {
			w.Header().Set("Location", "/elsewhere")
		}
		if code == 0 {
			select {
			case <-block:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(code)
		io.WriteString(w, "not today")
	}))
	defer srv.Close()
	defer close(block)
	m := testMeasurer(newFakeSource())
	r := &rule.Rule{Key: "canary", GrayPercent: f64(25), Rollout: &rule.Rollout{
		Steps:    []rule.Step{{Percent: f64(25)}, {Analysis: "hook"}},
		Analyses: map[string]rule.Analysis{"hook": {Interval: breaker.Duration(time.Second), Checks: []rule.Check{{Webhook: &rule.WebhookCheck{URL: srv.URL + "/check", Timeout: breaker.Duration(100 * time.Millisecond)}}}}},
		Status:   &rule.RolloutStatus{State: rule.RolloutProgressing, Step: 1, StartedAt: time.Unix(1700000000, 0).UTC()},
	}}
	a := r.Rollout.Analyses["hook"]
	tests := []struct {
		code int
		want string
		msg  string
	}{
		{200, rule.ResultPassed, "answered 200"},
		{204, rule.ResultPassed, "answered 204"},
		{503, rule.ResultFailed, "answered 503: not today"},
		{302, rule.ResultFailed, "answered 302"},
		{307, rule.ResultFailed, "answered 307"}, // not followed to the 200 page
		{0, rule.ResultError, "no answer within 100ms"},
	}
	for i, tt := range tests {
		mu.Lock()
		answer = tt.code
		mu.Unlock()
		meas := m.measure(context.Background(), r, "hook", a, i+1, false)
		c := meas.Checks[0]
		if c.Result != tt.want || !strings.Contains(c.Message, tt.msg) || meas.Result != tt.want {
			t.Errorf("answer %d: %s %q (measurement %s), want %s ...%s...", tt.code, c.Result, c.Message, meas.Result, tt.want, tt.msg)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(tests) {
		t.Fatalf("webhook called %d times", len(got))
	}
	p := got[2]
	if p.Rule != "canary" || p.State != "progressing" || p.Step != 1 || p.Steps != 2 || p.Percent != 25 || p.Analysis != "hook" || p.Check != "webhook" || p.Measurement != 3 || !p.StartedAt.Equal(r.Rollout.Status.StartedAt) {
		t.Errorf("payload = %+v", p)
	}
}

// TestBuiltinChecks holds built-in metrics to their bounds; windows
// without enough requests are inconclusive, never a pass.
func TestBuiltinChecks(t *testing.T) {
	tests := []struct {
		name         string
		check        rule.Check
		gray, stable [3]float64 // requests, errors, p99 ms
		want         string
		msg          string
	}{
		{"error rate within", rule.Check{Metric: rule.MetricErrorRate, Max: f64(0.01)}, [3]float64{1000, 5, 1}, [3]float64{}, rule.ResultPassed, "0.005 within max 0.01"},
		{"error rate above", rule.Check{Metric: rule.MetricErrorRate, Max: f64(0.01)}, [3]float64{1000, 300, 1}, [3]float64{}, rule.ResultFailed, "0.3 is above max 0.01"},
		{"no requests", rule.Check{Metric: rule.MetricErrorRate, Max: f64(0.01)}, [3]float64{}, [3]float64{}, rule.ResultInconclusive, "0 gray request(s)"},
		{"under min_requests", rule.Check{Metric: rule.MetricP99Ms, Max: f64(500), MinRequests: 100}, [3]float64{99, 0, 1}, [3]float64{}, rule.ResultInconclusive, "fewer than min_requests 100"},
		{"p99 above", rule.Check{Metric: rule.MetricP99Ms, Max: f64(500), MinRequests: 100}, [3]float64{100, 0, 640}, [3]float64{}, rule.ResultFailed, "640 is above max 500"},
		{"vs stable within", rule.Check{Metric: rule.MetricErrorRateVsStable, Max: f64(0.005)}, [3]float64{1000, 12, 1}, [3]float64{1000, 10, 1}, rule.ResultPassed, "within"},
		{"vs stable above", rule.Check{Metric: rule.MetricErrorRateVsStable, Max: f64(0.005)}, [3]float64{1000, 20, 1}, [3]float64{1000, 10, 1}, rule.ResultFailed, "0.01 is above max 0.005"},
		{"vs stable without stable traffic", rule.Check{Metric: rule.MetricErrorRateVsStable, Max: f64(0.005)}, [3]float64{1000, 0, 1}, [3]float64{}, rule.ResultInconclusive, "0 stable request(s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newFakeSource()
			src.set("r", GroupGray, stats(uint64(tt.gray[0]), uint64(tt.gray[1]), tt.gray[2]))
			src.set("r", GroupStable, stats(uint64(tt.stable[0]), uint64(tt.stable[1]), tt.stable[2]))
			res := builtin(tt.check, testMeasurer(src).windows(context.Background(), "r", 30*time.Second))
			if res.Result != tt.want || !strings.Contains(res.Message, tt.msg) {
				t.Errorf("= %s %q, want %s ...%s...", res.Result, res.Message, tt.want, tt.msg)
			}
		})
	}
}

// TestWebhookPayloadKeys: the webhook's body carries every field the
// README lists, for a step's analysis (background false) as for the
// background one.
func TestWebhookPayloadKeys(t *testing.T) {
	bodies := make(chan map[string]any, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		bodies <- m
	}))
	defer srv.Close()
	m := testMeasurer(newFakeSource())
	r := &rule.Rule{Key: "canary", GrayPercent: f64(25), Rollout: &rule.Rollout{
		Steps:    []rule.Step{{Percent: f64(25)}, {Analysis: "hook"}},
		Analyses: map[string]rule.Analysis{"hook": {Interval: breaker.Duration(time.Second), Checks: []rule.Check{{Webhook: &rule.WebhookCheck{URL: srv.URL}}}}},
		Status:   &rule.RolloutStatus{State: rule.RolloutProgressing, Step: 1, StartedAt: time.Unix(1700000000, 0).UTC()},
	}}
	want := "analysis,background,check,measurement,percent,rule,started_at,state,step,step_started_at,steps"
	for _, background := range []bool{false, true} {
		if meas := m.measure(context.Background(), r, "hook", r.Rollout.Analyses["hook"], 1, background); meas.Result != rule.ResultPassed {
			t.Fatalf("measurement = %+v", meas)
		}
		got := <-bodies
		keys := slices.Sorted(maps.Keys(got))
		if strings.Join(keys, ",") != want || got["background"] != background {
			t.Errorf("background %v: payload %v, want the keys %s", background, got, want)
		}
	}
}
