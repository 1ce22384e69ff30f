package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
)

// driver runs one rollout while this gateway leads it. Everything it
// knows beyond the stored status (the measurements of the analysis under
// way) is in memory: after a restart or a takeover the current analysis
// starts over, a timed pause keeps its deadline.
type driver struct {
	e       *Engine
	key     string
	slot    *slot
	version int64
	raw     []byte
	r       rule.Rule
	ok      bool // r decoded

	run, bg *analysisRun
	// history holds the measurements taken in the rollout started at
	// historyOf, newest last.
	history   []rule.Measurement
	historyOf time.Time
	// charged is the breaker opening already counted against the
	// rollout.
	charged   time.Time
	lastState string
	// rolledBack is the rule's own rollback flag in the adopted entry;
	// heldSince is when this driver first saw the rule rolled back (by
	// its flag or the global one), zero while it is not.
	rolledBack bool
	heldSince  time.Time
}

// errHeld means the rule was rolled back while a change was being
// decided; the driver decides again (and holds).
var errHeld = errors.New("the rule was rolled back meanwhile")

// analysisRun is an analysis under way: a step's, or the background one.
type analysisRun struct {
	name       string
	a          rule.Analysis
	background bool
	gen        generation
	next       time.Time
	// results are the run's measurement results, oldest first; a
	// background run keeps only the last count of them (its limits apply
	// to those), or a rollout that waits days for promote would grow
	// them by one every interval. taken counts every measurement, for
	// their indexes.
	results []string
	taken   int
}

// generation identifies the step an analysis run belongs to; a status
// with another generation (a new step, a retry, a resume) starts a new
// run.
type generation struct {
	startedAt, stepStartedAt time.Time
	step                     int
}

func genOf(st *rule.RolloutStatus) generation {
	return generation{startedAt: st.StartedAt, stepStartedAt: st.StepStartedAt, step: st.Step}
}

func (d *driver) loop(ctx context.Context, lost <-chan struct{}) {
	clock := d.e.opts.Clock
	for {
		if ctx.Err() != nil {
			return
		}
		select {
		case <-lost:
			return
		default:
		}
		d.adopt(d.slot.latest())
		now := clock.Now()
		wake, err := d.tick(ctx, now)
		switch {
		case err == nil:
		case errors.Is(err, errStale), errors.Is(err, errHeld):
			if en, gerr := d.e.opts.Store.Get(ctx, d.key); gerr == nil {
				d.slot.offer(en)
			}
			wake = now
		case ctx.Err() != nil:
			return
		default:
			d.e.log.Error("rollout step failed; trying again", "rule", d.key, "err", err)
			wake = now.Add(time.Second)
		}
		wait := max(wake.Sub(now), 0)
		if wait == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-d.slot.ch:
		case <-clock.After(wait):
		}
	}
}

// adopt takes en as the rule's current version.
func (d *driver) adopt(en store.Entry) {
	d.rolledBack = en.RolledBack
	if d.ok && en.Version == d.version {
		return
	}
	r, err := rule.Decode(en.Rule)
	if err != nil {
		d.e.log.Error("rollout: the stored rule does not decode", "rule", d.key, "version", en.Version, "err", err)
		d.ok = false
		return
	}
	d.r, d.raw, d.version, d.ok = r, en.Rule, en.Version, true
	st := statusOf(&r)
	if st == nil {
		return
	}
	if !st.StartedAt.Equal(d.historyOf) {
		d.history, d.historyOf, d.bg = slices.Clone(st.Measurements), st.StartedAt, nil
	}
	if d.lastState == rule.RolloutPaused && st.State == rule.RolloutProgressing && d.bg != nil {
		d.bg.results, d.bg.taken = nil, 0 // resumed: the background analysis counts afresh
	}
	d.lastState = st.State
}

func statusOf(r *rule.Rule) *rule.RolloutStatus {
	if r.Rollout == nil {
		return nil
	}
	return r.Rollout.Status
}

