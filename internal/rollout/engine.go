package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/store"
)

// Actor is the history author of the versions the engine writes on its
// own (operators' actions carry the token's name).
const Actor = "rollout"

// DefaultTick is how often a driver looks at the breaker between its
// timers.
const DefaultTick = 500 * time.Millisecond

// applyTimeout bounds the Apply after a write (a reload of the rules).
const applyTimeout = 30 * time.Second

// maxMeasurements is how many measurements a status and a view keep;
// a fleet's driver publishes the last maxLiveMeasurements of them after
// each measurement.
const (
	maxMeasurements     = 20
	maxLiveMeasurements = 10
)

// Options configure New.
type Options struct {
	// Store holds the rules; every rollout change is a compare-and-set
	// Put of a new version.
	Store store.Store
	// Apply rebuilds the serving snapshot after the engine wrote a rule,
	// so that a change serves on this gateway before Act returns (nil:
	// the store's watch applies it).
	Apply func(ctx context.Context) error
	// Breakers returns the breaker guarding (rule, gray target) on this
	// gateway.
	Breakers func(rule, target string) (breaker.Snapshot, bool)
	// Notifier receives the rollout events (nil: none).
	Notifier Notifier
	// Clock is the engine's time (nil: the wall clock).
	Clock Clock
	// Logger (nil: discard).
	Logger *slog.Logger
	// Registry receives the rollout metrics (nil: none).
	Registry prometheus.Registerer
	// Fleet, when set, elects one driver per rollout among the gateways
	// that share an etcd prefix and sums their traffic (see Fleet). Nil:
	// this gateway drives every rollout from its own traffic.
	Fleet *Fleet
	// Tick is how often a driver looks at the breaker between its
	// timers (default DefaultTick).
	Tick time.Duration
	// HTTPClient makes prometheus queries and webhook calls, each with
	// its check's timeout (nil: a client of the engine's own).
	HTTPClient *http.Client
	// Source overrides where the built-in metrics and breaker states
	// come from (tests); nil: this gateway's (or with Fleet, the
	// fleet's).
	Source Source
}

// Engine drives the rollouts of a gateway's gray rules. It is safe for
// concurrent use: Observe and Record are called by the gateway (Record on
// the request path), View and Act by the admin API, Run once.
type Engine struct {
	opts    Options
	log     *slog.Logger
	rec     *Recorder
	local   *Local
	source  Source
	meas    *measurer
	metrics *engineMetrics

	observed atomic.Pointer[observation]
	wake     chan struct{}
	// published wakes a fleet's publisher when a rollout becomes active.
	published chan struct{}

	// wmu serializes write: a change's events go out before those of the
	// next change, which a driver may make as soon as the store (or the
	// apply that follows the write) shows it the first. Without it a
	// promote's "step" could reach the receivers after the "completed" the
	// driver wrote on top of it.
	wmu sync.Mutex

	mu sync.Mutex
	// runCtx is Run's context: an Apply after a write ends with it (the
	// gateway stops), not with the writer's.
	runCtx  context.Context
	drivers map[string]*slot
	live    map[string]liveView // what the rollouts this gateway drives measured
	leading map[string]bool
}

// observation is the engine's view of the store: every gray rule that
// has a rollout, as served.
type observation struct {
	entries map[string]store.Entry
	rules   map[string]*rule.Rule // read-only: the snapshot's rules
	keys    []string              // sorted
	// rolledBack is the global one-click rollback flag: while it is on,
	// every rollout is held (each rule's own flag is in its entry).
	rolledBack bool
}

// liveView is what a driver measured since its last write.
type liveView struct {
	Version      int64              `json:"version"`
	StartedAt    time.Time          `json:"started_at"`
	Message      string             `json:"message"`
	Measurements []rule.Measurement `json:"measurements"`
}

