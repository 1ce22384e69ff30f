package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/rollout"
	"github.com/graygate/graygate/internal/rule"
)

const renderPlan = `{"steps":[{"percent":5},{"pause":"2m"},{"analysis":"health"},{"percent":25},{"pause":{}},{"percent":100}],
	"analyses":{"health":{"interval":"30s","count":4,"failure_limit":1,"inconclusive_limit":1,"checks":[{"metric":"error_rate","max":0.01},{"metric":"p99_ms","max":500,"min_requests":100}]}},
	"background_analysis":"health"}`

func renderFixture(t *testing.T, state string, step int) string {
	t.Helper()
	var plan rule.Rollout
	if err := json.Unmarshal([]byte(renderPlan), &plan); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	u := func(n uint64) *uint64 { return &n }
	f := func(v float64) *float64 { return &v }
	v := rollout.View{State: state, Step: step, Percent: 5, StartedAt: start, StepStartedAt: start.Add(150 * time.Second),
		Message: "step 2 of 6: analysis health, measurement 2 of 4 passed (2 passed, 0 failed, 0 inconclusive)",
		Measurements: []rule.Measurement{
			{Analysis: "health", Step: 2, Index: 1, At: start.Add(180 * time.Second), Result: "passed", Checks: []rule.CheckResult{
				{Check: "error_rate", Result: "passed", Value: f(0.002), Threshold: "max 0.01", Requests: u(812)},
				{Check: "p99_ms", Result: "passed", Value: f(61.44), Threshold: "max 500", Requests: u(812)}}},
			{Analysis: "health", Step: 2, Index: 2, At: start.Add(210 * time.Second), Result: "inconclusive", Checks: []rule.CheckResult{
				{Check: "error_rate", Result: "passed", Value: f(0), Threshold: "max 0.01", Requests: u(90)},
				{Check: "p99_ms", Result: "inconclusive", Threshold: "max 500", Requests: u(90), Message: "90 gray request(s) in 30s, fewer than min_requests 100"}}},
			{Analysis: "health", Background: true, Step: 2, Index: 7, At: start.Add(200 * time.Second), Result: "failed", Checks: []rule.CheckResult{
				{Check: "breaker", Result: "failed", Threshold: "closed", Message: "the gray target's breaker opened: error rate 34% > 20%"}}},
		}}
	var b bytes.Buffer
	renderRollout(&b, "canary", &plan, v, start.Add(225*time.Second))
	return b.String()
}

// TestRenderRollout pins the timeline of graygate rollout get: done,
// current and pending steps with the measurements under their step.
func TestRenderRollout(t *testing.T) {
	got := renderFixture(t, rule.RolloutProgressing, 2)
	want := `Rollout:       canary
Status:        ◌ progressing
Message:       step 2 of 6: analysis health, measurement 2 of 4 passed (2 passed, 0 failed, 0 inconclusive)
Step:          2/6
Gray:          5%
Started:       2026-12-01T10:00:00Z (3m45s ago)
Step started:  2026-12-01T10:02:30Z (1m15s ago)
Background:    analysis health

Steps
  ✔  0  percent 5
  ✔  1  pause 2m0s
  ►  2  analysis health (4 × 30s, failure_limit 1, inconclusive_limit 1)
        ✔ #1 10:03:00  passed       error_rate 0.002 (max 0.01, 812 req) · p99_ms 61.44 (max 500, 812 req)
        ? #2 10:03:30  inconclusive error_rate 0 (max 0.01, 90 req) · p99_ms (max 500, 90 req) inconclusive — 90 gray request(s) in 30s, fewer than min_requests 100
  ○  3  percent 25
  ○  4  pause until promoted
  ○  5  percent 100

Background analysis health
  ✖ #7 10:03:20  failed       breaker (closed) failed — the gray target's breaker opened: error rate 34% > 20%
`
	if got != want {
		t.Errorf("render:\n%s\nwant:\n%s", got, want)
	}
}

func TestRenderRolloutMarks(t *testing.T) {
	tests := []struct {
		state string
		step  int
		want  []string
	}{
		{rule.RolloutPaused, 4, []string{"Status:        ॥ paused", "  ✔  3  percent 25", "  ॥  4  pause until promoted", "  ○  5  percent 100"}},
		{rule.RolloutAborted, 2, []string{"Status:        ✖ aborted", "  ✖  2  analysis health", "  ○  3  percent 25"}},
		{rule.RolloutCompleted, 6, []string{"Status:        ✔ completed", "Step:          6/6", "  ✔  5  percent 100"}},
	}
	for _, tt := range tests {
		got := renderFixture(t, tt.state, tt.step)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s at %d: no %q in\n%s", tt.state, tt.step, w, got)
			}
		}
	}
}