// tick does what is due at now and returns when to look again.
func (d *driver) tick(ctx context.Context, now time.Time) (time.Time, error) {
	idle := now.Add(time.Hour)
	if !d.ok || d.r.Rollout == nil || !d.r.Rollout.Active() {
		return idle, nil // the engine stops this driver
	}
	if d.held() {
		// One-click rollback keeps the scene: no step, no analysis (gray
		// has no traffic to judge), no write, until the resume wakes us.
		if d.heldSince.IsZero() {
			d.heldSince = now
			d.e.log.Info("rollout held: the rule is rolled back", "rule", d.key)
			if st := statusOf(&d.r); st != nil {
				d.publishLive(ctx, fmt.Sprintf("%s (held since %s)", st.Message, now.UTC().Format(time.RFC3339)))
			}
		}
		return idle, nil
	}
	if !d.heldSince.IsZero() {
		since := d.heldSince
		d.heldSince = time.Time{}
		if err := d.release(ctx, now, since); err != nil {
			d.heldSince = since // decide again
			return now, err
		}
	}
	ro := d.r.Rollout
	if ro.Status == nil {
		return now, d.commit(ctx, func(r *rule.Rule) change { return start(r, now, "started") })
	}
	wake := now.Add(d.e.opts.Tick)
	st := ro.Status
	d.ensureRuns(ctx, st, now)
	if done, err := d.checkBreaker(ctx, now); done || err != nil {
		return now, err
	}
	if st.State == rule.RolloutProgressing {
		if st.Step >= len(ro.Steps) {
			return now, d.commit(ctx, func(r *rule.Rule) change {
				var c change
				c.reason = "rollout completed"
				enter(r, len(r.Rollout.Steps), now, &c)
				return c
			})
		}
		s := ro.Steps[st.Step]
		switch {
		case s.Percent != nil:
			return now, d.commit(ctx, func(r *rule.Rule) change { return applyPercent(r, now) })
		case s.Pause != nil && s.Pause.UntilPromoted:
			return now, d.commit(ctx, func(r *rule.Rule) change {
				return hold(r, now, rule.PausedForPromote, fmt.Sprintf("step %d of %d: waiting for promote", st.Step, len(ro.Steps)))
			})
		case s.Pause != nil:
			until := st.StepStartedAt.Add(s.Pause.Duration)
			if st.PauseUntil != nil {
				until = *st.PauseUntil
			}
			if !now.Before(until) {
				return now, d.commit(ctx, func(r *rule.Rule) change { return advance(r, now, "done: paused "+s.Pause.Duration.String()) })
			}
			wake = earliest(wake, until)
		default:
			next, done, err := d.analyse(ctx, d.run, now)
			if done || err != nil {
				return now, err
			}
			wake = earliest(wake, next)
		}
	}
	if d.bg != nil {
		next, done, err := d.analyse(ctx, d.bg, now)
		if done || err != nil {
			return now, err
		}
		wake = earliest(wake, next)
	}
	return wake, nil
}

// held reports whether the rule is rolled back, by its own flag or the
// global one.
func (d *driver) held() bool {
	return d.rolledBack || d.e.observed.Load().rolledBack
}

// release goes on after a rollback that held the rollout since then: the
// analyses under way start over (what they measured before the rollback
// is not of the gray version as it now serves), and a running timed pause
// keeps what it had left when the rollback came, as after pause and
// resume.
func (d *driver) release(ctx context.Context, now, since time.Time) error {
	d.run, d.bg = nil, nil
	st := statusOf(&d.r)
	d.e.log.Info("rollout goes on after the rollback", "rule", d.key, "held", now.Sub(since).String())
	if st == nil {
		return nil
	}
	if st.State != rule.RolloutProgressing || st.PauseUntil == nil || !st.PauseUntil.After(since) {
		d.publishLive(ctx, st.Message) // no longer held
		return nil
	}
	left := st.PauseUntil.Sub(since)
	until := now.Add(left).UTC()
	if !until.After(*st.PauseUntil) {
		return nil
	}
	return d.commit(ctx, func(r *rule.Rule) change {
		st := r.Rollout.Status
		st.PauseUntil = &until
		n := len(r.Rollout.Steps)
		st.Message = fmt.Sprintf("step %d of %d: %s, held by a rollback for %s; %s left, until %s",
			st.Step, n, r.Rollout.Steps[st.Step], now.Sub(since).Round(time.Second), left.Round(time.Second), until.Format(time.RFC3339))
		return change{reason: fmt.Sprintf("rollout goes on at step %d after a rollback (held %s): the pause has %s left", st.Step, now.Sub(since).Round(time.Second), left.Round(time.Second))}
	})
}

// analyse acts on run: first on what it measured already (a decision a
// lost compare-and-set or a store error kept from being written is made
// again on the newer version, without measuring again), then, when a
// measurement is due, takes it and decides. It returns when the next
// measurement is due; done reports a commit.
func (d *driver) analyse(ctx context.Context, run *analysisRun, now time.Time) (time.Time, bool, error) {
	if len(run.results) > 0 {
		if done, err := d.decide(ctx, run, nil, now); done || err != nil {
			return now, done, err
		}
	}
	if now.Before(run.next) {
		return run.next, false, nil
	}
	m := d.e.meas.measure(ctx, &d.r, run.name, run.a, run.taken+1, run.background)
	iv := run.a.Interval.Std()
	run.next = run.next.Add(iv)
	if run.next.Before(now) { // a slow check: never measure twice at once
		run.next = now.Add(iv)
	}
	d.add(run, m)
	done, err := d.decide(ctx, run, &m, now)
	return run.next, done, err
}