// New returns an Engine; call Run to start driving.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil {
		return nil, errors.New("rollout: a store is required")
	}
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Tick <= 0 {
		opts.Tick = DefaultTick
	}
	if opts.HTTPClient == nil {
		tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: time.Minute}
		opts.HTTPClient = &http.Client{Transport: tr}
	}
	rec, err := NewRecorder(opts.Clock.Now)
	if err != nil {
		return nil, err
	}
	e := &Engine{opts: opts, log: opts.Logger.With("component", "rollout"), rec: rec, wake: make(chan struct{}, 1), published: make(chan struct{}, 1),
		drivers: map[string]*slot{}, live: map[string]liveView{}, leading: map[string]bool{}}
	e.local = &Local{Recorder: rec, Breakers: opts.Breakers}
	e.source = opts.Source
	if e.source == nil {
		e.source = e.local
		if opts.Fleet != nil {
			e.source = &fleetSource{f: opts.Fleet, local: e.local, now: opts.Clock.Now}
		}
	}
	e.meas = &measurer{source: e.source, client: opts.HTTPClient, now: opts.Clock.Now}
	e.observed.Store(&observation{entries: map[string]store.Entry{}, rules: map[string]*rule.Rule{}})
	if opts.Registry != nil {
		e.metrics = newMetrics(e)
		if err := opts.Registry.Register(e.metrics); err != nil {
			return nil, fmt.Errorf("register the rollout metrics: %w", err)
		}
	}
	return e, nil
}

// Record counts a finished request for the built-in metrics (see
// Recorder). It is the data plane's: no lock, no allocation.
func (e *Engine) Record(d *router.Decision, status int, elapsed time.Duration) {
	e.rec.Record(d, status, elapsed)
}

// Observe tells the engine what the store holds and what serves: the
// state a snapshot was built from and its compiled rules. It starts
// recording the traffic of rules whose rollout is active at once and
// hands the rest to Run; it does not block.
func (e *Engine) Observe(st store.State, rules []*rule.Compiled) {
	obs := &observation{entries: map[string]store.Entry{}, rules: map[string]*rule.Rule{}, rolledBack: st.RolledBack}
	watch := map[string]string{}
	for _, c := range rules {
		if c.Type != rule.TypeGray || c.Source.Rollout == nil {
			continue
		}
		obs.rules[c.Key] = &c.Source
		if c.Source.Rollout.Active() {
			pool := ""
			if c.Stable.Pool != nil {
				pool = c.Stable.Pool.Name
			}
			watch[c.Key] = pool
		}
	}
	for _, en := range st.Rules {
		if obs.rules[en.Key] != nil {
			obs.entries[en.Key] = en
			obs.keys = append(obs.keys, en.Key)
		}
	}
	for k := range obs.rules {
		if _, ok := obs.entries[k]; !ok {
			delete(obs.rules, k)
		}
	}
	slices.Sort(obs.keys)
	e.rec.watchRules(watch)
	prev := e.observed.Swap(obs)
	started := false
	for k := range watch {
		if r := prev.rules[k]; r == nil || !r.Rollout.Active() {
			started = true
		}
	}
	if started {
		select {
		case e.published <- struct{}{}:
		default:
		}
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run drives the active rollouts until ctx ends: one driver goroutine per
// rollout, which in a fleet first wins the rollout's election.
func (e *Engine) Run(ctx context.Context) {
	e.mu.Lock()
	e.runCtx = ctx
	e.mu.Unlock()
	go e.rec.Run(ctx)
	var wg sync.WaitGroup
	if f := e.opts.Fleet; f != nil {
		f.start(ctx)
		wg.Go(func() { f.run(ctx) })
		wg.Go(func() { e.publish(ctx) })
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			e.mu.Lock()
			for k, s := range e.drivers {
				s.cancel()
				delete(e.drivers, k)
			}
			e.mu.Unlock()
			return
		case <-e.wake:
			e.sync(ctx, &wg)
		}
	}
}

// sync starts a driver for every active rollout that has none, hands the
// others their rule's newest entry, and stops the drivers of rollouts
// that ended or went away.
func (e *Engine) sync(ctx context.Context, wg *sync.WaitGroup) {
	obs := e.observed.Load()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, key := range obs.keys {
		if !obs.rules[key].Rollout.Active() {
			continue
		}
		en := obs.entries[key]
		if s := e.drivers[key]; s != nil {
			s.offer(en)
			continue
		}
		dctx, cancel := context.WithCancel(ctx)
		s := &slot{entry: en, ch: make(chan struct{}, 1), cancel: cancel}
		e.drivers[key] = s
		wg.Go(func() { e.drive(dctx, key, s) })
	}
	for key, s := range e.drivers {
		if r := obs.rules[key]; r == nil || !r.Rollout.Active() {
			s.cancel()
			delete(e.drivers, key)
			delete(e.live, key)
			if f := e.opts.Fleet; f != nil {
				f.forget(key)
			}
		}
	}
}

// drive leads key's rollout (at once on one box; after winning its
// election in a fleet) and runs its driver until ctx ends; when
// leadership is lost it campaigns again.
func (e *Engine) drive(ctx context.Context, key string, s *slot) {
	for ctx.Err() == nil {
		lost, release, err := e.lead(ctx, key)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.log.Warn("rollout election failed; trying again", "rule", key, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-e.opts.Clock.After(time.Second):
			}
			continue
		}
		e.setLeading(key, true)
		e.log.Info("driving the rollout", "rule", key)
		d := &driver{e: e, key: key, slot: s}
		d.loop(ctx, lost)
		e.setLeading(key, false)
		release()
	}
}

