package rollout

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/rule"
)

// Action is an operator's command on a rollout
// (POST /api/v1/rules/{key}/rollout/{action}).
type Action string

// Actions.
const (
	// ActionPromote skips the current step (a pause, a pause until
	// promoted, an analysis); with Full it completes the rollout at the
	// plan's last percent.
	ActionPromote Action = "promote"
	// ActionPause holds a progressing rollout; a timed pause keeps the
	// time it had left.
	ActionPause Action = "pause"
	// ActionResume continues a rollout paused by pause or by
	// inconclusive measurements (an analysis step runs again).
	ActionResume Action = "resume"
	// ActionAbort sets gray_percent to 0 and stops the rollout.
	ActionAbort Action = "abort"
	// ActionRetry restarts an aborted rollout from step 0.
	ActionRetry Action = "retry"
)

// Actions lists every action.
var Actions = []Action{ActionPromote, ActionPause, ActionResume, ActionAbort, ActionRetry}

// Command is one operator action with who asks and why.
type Command struct {
	Action Action
	// Full, with promote, completes the rollout at once.
	Full bool
	// By is the token's name, recorded as the version's author.
	By     string
	Reason string
	// IfVersion, when above 0, makes the command conditional on the
	// rule's version (If-Match): on any other version it changes nothing
	// and fails with store.ErrConflict.
	IfVersion int64
}

// Errors of Act and View. They are wrapped with the rule and the state.
var (
	// ErrNoRollout: the rule exists but has no rollout.
	ErrNoRollout = errors.New("no rollout")
	// ErrState: the action does not apply to the rollout's state.
	ErrState = errors.New("not possible in this state")
)

// change is what a transition did: the history reason and the events to
// notify once it is committed.
type change struct {
	reason string
	events []event
}

func (c *change) emit(name, text string, fields map[string]any) {
	c.events = append(c.events, event{name: name, text: text, fields: fields})
}

// first puts an event before those already emitted: a step's event comes
// before the pause the next step makes.
func (c *change) first(name, text string, fields map[string]any) {
	c.events = append([]event{{name: name, text: text, fields: fields}}, c.events...)
}

func percentOf(r *rule.Rule) float64 {
	if r.GrayPercent == nil {
		return 0
	}
	return *r.GrayPercent
}

func pct(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "%" }

// baseFields are the fields every notification carries.
func baseFields(r *rule.Rule) map[string]any {
	st := r.Rollout.Status
	return map[string]any{"state": st.State, "step": st.Step, "steps": len(r.Rollout.Steps), "percent": percentOf(r)}
}

// start (re)starts r's rollout at step 0.
func start(r *rule.Rule, now time.Time, verb string) change {
	r.Rollout.Status = &rule.RolloutStatus{State: rule.RolloutProgressing, StartedAt: now.UTC()}
	var c change
	c.reason = fmt.Sprintf("rollout %s: step 0 of %d (%s)", verb, len(r.Rollout.Steps), r.Rollout.Steps[0])
	enter(r, 0, now, &c)
	if r.Rollout.Status.State == rule.RolloutProgressing {
		c.emit(EventStep, fmt.Sprintf("rollout of %s %s at gray %s: step 0 of %d, %s", r.Key, verb, pct(percentOf(r)), len(r.Rollout.Steps), r.Rollout.Steps[0]), baseFields(r))
	}
	return c
}

// enter makes step i current: a timed pause gets its deadline, a pause
// until promoted pauses the rollout, and past the last step the rollout
// is completed.
func enter(r *rule.Rule, i int, now time.Time, c *change) {
	st := r.Rollout.Status
	n := len(r.Rollout.Steps)
	st.Step, st.StepStartedAt = i, now.UTC()
	st.PauseUntil, st.PauseLeft, st.PausedFor = nil, 0, ""
	st.State = rule.RolloutProgressing
	if i >= n {
		st.Step, st.State = n, rule.RolloutCompleted
		st.Message = fmt.Sprintf("completed: all %d steps done, gray_percent %v", n, percentOf(r))
		c.emit(EventCompleted, fmt.Sprintf("rollout of %s completed: gray %s after %d steps", r.Key, pct(percentOf(r)), n), baseFields(r))
		return
	}
	s := r.Rollout.Steps[i]
	switch {
	case s.Pause != nil && s.Pause.UntilPromoted:
		st.State, st.PausedFor = rule.RolloutPaused, rule.PausedForPromote
		st.Message = fmt.Sprintf("step %d of %d: waiting for promote", i, n)
		c.emit(EventPaused, fmt.Sprintf("rollout of %s paused at gray %s: step %d of %d waits for promote", r.Key, pct(percentOf(r)), i, n), withReason(baseFields(r), rule.PausedForPromote))
	case s.Pause != nil:
		until := now.Add(s.Pause.Duration).UTC()
		st.PauseUntil = &until
		st.Message = fmt.Sprintf("step %d of %d: pause %s, until %s", i, n, s.Pause.Duration, until.Format(time.RFC3339))
	case s.Analysis != "":
		a := r.Rollout.Analyses[s.Analysis]
		st.Message = fmt.Sprintf("step %d of %d: analysis %s, %d measurement(s) %s apart", i, n, s.Analysis, a.EffectiveCount(), a.Interval)
	default:
		st.Message = fmt.Sprintf("step %d of %d: %s", i, n, s)
	}
}

