package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/rollout/promtest"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/traffic"
)

const healthy = `{"interval":"1s","count":3,"checks":[{"metric":"error_rate","max":0.01,"min_requests":10},{"metric":"p99_ms","max":500}]}`

// TestPlanCompletes runs 5 → pause 1s → analysis → 50 → 100 against a
// healthy gray version: one version per step, by the rollout, with the
// measurements that passed the analysis, notifications in order, and the
// metrics.
func TestPlanCompletes(t *testing.T) {
	h := newHarness(t)
	h.src.set("canary", GroupGray, stats(200, 0, 12))
	h.put("canary", `{"steps":[{"percent":5},{"pause":"1s"},{"analysis":"health"},{"percent":50},{"percent":100}],"analyses":{"health":`+healthy+`}}`)
	r := h.waitFor("canary", "completion", 100*time.Millisecond, inState(rule.RolloutCompleted, 5))
	if *r.GrayPercent != 100 {
		t.Errorf("gray_percent = %v, want 100", *r.GrayPercent)
	}
	var reasons []string
	for _, c := range h.history("canary")[1:] {
		if c.By != Actor {
			t.Errorf("version %d by %q, want %q", c.Version, c.By, Actor)
		}
		reasons = append(reasons, c.Reason)
	}
	want := []string{
		"rollout started: step 0 of 5 (percent 5)",
		"rollout step 0 of 5 (percent 5): gray_percent 0 → 5",
		"rollout step 1 of 5 (pause 1s) done: paused 1s",
		"rollout step 2 of 5 (analysis health) passed: 3 of 3 measurement(s) (3 passed, 0 failed, 0 inconclusive)",
		"rollout step 3 of 5 (percent 50): gray_percent 5 → 50",
		"rollout step 4 of 5 (percent 100): gray_percent 50 → 100",
	}
	if !slices.Equal(reasons, want) {
		t.Errorf("history reasons:\n%s\nwant:\n%s", strings.Join(reasons, "\n"), strings.Join(want, "\n"))
	}
	ms := r.Rollout.Status.Measurements
	if len(ms) != 3 || ms[2].Result != rule.ResultPassed || ms[2].Index != 3 || ms[0].Checks[0].Check != "error_rate" || *ms[0].Checks[0].Requests != 200 {
		t.Errorf("measurements = %+v", ms)
	}
	h.notes.wait(t, EventCompleted)
	if ev := h.notes.events(); !slices.Equal(ev, []string{EventStep, EventStep, EventStep, EventStep, EventStep, EventCompleted}) {
		t.Errorf("events = %v", ev)
	}
	if n, _ := h.notes.last(EventCompleted); n.fields["percent"] != 100.0 || !strings.Contains(n.text, "completed") {
		t.Errorf("completed note = %+v", n)
	}
	if g := h.gather("graygate_rollout_state"); g["rule=canary,state=completed"] != 1 || g["rule=canary,state=progressing"] != 0 {
		t.Errorf("graygate_rollout_state = %v", g)
	}
	if g := h.gather("graygate_rollout_percent"); g["rule=canary"] != 100 {
		t.Errorf("graygate_rollout_percent = %v", g)
	}
	if g := h.gather("graygate_rollout_step"); g["rule=canary"] != 5 {
		t.Errorf("graygate_rollout_step = %v", g)
	}
	if g := h.gather("graygate_rollout_measurements_total"); g["check=error_rate,result=passed,rule=canary"] != 3 || g["check=p99_ms,result=passed,rule=canary"] != 3 {
		t.Errorf("graygate_rollout_measurements_total = %v", g)
	}
	h.src.mu.Lock()
	for _, w := range h.src.windows {
		if w != time.Second {
			t.Errorf("a measurement read a %v window, want the 1s interval", w)
		}
	}
	h.src.mu.Unlock()
}

// TestFailedAnalysisAborts fails the first measurement: gray_percent goes
// to 0, the status names the check, its value and its threshold, and a
// notification says so.
func TestFailedAnalysisAborts(t *testing.T) {
	h := newHarness(t)
	h.src.set("canary", GroupGray, stats(100, 30, 12))
	h.put("canary", `{"steps":[{"percent":50},{"analysis":"health"},{"percent":100}],"analyses":{"health":`+healthy+`}}`)
	r := h.waitFor("canary", "the abort", 100*time.Millisecond, inState(rule.RolloutAborted, 1))
	st := r.Rollout.Status
	if *r.GrayPercent != 0 {
		t.Errorf("gray_percent = %v, want 0", *r.GrayPercent)
	}
	f := st.Failure
	if f == nil || f.Analysis != "health" || f.Check != "error_rate" || f.Value == nil || *f.Value != 0.3 || f.Threshold != "max 0.01" {
		t.Fatalf("failure = %+v", f)
	}
	if !strings.Contains(st.Message, "check error_rate failed: 0.3 is above max 0.01") {
		t.Errorf("message = %q", st.Message)
	}
	hs := h.history("canary")
	last := hs[len(hs)-1]
	if last.By != Actor || !strings.Contains(last.Reason, "rollout aborted at step 1") || !strings.Contains(last.Reason, "gray_percent 50 → 0") {
		t.Errorf("last version by %q: %q", last.By, last.Reason)
	}
	n := h.notes.wait(t, EventAborted)
	if n.fields["check"] != "error_rate" || n.fields["value"] != 0.3 || n.fields["threshold"] != "max 0.01" || n.fields["previous_percent"] != 50.0 {
		t.Errorf("aborted note = %+v", n)
	}
	if g := h.gather("graygate_rollout_measurements_total"); g["check=error_rate,result=failed,rule=canary"] != 1 {
		t.Errorf("measurements = %v", g)
	}
}