func (e *Engine) lead(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if e.opts.Fleet == nil {
		return nil, func() {}, nil
	}
	return e.opts.Fleet.lead(ctx, key)
}

func (e *Engine) setLeading(key string, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if on {
		e.leading[key] = true
	} else {
		delete(e.leading, key)
	}
}

// Driving reports, for every active rollout, whether this gateway drives
// it (for the status document).
func (e *Engine) Driving() map[string]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]bool, len(e.drivers))
	for k := range e.drivers {
		out[k] = e.leading[k]
	}
	return out
}

// ID returns the gateway's fleet identity ("" on one box).
func (e *Engine) ID() string {
	if e.opts.Fleet == nil {
		return ""
	}
	return e.opts.Fleet.opts.ID
}

// slot hands a driver the newest entry of its rule.
type slot struct {
	mu     sync.Mutex
	entry  store.Entry
	ch     chan struct{}
	cancel context.CancelFunc
}

func (s *slot) offer(en store.Entry) {
	s.mu.Lock()
	if en.Version > s.entry.Version {
		s.entry = en
	}
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (s *slot) latest() store.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entry
}

// errStale means another writer changed the rule first; the driver
// decides again on the new version.
var errStale = errors.New("the rule changed meanwhile")

// write stores r as a new version of key if key is still at ifVersion,
// applies it, and sends the change's events.
func (e *Engine) write(ctx context.Context, key string, r *rule.Rule, ifVersion int64, m store.Meta, c change) (store.Entry, error) {
	if err := r.Validate(); err != nil {
		return store.Entry{}, fmt.Errorf("rollout of %q made an invalid rule (nothing written): %w", key, err)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return store.Entry{}, fmt.Errorf("encode rule %q: %w", key, err)
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	en, err := e.opts.Store.Put(ctx, key, raw, ifVersion, m)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return store.Entry{}, fmt.Errorf("write rule %q: %w (%w)", key, errStale, err)
		}
		return store.Entry{}, fmt.Errorf("write rule %q: %w", key, err)
	}
	e.log.Info("rollout change", "rule", key, "version", en.Version, "by", m.By, "reason", m.Reason)
	if e.opts.Apply != nil {
		// The write is committed: the reload that serves it must not end
		// with ctx. A driver's ctx ends as soon as a reload shows its
		// rollout completed or aborted, which this very write does (and
		// the store's watch may reload it first); an operator's ends when
		// the client hangs up. A canceled reload is logged as failed and
		// becomes the gateway's last_error. applyTimeout and Run's
		// context bound it.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
		e.mu.Lock()
		run := e.runCtx
		e.mu.Unlock()
		if run != nil {
			stop := context.AfterFunc(run, cancel)
			defer stop()
		}
		err := e.opts.Apply(actx)
		cancel()
		if err != nil {
			e.log.Error("apply after a rollout change", "rule", key, "err", err)
		}
	}
	if e.opts.Notifier != nil {
		for _, ev := range c.events {
			e.opts.Notifier.Notify(ev.name, key, ev.text, ev.fields)
		}
	}
	e.mu.Lock()
	s := e.drivers[key]
	e.mu.Unlock()
	if s != nil {
		s.offer(en)
	}
	return en, nil
}