func withReason(f map[string]any, reason string) map[string]any {
	f["reason"] = reason
	return f
}

// applyPercent runs percent step i: gray_percent takes its value and the
// next step starts.
func applyPercent(r *rule.Rule, now time.Time) change {
	st := r.Rollout.Status
	i, n := st.Step, len(r.Rollout.Steps)
	from, to := percentOf(r), *r.Rollout.Steps[i].Percent
	v := to
	r.GrayPercent = &v
	var c change
	c.reason = fmt.Sprintf("rollout step %d of %d (percent %v): gray_percent %v → %v", i, n, to, from, to)
	enter(r, i+1, now, &c)
	if st.State != rule.RolloutCompleted {
		f := baseFields(r)
		f["done_step"] = i
		c.first(EventStep, fmt.Sprintf("rollout of %s: gray %s → %s (step %d of %d); next: %s", r.Key, pct(from), pct(to), i, n, r.Rollout.Steps[st.Step]), f)
	}
	return c
}

// advance ends the current step and starts the next.
func advance(r *rule.Rule, now time.Time, why string) change {
	st := r.Rollout.Status
	i, n := st.Step, len(r.Rollout.Steps)
	var c change
	c.reason = fmt.Sprintf("rollout step %d of %d (%s) %s", i, n, r.Rollout.Steps[i], why)
	enter(r, i+1, now, &c)
	if st.State != rule.RolloutCompleted {
		f := baseFields(r)
		f["done_step"] = i
		c.first(EventStep, fmt.Sprintf("rollout of %s at gray %s: step %d of %d (%s) %s; next: %s", r.Key, pct(percentOf(r)), i, n, r.Rollout.Steps[i], why, r.Rollout.Steps[st.Step]), f)
	}
	return c
}

// abort stops the rollout: gray_percent 0, state aborted, the failure
// recorded.
func abort(r *rule.Rule, now time.Time, f *rule.Failure, message string) change {
	st := r.Rollout.Status
	from := percentOf(r)
	zero := 0.0
	r.GrayPercent = &zero
	st.State, st.PauseUntil, st.PauseLeft, st.PausedFor = rule.RolloutAborted, nil, 0, ""
	st.Failure, st.Message = f, message
	var c change
	c.reason = fmt.Sprintf("rollout aborted at step %d: %s; gray_percent %v → 0", st.Step, message, from)
	fields := baseFields(r)
	fields["previous_percent"] = from
	fields["message"] = message
	if f != nil {
		fields["analysis"] = f.Analysis
		fields["check"] = f.Check
		if f.Value != nil {
			fields["value"] = *f.Value
		}
		fields["threshold"] = f.Threshold
	}
	text := fmt.Sprintf("rollout of %s aborted at step %d of %d: %s; gray %s → 0%%", r.Key, st.Step, len(r.Rollout.Steps), message, pct(from))
	if r.Rollout.AbortWhitelist {
		text += " (whitelist off)"
	}
	c.emit(EventAborted, text, fields)
	return c
}

// hold pauses a progressing rollout; a running timed pause keeps what it
// has left.
func hold(r *rule.Rule, now time.Time, why, message string) change {
	st := r.Rollout.Status
	if st.PauseUntil != nil {
		st.PauseLeft = breaker.Duration(max(st.PauseUntil.Sub(now), 0))
		st.PauseUntil = nil
	}
	st.State, st.PausedFor, st.Message = rule.RolloutPaused, why, message
	var c change
	c.reason = fmt.Sprintf("rollout paused at step %d: %s", st.Step, message)
	c.emit(EventPaused, fmt.Sprintf("rollout of %s paused at gray %s, step %d of %d: %s", r.Key, pct(percentOf(r)), st.Step, len(r.Rollout.Steps), message), withReason(baseFields(r), why))
	return c
}