// add records measurement m of run.
func (d *driver) add(run *analysisRun, m rule.Measurement) {
	for _, c := range m.Checks {
		if c.Check != "breaker" {
			d.e.metrics.count(d.key, c.Check, c.Result)
		}
	}
	d.history = append(d.history, m)
	if len(d.history) > maxMeasurements {
		d.history = slices.Clone(d.history[len(d.history)-maxMeasurements:])
	}
	run.results = append(run.results, m.Result)
	run.taken++
	if n := run.a.EffectiveCount(); run.background && len(run.results) > n {
		run.results = slices.Clone(run.results[len(run.results)-n:])
	}
}

// ensureRuns makes the analysis runs fit the status: the current step's
// analysis while progressing at one (a new run for a new generation), and
// the background analysis for the whole rollout.
func (d *driver) ensureRuns(ctx context.Context, st *rule.RolloutStatus, now time.Time) {
	ro := d.r.Rollout
	run := d.run
	d.run = nil
	if st.State == rule.RolloutProgressing && st.Step < len(ro.Steps) {
		if name := ro.Steps[st.Step].Analysis; name != "" {
			if run != nil && run.gen == genOf(st) && run.name == name {
				d.run = run
			} else {
				a := ro.Analyses[name]
				d.run = &analysisRun{name: name, a: a, gen: genOf(st), next: now.Add(a.Interval.Std())}
				d.publishLive(ctx, fmt.Sprintf("step %d of %d: analysis %s, first measurement at %s", st.Step, len(ro.Steps), name, d.run.next.UTC().Format(time.RFC3339)))
			}
		}
	}
	if name := ro.BackgroundAnalysis; name == "" {
		d.bg = nil
	} else if d.bg == nil || d.bg.gen.startedAt != st.StartedAt {
		a := ro.Analyses[name]
		d.bg = &analysisRun{name: name, a: a, background: true, gen: genOf(st), next: now.Add(a.Interval.Std())}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// checkBreaker counts a breaker opening of the gray target once: it
// aborts the rollout (abort_on_breaker), or fails the measurements under
// way. done reports a commit.
func (d *driver) checkBreaker(ctx context.Context, now time.Time) (bool, error) {
	ro := d.r.Rollout
	st := ro.Status
	bs, err := d.e.source.Breaker(ctx, d.key, grayTarget(&d.r))
	if err != nil {
		d.e.log.Warn("rollout: read the gray target's breaker", "rule", d.key, "err", err)
		return false, nil
	}
	opened := bs.LastOpen
	if bs.OpenNow && opened.IsZero() {
		opened = now
	}
	if opened.IsZero() || !opened.After(d.charged) {
		return false, nil
	}
	d.charged = opened
	if !bs.OpenNow && opened.Before(st.StartedAt) {
		return false, nil // an opening before this rollout, since closed
	}
	reason := bs.Reason
	if reason == "" {
		reason = "the breaker opened"
	}
	res := rule.CheckResult{Check: "breaker", Result: rule.ResultFailed, Threshold: "closed", Message: "the gray target's breaker opened: " + reason}
	d.e.metrics.count(d.key, res.Check, res.Result)
	if ro.AbortsOnBreaker() {
		f := &rule.Failure{CheckResult: res}
		return true, d.commit(ctx, func(r *rule.Rule) change {
			return abort(r, now, f, "the gray target's breaker opened: "+reason)
		})
	}
	for _, run := range []*analysisRun{d.run, d.bg} {
		if run == nil {
			continue
		}
		m := rule.Measurement{Analysis: run.name, Background: run.background, Step: st.Step, Index: run.taken + 1,
			At: now.UTC(), Result: rule.ResultFailed, Checks: []rule.CheckResult{res}}
		d.add(run, m)
		if done, err := d.decide(ctx, run, &m, now); done || err != nil {
			return done, err
		}
	}
	return false, nil
}

// decide acts on run's limits: more failures than failure_limit abort,
// more inconclusive measurements than inconclusive_limit pause, and count
// measurements within the limits (one of them passed) pass the step. m is
// the measurement just taken (nil when deciding again on earlier ones).
// done reports a commit.
func (d *driver) decide(ctx context.Context, run *analysisRun, m *rule.Measurement, now time.Time) (bool, error) {
	a := run.a
	count := a.EffectiveCount()
	window := run.results
	if run.background && len(window) > count {
		window = window[len(window)-count:]
	}
	var failed, inconclusive, passed int
	for _, r := range window {
		switch r {
		case rule.ResultFailed, rule.ResultError:
			failed++
		case rule.ResultInconclusive:
			inconclusive++
		default:
			passed++
		}
	}
	st := d.r.Rollout.Status
	what := "analysis " + run.name
	if run.background {
		what = "background analysis " + run.name
	}
	tally := fmt.Sprintf("%d passed, %d failed, %d inconclusive", passed, failed, inconclusive)
	switch {
	case failed > a.FailureLimit:
		var fc *rule.CheckResult
		index := 0
		for i := len(d.history) - 1; i >= 0 && fc == nil; i-- { // the latest failure names the check
			if h := d.history[i]; h.Analysis == run.name && h.Background == run.background && (h.Result == rule.ResultFailed || h.Result == rule.ResultError) {
				fc, index = failing(h), h.Index
			}
		}
		f := &rule.Failure{Analysis: run.name}
		msg := fmt.Sprintf("%s failed: %d failed measurement(s), more than failure_limit %d", what, failed, a.FailureLimit)
		if fc != nil {
			f.CheckResult = *fc
			msg = fmt.Sprintf("%s: check %s %s: %s (measurement %d; %s)", what, fc.Check, fc.Result, fc.Message, index, tally)
		}
		return true, d.commit(ctx, func(r *rule.Rule) change { return abort(r, now, f, msg) })
	case inconclusive > a.InconclusiveLimit && st.State == rule.RolloutProgressing:
		msg := fmt.Sprintf("%s: %d inconclusive measurement(s), more than inconclusive_limit %d (%s); resume measures again, promote skips the step",
			what, inconclusive, a.InconclusiveLimit, d.lastMessage(run))
		return true, d.commit(ctx, func(r *rule.Rule) change { return hold(r, now, rule.PausedForInconclusive, msg) })
	case !run.background && len(run.results) >= count && passed == 0 && st.State == rule.RolloutProgressing:
		// Within the limits, but nothing passed: no evidence the gray
		// version is healthy is no pass.
		msg := fmt.Sprintf("%s: none of its %d measurement(s) passed (%s); resume measures again, promote skips the step", what, count, tally)
		return true, d.commit(ctx, func(r *rule.Rule) change { return hold(r, now, rule.PausedForInconclusive, msg) })
	case !run.background && len(run.results) >= count:
		return true, d.commit(ctx, func(r *rule.Rule) change {
			return advance(r, now, fmt.Sprintf("passed: %d of %d measurement(s) (%s)", passed, count, tally))
		})
	}
	if m == nil {
		return false, nil
	}
	msg := st.Message
	if !run.background {
		msg = fmt.Sprintf("step %d of %d: %s, measurement %d of %d %s (%s)", st.Step, len(d.r.Rollout.Steps), what, len(run.results), count, m.Result, tally)
	}
	d.publishLive(ctx, msg)
	return false, nil
}

// lastMessage says what the run's latest measurement that did not pass
// found.
func (d *driver) lastMessage(run *analysisRun) string {
	for i := len(d.history) - 1; i >= 0; i-- {
		h := d.history[i]
		if h.Analysis != run.name || h.Background != run.background || h.Result == rule.ResultPassed {
			continue
		}
		if c := failing(h); c != nil {
			return c.Check + ": " + c.Message
		}
		return h.Result
	}
	return "no details"
}

func (d *driver) publishLive(ctx context.Context, msg string) {
	st := d.r.Rollout.Status
	d.e.setLive(ctx, d.key, liveView{Version: d.version, StartedAt: st.StartedAt, Message: msg, Measurements: slices.Clone(d.history)})
}

// commit writes the rule as mutate leaves it, as a new version by the
// rollout, if the rule is still at the version the driver decided on.
func (d *driver) commit(ctx context.Context, mutate func(r *rule.Rule) change) error {
	r, err := rule.Decode(d.raw) // a copy of our own to change
	if err != nil {
		return err
	}
	var before time.Time
	if st := statusOf(&r); st != nil {
		before = st.StartedAt
	}
	if d.e.observed.Load().rolledBack {
		// The global flag has no version for the compare-and-set to
		// catch (the rule's own flag does).
		return errHeld
	}
	c := mutate(&r)
	if st := statusOf(&r); st != nil {
		if st.StartedAt.Equal(before) && st.StartedAt.Equal(d.historyOf) {
			st.Measurements = slices.Clone(d.history)
		} else {
			st.Measurements = nil
		}
	}
	en, err := d.e.write(ctx, d.key, &r, d.version, store.Meta{By: Actor, Reason: c.reason}, c)
	if err != nil {
		return err
	}
	d.slot.offer(en)
	d.adopt(en)
	return nil
}