// View is the document GET /api/v1/rules/{key}/rollout returns.
type View struct {
	// State is progressing, paused, aborted or completed.
	State string `json:"state"`
	// Step is the current step's index (the number of steps once
	// completed).
	Step int `json:"step"`
	// Percent is the rule's gray_percent.
	Percent       float64   `json:"percent"`
	StartedAt     time.Time `json:"started_at"`
	StepStartedAt time.Time `json:"step_started_at"`
	// Measurements are the latest measurements, oldest first.
	Measurements []rule.Measurement `json:"measurements"`
	Message      string             `json:"message"`
	// Version is the rule's version the view was read from, for an
	// ETag: an action with If-Match acts only on that version.
	Version int64 `json:"-"`
}

// View returns where key's rollout stands, with the measurements its
// driver (this gateway, or in a fleet whichever drives it) took last.
func (e *Engine) View(ctx context.Context, key string) (View, error) {
	en, err := e.opts.Store.Get(ctx, key)
	if err != nil {
		return View{}, err
	}
	r, err := rule.Decode(en.Rule)
	if err != nil {
		return View{}, fmt.Errorf("decode rule %q: %w", key, err)
	}
	if r.Rollout == nil {
		return View{}, fmt.Errorf("rule %q: %w", key, ErrNoRollout)
	}
	return e.viewOf(ctx, en, &r), nil
}

func (e *Engine) viewOf(ctx context.Context, en store.Entry, r *rule.Rule) View {
	v := e.viewOfStatus(ctx, en, r)
	if why := e.rollback(r.Key, en); why != "" && r.Rollout.Active() {
		v.Message = fmt.Sprintf("held while %s (it goes on from here after the resume): %s", why, v.Message)
	}
	return v
}

func (e *Engine) viewOfStatus(ctx context.Context, en store.Entry, r *rule.Rule) View {
	v := View{Percent: percentOf(r), Measurements: []rule.Measurement{}, Version: en.Version}
	st := r.Rollout.Status
	if st == nil {
		v.State, v.StartedAt, v.StepStartedAt = rule.RolloutProgressing, en.UpdatedAt, en.UpdatedAt
		v.Message = "starting"
		return v
	}
	v.State, v.Step, v.StartedAt, v.StepStartedAt, v.Message = st.State, st.Step, st.StartedAt, st.StepStartedAt, st.Message
	v.Measurements = append(v.Measurements, st.Measurements...)
	lv, ok := e.liveOf(ctx, r.Key)
	if ok && lv.StartedAt.Equal(st.StartedAt) && lv.Version >= en.Version {
		v.Measurements = append(v.Measurements[:0], lv.Measurements...)
		if lv.Version == en.Version && lv.Message != "" {
			v.Message = lv.Message
		}
	}
	if st.State == rule.RolloutProgressing && st.PauseUntil != nil {
		if left := st.PauseUntil.Sub(e.opts.Clock.Now()); left > 0 {
			v.Message += fmt.Sprintf(" (%s left)", left.Round(time.Second))
		}
	}
	if st.State == rule.RolloutPaused && st.PauseLeft > 0 {
		v.Message += fmt.Sprintf(" (the pause has %s left)", st.PauseLeft.Std().Round(time.Second))
	}
	return v
}