// resume continues a paused rollout: a timed pause runs what it had
// left, an analysis starts over.
func resume(r *rule.Rule, now time.Time, by string) change {
	st := r.Rollout.Status
	s := r.Rollout.Steps[st.Step]
	st.State, st.PausedFor = rule.RolloutProgressing, ""
	switch {
	case s.Pause != nil && !s.Pause.UntilPromoted:
		until := now.Add(st.PauseLeft.Std()).UTC()
		st.PauseUntil, st.PauseLeft = &until, 0
		st.Message = fmt.Sprintf("step %d of %d: pause %s resumed by %s, until %s", st.Step, len(r.Rollout.Steps), s.Pause.Duration, by, until.Format(time.RFC3339))
	case s.Analysis != "":
		st.StepStartedAt = now.UTC() // the analysis starts over
		st.Message = fmt.Sprintf("step %d of %d: analysis %s resumed by %s, measuring again", st.Step, len(r.Rollout.Steps), s.Analysis, by)
	default:
		st.Message = fmt.Sprintf("step %d of %d: resumed by %s", st.Step, len(r.Rollout.Steps), by)
	}
	return change{reason: fmt.Sprintf("rollout resumed at step %d", st.Step)}
}

// promote skips the current step, or with full completes the rollout at
// the plan's last percent.
func promote(r *rule.Rule, now time.Time, full bool, by string) change {
	st := r.Rollout.Status
	if !full {
		return advance(r, now, "promoted by "+by)
	}
	from := percentOf(r)
	if p, ok := r.Rollout.FinalPercent(); ok {
		r.GrayPercent = &p
	}
	var c change
	c.reason = fmt.Sprintf("rollout fully promoted by %s from step %d: gray_percent %v → %v", by, st.Step, from, percentOf(r))
	enter(r, len(r.Rollout.Steps), now, &c)
	return c
}

// act applies an operator's command to r, or says why it does not apply.
func act(r *rule.Rule, now time.Time, cmd Command) (change, error) {
	ro := r.Rollout
	if ro == nil {
		return change{}, fmt.Errorf("rule %q: %w", r.Key, ErrNoRollout)
	}
	st := ro.Status
	if st == nil { // not started yet: every action but abort starts it first
		if cmd.Action == ActionRetry {
			return change{}, fmt.Errorf("rollout of %q has not started: retry restarts an aborted rollout: %w", r.Key, ErrState)
		}
		start(r, now, "started")
		st = ro.Status
	}
	bad := func(why string) (change, error) {
		return change{}, fmt.Errorf("rollout of %q is %s at step %d: %s: %w", r.Key, st.State, st.Step, why, ErrState)
	}
	switch cmd.Action {
	case ActionPromote:
		if st.State != rule.RolloutProgressing && st.State != rule.RolloutPaused {
			return bad("only a progressing or paused rollout can be promoted (retry restarts an aborted one)")
		}
		return promote(r, now, cmd.Full, cmd.By), nil
	case ActionPause:
		switch {
		case st.State == rule.RolloutPaused:
			return bad("it is already paused (" + st.PausedFor + ")")
		case st.State != rule.RolloutProgressing:
			return bad("only a progressing rollout can be paused")
		}
		return hold(r, now, rule.PausedForOperator, "paused by "+cmd.By), nil
	case ActionResume:
		switch {
		case st.State != rule.RolloutPaused:
			return bad("only a paused rollout can be resumed")
		case st.PausedFor == rule.PausedForPromote:
			return bad("it waits for promote at a pause until promoted; promote goes on")
		}
		return resume(r, now, cmd.By), nil
	case ActionAbort:
		if st.State != rule.RolloutProgressing && st.State != rule.RolloutPaused {
			return bad("only a progressing or paused rollout can be aborted")
		}
		f := &rule.Failure{CheckResult: rule.CheckResult{Check: "operator", Result: rule.ResultFailed, Message: "aborted by " + cmd.By}}
		return abort(r, now, f, "aborted by "+cmd.By), nil
	case ActionRetry:
		if st.State != rule.RolloutAborted {
			return bad("retry restarts an aborted rollout")
		}
		return start(r, now, "retried by "+cmd.By), nil
	}
	return change{}, fmt.Errorf("unknown rollout action %q: want promote, pause, resume, abort or retry: %w", cmd.Action, ErrState)
}