// TestFailureLimit: with failure_limit 1, one failed measurement of three
// passes the step and two abort it.
func TestFailureLimit(t *testing.T) {
	tests := []struct {
		name    string
		errs    []uint64 // per measurement, of 100 requests
		aborted bool
	}{
		{"one failure passes", []uint64{50, 0, 0}, false},
		{"two failures abort", []uint64{50, 0, 50}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			var n atomic.Int64
			h.src.setFunc("canary", GroupGray, func() traffic.Stats {
				i := int(n.Add(1)) - 1
				return stats(100, tt.errs[min(i, len(tt.errs)-1)], 1)
			})
			h.put("canary", `{"steps":[{"analysis":"a"},{"percent":100}],"analyses":{"a":{"interval":"1s","count":3,"failure_limit":1,"checks":[{"metric":"error_rate","max":0.1}]}}}`)
			want := inState(rule.RolloutCompleted, 2)
			if tt.aborted {
				want = inState(rule.RolloutAborted, 0)
			}
			r := h.waitFor("canary", tt.name, 100*time.Millisecond, want)
			if got := len(r.Rollout.Status.Measurements); got != 3 {
				t.Errorf("%d measurements, want 3", got)
			}
		})
	}
}

// TestInconclusivePauses: too few requests are inconclusive, never a
// pass; more than inconclusive_limit pause the rollout; resume measures
// again.
func TestInconclusivePauses(t *testing.T) {
	h := newHarness(t)
	h.src.set("canary", GroupGray, stats(3, 0, 1))
	h.put("canary", `{"steps":[{"percent":5},{"analysis":"a"},{"percent":100}],"analyses":{"a":{"interval":"1s","count":2,"inconclusive_limit":1,"checks":[{"metric":"error_rate","max":0.1,"min_requests":10}]}}}`)
	r := h.waitFor("canary", "the pause", 100*time.Millisecond, inState(rule.RolloutPaused, 1))
	st := r.Rollout.Status
	if st.PausedFor != rule.PausedForInconclusive || !strings.Contains(st.Message, "2 inconclusive measurement(s), more than inconclusive_limit 1") ||
		!strings.Contains(st.Message, "3 gray request(s) in 1s, fewer than min_requests 10") {
		t.Errorf("status = %+v", st)
	}
	if n := h.notes.wait(t, EventPaused); n.fields["reason"] != rule.PausedForInconclusive {
		t.Errorf("paused note = %+v", n)
	}
	// Paused, nothing happens however long we wait.
	h.clk.Advance(time.Hour)
	if got := h.rule("canary").Rollout.Status; got.State != rule.RolloutPaused {
		t.Fatalf("state after an hour: %s", got.State)
	}
	h.src.set("canary", GroupGray, stats(100, 0, 1))
	if _, err := h.eng.Act(context.Background(), "canary", Command{Action: ActionResume, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("canary", "completion after resume", 100*time.Millisecond, inState(rule.RolloutCompleted, 3))
}

// TestNothingPassedPauses: measurements within the inconclusive limit
// but none passed do not pass the step.
func TestNothingPassedPauses(t *testing.T) {
	h := newHarness(t)
	h.put("canary", `{"steps":[{"analysis":"a"},{"percent":100}],"analyses":{"a":{"interval":"1s","count":2,"inconclusive_limit":5,"checks":[{"metric":"error_rate","max":0.1}]}}}`)
	r := h.waitFor("canary", "the pause", 100*time.Millisecond, inState(rule.RolloutPaused, 0))
	if st := r.Rollout.Status; st.PausedFor != rule.PausedForInconclusive || !strings.Contains(st.Message, "none of its 2 measurement(s) passed") {
		t.Errorf("status = %+v", st)
	}
}

// TestPauseUntilPromoted: a pause: {} step waits for promote, however
// long; resume does not pass it; promote does.
func TestPauseUntilPromoted(t *testing.T) {
	h := newHarness(t)
	h.put("canary", `{"steps":[{"percent":5},{"pause":{}},{"percent":100}]}`)
	h.waitFor("canary", "the pause", 100*time.Millisecond, inState(rule.RolloutPaused, 1))
	h.clk.Advance(24 * time.Hour)
	for range 20 {
		h.clk.Advance(time.Minute)
		time.Sleep(time.Millisecond)
	}
	r := h.rule("canary")
	if st := r.Rollout.Status; st.State != rule.RolloutPaused || st.Step != 1 || st.PausedFor != rule.PausedForPromote || *r.GrayPercent != 5 {
		t.Fatalf("after a day: %+v at %v%%", st, *r.GrayPercent)
	}
	if _, err := h.eng.Act(context.Background(), "canary", Command{Action: ActionResume, By: "alice"}); !isState(err) || !strings.Contains(err.Error(), "promote goes on") {
		t.Errorf("resume at a pause until promoted = %v", err)
	}
	v, err := h.eng.Act(context.Background(), "canary", Command{Action: ActionPromote, By: "alice", Reason: "looks good"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Step != 2 || v.State != rule.RolloutProgressing {
		t.Errorf("view after promote = %+v", v)
	}
	h.waitFor("canary", "completion", 0, inState(rule.RolloutCompleted, 3))
	h.notes.wait(t, EventCompleted)
	var promoted bool
	for _, c := range h.history("canary") {
		if c.By == "alice" && strings.Contains(c.Reason, "promoted by alice: looks good") {
			promoted = true
		}
	}
	if !promoted {
		t.Errorf("no version by alice for the promote: %+v", h.history("canary"))
	}
	// 5%, then the pause until promoted; the promote; 100% and completed.
	if ev := h.notes.events(); !slices.Equal(ev, []string{EventStep, EventStep, EventPaused, EventStep, EventCompleted}) {
		t.Errorf("events = %v", ev)
	}
}

// TestOperatorPauseKeepsTimeLeft: pausing a timed pause freezes what it
// has left; resume runs exactly that much more.
func TestOperatorPauseKeepsTimeLeft(t *testing.T) {
	h := newHarness(t)
	h.put("canary", `{"steps":[{"pause":"10s"},{"percent":100}]}`)
	r := h.waitFor("canary", "the pause", 0, inState(rule.RolloutProgressing, 0))
	for r.Rollout.Status.PauseUntil == nil {
		r = h.waitFor("canary", "pause_until", 0, func(r rule.Rule) bool { return r.Rollout.Status.PauseUntil != nil })
	}
	h.clk.Advance(4 * time.Second)
	if _, err := h.eng.Act(context.Background(), "canary", Command{Action: ActionPause, By: "bob"}); err != nil {
		t.Fatal(err)
	}
	st := h.rule("canary").Rollout.Status
	if st.State != rule.RolloutPaused || st.PausedFor != rule.PausedForOperator || st.PauseLeft.Std() != 6*time.Second || st.PauseUntil != nil {
		t.Fatalf("paused status = %+v", st)
	}
	if _, err := h.eng.Act(context.Background(), "canary", Command{Action: ActionPause, By: "bob"}); !isState(err) {
		t.Errorf("pausing twice = %v", err)
	}
	h.clk.Advance(time.Hour)
	if _, err := h.eng.Act(context.Background(), "canary", Command{Action: ActionResume, By: "bob"}); err != nil {
		t.Fatal(err)
	}
	st = h.rule("canary").Rollout.Status
	if st.PauseUntil == nil || !st.PauseUntil.Equal(h.clk.Now().Add(6*time.Second)) {
		t.Fatalf("resumed status = %+v, now %v", st, h.clk.Now())
	}
	h.clk.Advance(5 * time.Second)
	time.Sleep(20 * time.Millisecond)
	if st := h.rule("canary").Rollout.Status; st.Step != 0 {
		t.Fatalf("the pause ended a second early: %+v", st)
	}
	h.waitFor("canary", "completion", 100*time.Millisecond, inState(rule.RolloutCompleted, 2))
}

// TestRestartKeepsPauseDeadline stops the engine in a timed pause and
// starts another on the same store: it resumes at the same step and the
// pause ends at the deadline it had.
func TestRestartKeepsPauseDeadline(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	h := startHarness(t, dir, clk, newFakeSource())
	h.put("canary", `{"steps":[{"percent":5},{"pause":"10s"},{"percent":50}]}`)
	r := h.waitFor("canary", "the pause", 0, func(r rule.Rule) bool {
		st := r.Rollout.Status
		return st != nil && st.Step == 1 && st.PauseUntil != nil
	})
	deadline := *r.Rollout.Status.PauseUntil
	clk.Advance(3 * time.Second)
	h.stop()

	h2 := startHarness(t, dir, clk, newFakeSource())
	clk.Advance(6 * time.Second) // 9s into the 10s pause
	time.Sleep(20 * time.Millisecond)
	r = h2.rule("canary")
	if st := r.Rollout.Status; st.Step != 1 || !st.PauseUntil.Equal(deadline) || *r.GrayPercent != 5 {
		t.Fatalf("after the restart: %+v at %v%%", st, *r.GrayPercent)
	}
	r = h2.waitFor("canary", "the pause's end", 10*time.Millisecond, inState(rule.RolloutCompleted, 3))
	if *r.GrayPercent != 50 {
		t.Errorf("gray_percent = %v", *r.GrayPercent)
	}
	for _, c := range h2.history("canary") {
		if strings.Contains(c.Reason, "(pause 10s) done") && c.At.Before(deadline) {
			t.Errorf("the pause ended at %v, before its deadline %v", c.At, deadline)
		}
	}
}

// TestBreakerAborts: an opening of the gray target's breaker aborts with
// the breaker's reason; with abort_on_breaker false it only fails the
// measurement under way.
func TestBreakerAborts(t *testing.T) {
	t.Run("abort_on_breaker", func(t *testing.T) {
		h := newHarness(t)
		h.put("canary", `{"steps":[{"percent":50},{"pause":"1h"}]}`)
		h.waitFor("canary", "the pause", 0, inState(rule.RolloutProgressing, 1))
		h.src.setBreaker("canary", BreakerState{OpenNow: true, LastOpen: h.clk.Now(), Reason: "error rate 34% > 20% over 30s (41 of 120 requests)"})
		r := h.waitFor("canary", "the abort", 100*time.Millisecond, inState(rule.RolloutAborted, 1))
		f := r.Rollout.Status.Failure
		if f == nil || f.Check != "breaker" || !strings.Contains(f.Message, "error rate 34% > 20%") || *r.GrayPercent != 0 {
			t.Errorf("failure = %+v, gray %v", f, *r.GrayPercent)
		}
		if !strings.Contains(r.Rollout.Status.Message, "the gray target's breaker opened: error rate 34%") {
			t.Errorf("message = %q", r.Rollout.Status.Message)
		}
	})
	t.Run("an opening before the rollout, since closed, does not count", func(t *testing.T) {
		h := newHarness(t)
		h.src.setBreaker("canary", BreakerState{LastOpen: h.clk.Now().Add(-time.Hour), Reason: "old"})
		h.src.set("canary", GroupGray, stats(100, 0, 1))
		h.put("canary", `{"steps":[{"percent":50},{"analysis":"a"},{"percent":100}],"analyses":{"a":{"interval":"1s","checks":[{"metric":"error_rate","max":0.1}]}}}`)
		h.waitFor("canary", "completion", 100*time.Millisecond, inState(rule.RolloutCompleted, 3))
	})
	t.Run("abort_on_breaker false", func(t *testing.T) {
		h := newHarness(t)
		h.src.set("canary", GroupGray, stats(100, 0, 1))
		h.put("canary", `{"abort_on_breaker":false,"steps":[{"percent":50},{"analysis":"a"},{"percent":100}],"analyses":{"a":{"interval":"10s","count":2,"failure_limit":1,"checks":[{"metric":"error_rate","max":0.1}]}}}`)
		h.waitFor("canary", "the analysis", 0, inState(rule.RolloutProgressing, 1))
		h.src.setBreaker("canary", BreakerState{OpenNow: true, LastOpen: h.clk.Now(), Reason: "p99 latency 900ms > 500ms"})
		r := h.waitFor("canary", "completion", 100*time.Millisecond, inState(rule.RolloutCompleted, 3))
		var breakerFailed bool
		for _, m := range r.Rollout.Status.Measurements {
			breakerFailed = breakerFailed || (m.Result == rule.ResultFailed && m.Checks[0].Check == "breaker")
		}
		if !breakerFailed {
			t.Errorf("no failed breaker measurement in %+v", r.Rollout.Status.Measurements)
		}
	})
}

// TestAbortRetryPromoteFull: operators abort (gray_percent 0, by the
// token's name), retry from step 0, and promote fully to the plan's last
// percent. Actions that do not fit the state are refused.
func TestAbortRetryPromoteFull(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.put("canary", `{"steps":[{"percent":10},{"pause":"1h"},{"percent":60},{"pause":"1h"}]}`)
	h.waitFor("canary", "the pause", 0, inState(rule.RolloutProgressing, 1))
	if _, err := h.eng.Act(ctx, "canary", Command{Action: ActionRetry, By: "alice"}); !isState(err) {
		t.Errorf("retry of a progressing rollout = %v", err)
	}
	v, err := h.eng.Act(ctx, "canary", Command{Action: ActionAbort, By: "alice"})
	if err != nil || v.State != rule.RolloutAborted || v.Percent != 0 || v.Message != "aborted by alice" {
		t.Fatalf("abort = %+v, %v", v, err)
	}
	hs := h.history("canary")
	if last := hs[len(hs)-1]; last.By != "alice" {
		t.Errorf("abort by %q", last.By)
	}
	for _, a := range []Action{ActionPromote, ActionPause, ActionResume, ActionAbort} {
		if _, err := h.eng.Act(ctx, "canary", Command{Action: a, By: "alice"}); !isState(err) {
			t.Errorf("%s of an aborted rollout = %v", a, err)
		}
	}
	if _, err := h.eng.Act(ctx, "canary", Command{Action: "explode", By: "alice"}); !isState(err) {
		t.Errorf("unknown action = %v", err)
	}
	if _, err := h.eng.Act(ctx, "canary", Command{Action: ActionPause, Full: true, By: "alice"}); !isState(err) {
		t.Errorf("full pause = %v", err)
	}
	if _, err := h.eng.Act(ctx, "canary", Command{Action: ActionRetry, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	r := h.waitFor("canary", "the retried pause", 0, inState(rule.RolloutProgressing, 1))
	if *r.GrayPercent != 10 || r.Rollout.Status.Failure != nil {
		t.Errorf("after retry: %v%%, failure %+v", *r.GrayPercent, r.Rollout.Status.Failure)
	}
	v, err = h.eng.Act(ctx, "canary", Command{Action: ActionPromote, Full: true, By: "alice"})
	if err != nil || v.State != rule.RolloutCompleted || v.Percent != 60 || v.Step != 4 {
		t.Fatalf("full promote = %+v, %v", v, err)
	}
	if _, err := h.eng.Act(ctx, "canary", Command{Action: ActionPromote, By: "alice"}); !isState(err) {
		t.Errorf("promote of a completed rollout = %v", err)
	}
	if _, err := h.eng.Act(ctx, "nope", Command{Action: ActionPromote, By: "alice"}); err == nil {
		t.Error("acting on a missing rule worked")
	}
}

// TestBackgroundAnalysis fails the background analysis during a pause
// until promoted: the rollout aborts there.
func TestBackgroundAnalysis(t *testing.T) {
	h := newHarness(t)
	h.src.set("canary", GroupGray, stats(100, 0, 1))
	h.put("canary", `{"steps":[{"percent":20},{"pause":{}},{"percent":100}],"background_analysis":"bg","analyses":{"bg":{"interval":"1s","count":3,"failure_limit":1,"checks":[{"metric":"error_rate","max":0.1}]}}}`)
	h.waitFor("canary", "the pause", 0, inState(rule.RolloutPaused, 1))
	h.waitFor("canary", "background measurements", 100*time.Millisecond, func(r rule.Rule) bool {
		v, err := h.eng.View(context.Background(), "canary")
		return err == nil && len(v.Measurements) >= 2
	})
	h.src.set("canary", GroupGray, stats(100, 40, 1))
	r := h.waitFor("canary", "the abort", 100*time.Millisecond, inState(rule.RolloutAborted, 1))
	f := r.Rollout.Status.Failure
	if f == nil || f.Analysis != "bg" || !strings.Contains(r.Rollout.Status.Message, "background analysis bg: check error_rate failed") {
		t.Errorf("failure %+v, message %q", f, r.Rollout.Status.Message)
	}
}

// TestOthersWriteMeanwhile: an operator's PUT of the same plan during an
// analysis (another version, the status carried over) makes the driver's
// write lose its compare-and-set; it decides again and completes.
func TestOthersWriteMeanwhile(t *testing.T) {
	h := newHarness(t)
	h.src.set("canary", GroupGray, stats(100, 0, 1))
	plan := `{"steps":[{"percent":5},{"analysis":"a"},{"percent":100}],"analyses":{"a":{"interval":"1s","count":5,"checks":[{"metric":"error_rate","max":0.1}]}}}`
	h.put("canary", plan)
	h.waitFor("canary", "the analysis", 0, inState(rule.RolloutProgressing, 1))
	for range 5 {
		h.put("canary", plan) // carried: same plan, same status
		h.clk.Advance(500 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	if st := h.rule("canary").Rollout.Status; st.Step != 1 && st.State != rule.RolloutCompleted {
		t.Fatalf("an operator's PUT of the same plan moved the rollout: %+v", st)
	}
	h.waitFor("canary", "completion", 100*time.Millisecond, inState(rule.RolloutCompleted, 3))
	// A changed plan starts over from step 0.
	h.put("canary", `{"steps":[{"percent":100},{"pause":"1h"}]}`)
	h.waitFor("canary", "the new plan", 0, inState(rule.RolloutProgressing, 1))
}

// TestView checks the rollout document's exact fields and the live
// measurements of an analysis under way.
func TestView(t *testing.T) {
	h := newHarness(t)
	h.src.set("canary", GroupGray, stats(100, 0, 1))
	h.put("canary", `{"steps":[{"percent":5},{"analysis":"a"},{"percent":100}],"analyses":{"a":{"interval":"1s","count":100,"checks":[{"metric":"error_rate","max":0.1}]}}}`)
	h.waitFor("canary", "two live measurements", 100*time.Millisecond, func(r rule.Rule) bool {
		v, err := h.eng.View(context.Background(), "canary")
		return err == nil && len(v.Measurements) >= 2
	})
	v, err := h.eng.View(context.Background(), "canary")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if got := strings.Join(keys, ","); got != "measurements,message,percent,started_at,state,step,step_started_at" {
		t.Errorf("view keys = %s", got)
	}
	if v.State != rule.RolloutProgressing || v.Step != 1 || v.Percent != 5 || !strings.Contains(v.Message, "measurement") {
		t.Errorf("view = %s", b)
	}
	h.put("plain", `null`)
	if _, err := h.eng.View(context.Background(), "plain"); err == nil || !strings.Contains(err.Error(), "no rollout") {
		t.Errorf("view of a rule without a rollout = %v", err)
	}
}

func TestCarry(t *testing.T) {
	mk := func(steps, status string) *rule.Rule {
		js := `{"key":"k","type":"gray","gray_percent":0,"targets":{"gray":"h:2","stable":"h:1"},"rollout":{"steps":` + steps
		if status != "" {
			js += `,"status":` + status
		}
		r, err := rule.Decode([]byte(js + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		return &r
	}
	stored := mk(`[{"percent":5},{"pause":{}}]`, `{"state":"paused","step":1,"started_at":"2026-01-01T00:00:00Z","step_started_at":"2026-01-01T00:00:00Z","paused_for":"promote"}`)
	tests := []struct {
		name      string
		prev      *rule.Rule
		next      *rule.Rule
		wantState string // "" for no status
	}{
		{"same plan keeps the stored status", stored, mk(`[{"percent":5},{"pause":{}}]`, ""), rule.RolloutPaused},
		{"a forged status is replaced by the stored one", stored, mk(`[{"percent":5},{"pause":{}}]`, `{"state":"completed","step":2,"started_at":"2026-01-01T00:00:00Z","step_started_at":"2026-01-01T00:00:00Z"}`), rule.RolloutPaused},
		{"a changed plan starts over", stored, mk(`[{"percent":6},{"pause":{}}]`, ""), ""},
		{"a new rule starts", nil, mk(`[{"percent":5}]`, `{"state":"completed","step":1,"started_at":"2026-01-01T00:00:00Z","step_started_at":"2026-01-01T00:00:00Z"}`), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Carry(tt.prev, tt.next)
			got := ""
			if st := tt.next.Rollout.Status; st != nil {
				got = st.State
			}
			if got != tt.wantState {
				t.Errorf("state = %q, want %q", got, tt.wantState)
			}
		})
	}
}

// TestRollbackHoldsTheRollout: while its rule (or every rule) is rolled
// back, a rollout neither ends its pause nor measures, writes nothing (the
// rollback keeps the scene) and refuses promote; after the resume a timed
// pause has what it had left when the rollback came, and an analysis
// starts over on traffic the gray version serves again.
func TestRollbackHoldsTheRollout(t *testing.T) {
	tests := []struct {
		name   string
		global bool
		step   int // 1: the timed pause, 2: the analysis
	}{
		{"rule rolled back in a pause", false, 1},
		{"every rule rolled back in a pause", true, 1},
		{"rule rolled back in an analysis", false, 2},
		{"every rule rolled back in an analysis", true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			ctx := context.Background()
			h.src.set("canary", GroupGray, stats(100, 0, 1))
			h.put("canary", `{"steps":[{"percent":10},{"pause":"10s"},{"analysis":"a"},{"percent":100}],"analyses":{"a":{"interval":"1s","count":3,"checks":[{"metric":"error_rate","max":0.1,"min_requests":10}]}}}`)
			r := h.waitFor("canary", "the pause", 0, func(r rule.Rule) bool {
				st := r.Rollout.Status
				return st != nil && st.Step == 1 && st.PauseUntil != nil
			})
			deadline := *r.Rollout.Status.PauseUntil
			if tt.step == 2 {
				h.waitFor("canary", "the analysis", 100*time.Millisecond, inState(rule.RolloutProgressing, 2))
				h.waitFor("canary", "a measurement", 100*time.Millisecond, func(rule.Rule) bool {
					v, err := h.eng.View(ctx, "canary")
					return err == nil && len(v.Measurements) == 1
				})
			} else {
				h.clk.Advance(4 * time.Second) // 6s of the pause left
			}
			key := "canary"
			if tt.global {
				key = ""
			}
			rolledBack := h.clk.Now()
			if _, err := h.st.SetRollback(ctx, key, true, store.AnyVersion, store.Meta{By: "alice", Reason: "gray looks wrong"}); err != nil {
				t.Fatal(err)
			}
			h.src.set("canary", GroupGray, stats(0, 0, 0)) // rolled back: gray serves nobody
			h.waitFor("canary", "the driver to hold", 0, func(rule.Rule) bool {
				v, err := h.eng.View(ctx, "canary")
				return err == nil && strings.Contains(v.Message, "held since")
			})
			if v, _ := h.eng.View(ctx, "canary"); !strings.Contains(v.Message, "held while") || !strings.Contains(v.Message, "rolled back") {
				t.Errorf("view while rolled back: %q", v.Message)
			}
			held, err := h.st.Get(ctx, "canary")
			if err != nil {
				t.Fatal(err)
			}
			events := len(h.notes.events())
			for range 60 {
				h.clk.Advance(time.Minute)
				time.Sleep(time.Millisecond)
			}
			if _, err := h.eng.Act(ctx, "canary", Command{Action: ActionPromote, By: "bob"}); !isState(err) || !strings.Contains(err.Error(), "rolled back") {
				t.Errorf("promote while rolled back = %v, want a refusal that says so", err)
			}
			time.Sleep(20 * time.Millisecond) // a write the driver should not make
			if en, _ := h.st.Get(ctx, "canary"); en.Version != held.Version {
				hs := h.history("canary")
				t.Fatalf("the rollout wrote version %d while rolled back: %q", en.Version, hs[len(hs)-1].Reason)
			}
			if got := len(h.notes.events()); got != events {
				t.Errorf("notifications while rolled back: %v", h.notes.events()[events:])
			}
			if _, err := h.st.SetRollback(ctx, key, false, store.AnyVersion, store.Meta{By: "alice"}); err != nil {
				t.Fatal(err)
			}
			h.src.set("canary", GroupGray, stats(100, 0, 1))
			resumed := h.clk.Now()
			if tt.step == 1 {
				r = h.waitFor("canary", "the pause to go on", 0, func(r rule.Rule) bool {
					st := r.Rollout.Status
					return st.PauseUntil != nil && !st.PauseUntil.Equal(deadline)
				})
				if st := r.Rollout.Status; st.Step != 1 || !st.PauseUntil.Equal(resumed.Add(6*time.Second)) {
					t.Errorf("after the resume: step %d, pause until %v, want step 1 until %v (the 6s it had left)", st.Step, st.PauseUntil, resumed.Add(6*time.Second))
				}
				hs := h.history("canary")
				if last := hs[len(hs)-1]; last.By != Actor || !strings.Contains(last.Reason, "after a rollback") {
					t.Errorf("last version by %s: %q", last.By, last.Reason)
				}
			}
			r = h.waitFor("canary", "completion", 100*time.Millisecond, inState(rule.RolloutCompleted, 4))
			// The analysis passed on measurements taken after the resume.
			var analysed int
			for _, m := range r.Rollout.Status.Measurements {
				if m.Step == 2 && m.At.After(resumed) && m.Result == rule.ResultPassed {
					analysed++
				}
				if m.At.After(rolledBack) && m.At.Before(resumed) {
					t.Errorf("a measurement taken while rolled back was kept: %+v", m)
				}
			}
			if analysed != 3 {
				t.Errorf("%d passed measurements after the resume, want 3: %+v", analysed, r.Rollout.Status.Measurements)
			}
		})
	}
}

// TestConcurrentPromotes: two operators promote the same pause until
// promoted at once; the rollout moves one step, and the slower of them is
// told where it now stands instead of skipping the next gate too.
func TestConcurrentPromotes(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.put("canary", `{"steps":[{"percent":10},{"pause":{}},{"pause":{}},{"percent":100}]}`)
	h.waitFor("canary", "the first gate", 0, inState(rule.RolloutPaused, 1))
	// Both read the rule before either writes.
	bs := &barrierStore{Store: h.st, n: 2, all: make(chan struct{})}
	eng, err := New(Options{Store: bs, Clock: h.clk, Source: h.src})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = eng.Act(ctx, "canary", Command{Action: ActionPromote, By: fmt.Sprint("operator-", i)})
		})
	}
	wg.Wait()
	var ok, refused int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case isState(err) && strings.Contains(err.Error(), "moved on") && strings.Contains(err.Error(), "paused at step 2 of 4 (pause until promoted)"):
			refused++
		default:
			t.Errorf("promote = %v", err)
		}
	}
	if ok != 1 || refused != 1 {
		t.Errorf("%d promotes went through and %d were refused, want 1 and 1: %v", ok, refused, errs)
	}
	time.Sleep(20 * time.Millisecond)
	if st := h.rule("canary").Rollout.Status; st.State != rule.RolloutPaused || st.Step != 2 {
		t.Fatalf("after two promotes at once: %s at step %d, want paused at the second gate (step 2)", st.State, st.Step)
	}
	// One at a time, each promote passes one gate.
	if _, err := h.eng.Act(ctx, "canary", Command{Action: ActionPromote, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("canary", "completion", 0, inState(rule.RolloutCompleted, 4))
}

// TestActIfVersion: a command with IfVersion acts only on that version of
// the rule.
func TestActIfVersion(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.put("canary", `{"steps":[{"percent":10},{"pause":{}},{"pause":{}},{"percent":100}]}`)
	h.waitFor("canary", "the first gate", 0, inState(rule.RolloutPaused, 1))
	v, err := h.eng.View(ctx, "canary")
	if err != nil {
		t.Fatal(err)
	}
	seen := v.Version
	v, err = h.eng.Act(ctx, "canary", Command{Action: ActionPromote, By: "alice", IfVersion: seen})
	if err != nil || v.Step != 2 || v.Version <= seen {
		t.Fatalf("promote of the version seen = %+v, %v", v, err)
	}
	_, err = h.eng.Act(ctx, "canary", Command{Action: ActionPromote, By: "bob", IfVersion: seen})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "paused at step 2 of 4") {
		t.Errorf("promote of a stale version = %v, want a conflict naming step 2", err)
	}
	if st := h.rule("canary").Rollout.Status; st.Step != 2 {
		t.Errorf("a stale promote moved the rollout to step %d", st.Step)
	}
}

// barrierStore holds the answers of the first n Gets until all n have
// read the store.
type barrierStore struct {
	store.Store
	mu  sync.Mutex
	n   int
	all chan struct{}
}

func (b *barrierStore) Get(ctx context.Context, key string) (store.Entry, error) {
	en, err := b.Store.Get(ctx, key)
	b.mu.Lock()
	wait := b.n > 0
	if wait {
		b.n--
		if b.n == 0 {
			close(b.all)
		}
	}
	b.mu.Unlock()
	if wait {
		select {
		case <-b.all:
		case <-time.After(10 * time.Second):
			return store.Entry{}, errors.New("barrier: the other Get never came")
		}
	}
	return en, err
}

// TestPrometheusInfinity: a real Prometheus answers a ratio over zero with
// +Inf (or -Inf). It is held to the bounds like any value, and the
// rollout goes on or aborts, rather than failing to write its status.
func TestPrometheusInfinity(t *testing.T) {
	prom := promtest.Start(t)
	tests := []struct {
		name, query, bounds string
		aborted             bool
		message             string
	}{
		{"+Inf above a max", "vector(1)/0", `"max":0.05`, true, "+Inf is above max 0.05"},
		{"+Inf with only a min", "vector(1)/0", `"min":0`, false, "+Inf within min 0"},
		{"-Inf below a min", "vector(-1)/0", `"min":0`, true, "-Inf is below min 0"},
		{"-Inf with only a max", "vector(-1)/0", `"max":0.05`, false, "-Inf within max 0.05"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.put("canary", fmt.Sprintf(`{"steps":[{"percent":10},{"analysis":"a"},{"percent":20}],"analyses":{"a":{"interval":"1s","checks":[{"prometheus":{"address":%q,"query":%q,%s,"timeout":"5s"}}]}}}`,
				prom.URL(), tt.query, tt.bounds))
			want := inState(rule.RolloutCompleted, 3)
			if tt.aborted {
				want = inState(rule.RolloutAborted, 1)
			}
			r := h.waitFor("canary", tt.name, 100*time.Millisecond, want)
			st := r.Rollout.Status
			if len(st.Measurements) == 0 {
				t.Fatalf("no measurements: %+v", st)
			}
			c := st.Measurements[len(st.Measurements)-1].Checks[0]
			if c.Value != nil || !strings.Contains(c.Message, tt.message) || !strings.Contains(c.Message, "infinity") {
				t.Errorf("check = %+v, want no value and ...%s...", c, tt.message)
			}
			if tt.aborted {
				if f := st.Failure; f == nil || f.Check != "prometheus" || f.Value != nil || !strings.Contains(st.Message, tt.message) {
					t.Errorf("failure = %+v, message %q", f, st.Message)
				}
				if n := h.notes.wait(t, EventAborted); n.fields["check"] != "prometheus" {
					t.Errorf("aborted note = %+v", n)
				}
			}
		})
	}
}

// TestActKeepsTheMeasurementThatPassed: the measurement that passes an
// analysis is in the status the driver writes, not in its live view
// (published only between writes). An operator's action after it must
// keep that measurement in the version it writes.
func TestActKeepsTheMeasurementThatPassed(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.src.set("canary", GroupGray, stats(100, 0, 1))
	h.put("canary", `{"steps":[{"percent":50},{"analysis":"a"},{"pause":{}},{"percent":100}],"analyses":{"a":{"interval":"1s","count":3,"checks":[{"metric":"error_rate","max":0.1}]}}}`)
	r := h.waitFor("canary", "the gate after the analysis", 100*time.Millisecond, inState(rule.RolloutPaused, 2))
	if n := len(r.Rollout.Status.Measurements); n != 3 {
		t.Fatalf("the driver's status holds %d measurements, want 3", n)
	}
	// A full promote completes the rollout: no write of the driver's
	// follows to put the measurements back.
	if _, err := h.eng.Act(ctx, "canary", Command{Action: ActionPromote, Full: true, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	r = h.rule("canary")
	ms := r.Rollout.Status.Measurements
	if r.Rollout.Status.State != rule.RolloutCompleted || len(ms) != 3 || ms[2].Index != 3 {
		t.Errorf("after the full promote the status is %s with %d measurements (%+v), want completed with the 3 of the analysis", r.Rollout.Status.State, len(ms), ms)
	}
}

// TestBackgroundResultsBounded: a background analysis measures for the
// whole rollout, which may wait days for promote; its run keeps only the
// last count results its limits read, while the indexes go on.
func TestBackgroundResultsBounded(t *testing.T) {
	d := &driver{e: &Engine{}}
	run := &analysisRun{name: "bg", background: true, a: rule.Analysis{Count: 3}}
	results := append(slices.Repeat([]string{rule.ResultPassed}, 998), rule.ResultFailed, rule.ResultPassed, rule.ResultPassed)
	for i, res := range results {
		d.add(run, rule.Measurement{Analysis: "bg", Background: true, Index: i + 1, Result: res})
	}
	if !slices.Equal(run.results, []string{rule.ResultFailed, rule.ResultPassed, rule.ResultPassed}) {
		t.Errorf("after %d measurements the run holds %d results, want the last 3: failed, passed, passed", len(results), len(run.results))
	}
	if len(d.history) != maxMeasurements {
		t.Errorf("history holds %d, want %d", len(d.history), maxMeasurements)
	}
}

// TestApplyOutlivesTheDriver: the write that ends a rollout (completed
// here) makes the engine stop its driver as soon as a reload shows the
// rollout inactive, which may happen while the Apply after that write is
// still reloading. That Apply must not run on the driver's context: the
// gateway logged "reload failed; the previous rules keep serving" with
// "context canceled" and showed it as /api/v1/status last_error after
// every rollout that completed or aborted.
func TestApplyOutlivesTheDriver(t *testing.T) {
	h := newHarness(t)
	errs := make(chan error, 1)
	hook := func(ctx context.Context) error {
		if st := h.rule("canary").Rollout.Status; st == nil || st.State != rule.RolloutCompleted {
			return nil
		}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if _, driving := h.eng.Driving()["canary"]; !driving {
				break
			}
			time.Sleep(time.Millisecond)
		}
		select {
		case errs <- ctx.Err():
		default:
		}
		return ctx.Err()
	}
	h.afterApply.Store(&hook)
	h.put("canary", `{"steps":[{"percent":50}]}`)
	h.waitFor("canary", "completion", 0, inState(rule.RolloutCompleted, 1))
	select {
	case err := <-errs:
		if err != nil {
			t.Errorf("the Apply after the completing write ran on a context that ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Apply after the completing write")
	}
}