// liveOf returns what key's driver measured since its last write: this
// gateway's own, or the fleet's driver's.
func (e *Engine) liveOf(ctx context.Context, key string) (liveView, bool) {
	e.mu.Lock()
	lv, ok := e.live[key]
	e.mu.Unlock()
	if ok || e.opts.Fleet == nil {
		return lv, ok
	}
	return e.opts.Fleet.getLive(ctx, key)
}

func (e *Engine) setLive(ctx context.Context, key string, lv liveView) {
	e.mu.Lock()
	if _, driving := e.drivers[key]; driving {
		e.live[key] = lv
	}
	e.mu.Unlock()
	if f := e.opts.Fleet; f != nil {
		if n := len(lv.Measurements); n > maxLiveMeasurements {
			lv.Measurements = lv.Measurements[n-maxLiveMeasurements:]
		}
		if err := f.putLive(ctx, key, lv); err != nil && ctx.Err() == nil {
			e.log.Warn("publish the rollout's measurements", "rule", key, "err", err)
		}
	}
}

// rollback says why key's rollout is held by a one-click rollback ("" when
// it is not): its rule's own flag (in en) or the global one.
func (e *Engine) rollback(key string, en store.Entry) string {
	switch {
	case en.RolledBack:
		return fmt.Sprintf("rule %q is rolled back", key)
	case e.observed.Load().rolledBack:
		return "every rule is rolled back"
	}
	return ""
}

// position is where a rollout stands, as far as an operator's action is
// concerned: an action is decided on the position its caller saw.
type position struct {
	state                    string
	step                     int
	startedAt, stepStartedAt time.Time
}

func positionOf(r *rule.Rule) position {
	if r.Rollout == nil || r.Rollout.Status == nil {
		return position{}
	}
	st := r.Rollout.Status
	return position{state: st.State, step: st.Step, startedAt: st.StartedAt, stepStartedAt: st.StepStartedAt}
}

// where describes a rollout's position for people: "paused at step 2 of
// 6 (pause until promoted)".
func where(r *rule.Rule) string {
	ro := r.Rollout
	if ro == nil {
		return "gone"
	}
	st := ro.Status
	if st == nil {
		return "not started"
	}
	out := fmt.Sprintf("%s at step %d of %d", st.State, st.Step, len(ro.Steps))
	if st.Step < len(ro.Steps) {
		out += fmt.Sprintf(" (%s)", ro.Steps[st.Step])
	}
	return out
}

// stepBound reports whether an action means the step its caller saw, so
// that it must not be carried out on another one: promote skips the
// current step and resume restarts it. Pause and abort hold or stop the
// rollout wherever it stands, and retry restarts it from step 0.
func stepBound(a Action) bool { return a == ActionPromote || a == ActionResume }

// Act carries out an operator's command on key's rollout as a new
// version by cmd.By, and returns the rollout as it then stands. A command
// that does not fit the state is an ErrState error; a rule without a
// rollout an ErrNoRollout one; a cmd.IfVersion that is not the rule's
// version a store.ErrConflict one.
//
// The command is decided on the version read first. A write that loses
// the race to another one (an operator's, or the driver's) is decided
// again on the newer version only if the rollout is where it was, or the
// action does not depend on where it is (pause, abort): two operators who
// promote at once skip one step, not two; the second is told where the
// rollout now stands. With IfVersion a newer version is a conflict.
func (e *Engine) Act(ctx context.Context, key string, cmd Command) (View, error) {
	if !slices.Contains(Actions, cmd.Action) {
		return View{}, fmt.Errorf("unknown rollout action %q: want promote, pause, resume, abort or retry: %w", cmd.Action, ErrState)
	}
	if cmd.Full && cmd.Action != ActionPromote {
		return View{}, fmt.Errorf("full is only for promote: %w", ErrState)
	}
	var seen position
	for attempt := 0; ; attempt++ {
		en, err := e.opts.Store.Get(ctx, key)
		if err != nil {
			return View{}, err
		}
		r, err := rule.Decode(en.Rule)
		if err != nil {
			return View{}, fmt.Errorf("decode rule %q: %w", key, err)
		}
		if cmd.IfVersion > 0 && en.Version != cmd.IfVersion {
			err := store.CheckVersion(key, en.Version, true, cmd.IfVersion, true)
			if r.Rollout != nil {
				err = fmt.Errorf("%w; its rollout is %s, and nothing was changed", err, where(&r))
			}
			return View{}, err
		}
		if attempt == 0 {
			seen = positionOf(&r)
		} else if stepBound(cmd.Action) && positionOf(&r) != seen {
			return View{}, fmt.Errorf("rollout of %q moved on while %s was being carried out: it is now %s; nothing was changed (%s again if that is still meant): %w",
				key, cmd.Action, where(&r), cmd.Action, ErrState)
		}
		if why := e.rollback(key, en); why != "" && cmd.Action == ActionPromote && r.Rollout != nil {
			return View{}, fmt.Errorf("rollout of %q is held at %s while %s: promote after the resume (the rollback keeps the scene): %w",
				key, where(&r), why, ErrState)
		}
		prev := r.Rollout
		var started time.Time
		if prev != nil && prev.Status != nil {
			started = prev.Status.StartedAt
		}
		c, err := act(&r, e.opts.Clock.Now(), cmd)
		if err != nil {
			return View{}, err
		}
		if err := r.Validate(); err != nil {
			return View{}, fmt.Errorf("rollout of %q: %s would make the rule invalid, so nothing was changed: %w: %w", key, cmd.Action, err, ErrState)
		}
		if st := r.Rollout.Status; st.StartedAt.Equal(started) {
			// The driver publishes its live measurements only between its
			// writes: the measurement that made it write (the last one of a
			// passed analysis) is in the stored status, not in the live
			// view. Take the live list only when it is the more recent log,
			// or the operator's version would drop that measurement.
			if lv, ok := e.liveOf(ctx, key); ok && lv.StartedAt.Equal(started) && newestAt(lv.Measurements).After(newestAt(st.Measurements)) {
				st.Measurements = lv.Measurements
			}
		} else {
			st.Measurements = nil
		}
		reason := c.reason
		if cmd.Reason != "" {
			reason += ": " + cmd.Reason
		}
		nen, err := e.write(ctx, key, &r, en.Version, store.Meta{By: cmd.By, Reason: reason}, c)
		if errors.Is(err, errStale) && attempt < 5 {
			continue // decided again, or refused, on the newer version
		}
		if err != nil {
			return View{}, err
		}
		return e.viewOf(ctx, nen, &r), nil
	}
}

// Carry makes a rule about to be stored by an operator (PUT, revert)
// keep the rollout status it has in the store: a client cannot set a
// status, so whatever next carries in rollout.status is replaced. With
// the same plan the stored status carries over; a new or changed plan
// (steps, analyses or any other rollout field) starts from step 0, as
// Argo Rollouts restarts when the steps change. prev is the stored rule
// (nil: none).
func Carry(prev, next *rule.Rule) {
	if next.Rollout == nil {
		return
	}
	next.Rollout.Status = nil
	if prev != nil && prev.Rollout != nil && prev.Rollout.Status != nil && rule.SamePlan(prev.Rollout, next.Rollout) {
		st := *prev.Rollout.Status
		next.Rollout.Status = &st
	}
}

// newestAt is when the latest of ms (oldest first) was taken; zero for
// none.
func newestAt(ms []rule.Measurement) time.Time {
	if len(ms) == 0 {
		return time.Time{}
	}
	return ms[len(ms)-1].At
}
