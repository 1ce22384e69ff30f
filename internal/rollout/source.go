package rollout

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/traffic"
)

// Groups of the traffic the built-in metrics read.
const (
	GroupGray   = "gray"
	GroupStable = "stable"
)

// Source is where the built-in metrics and the breaker state come from:
// this gateway's own traffic (Local), or the sum of a fleet's (Fleet).
// Implementations are safe for concurrent use.
type Source interface {
	// Window returns the traffic of group (GroupGray or GroupStable) of
	// rule over the last d.
	Window(ctx context.Context, rule, group string, d time.Duration) (traffic.Stats, error)
	// Breaker returns the state of the breaker guarding rule's gray
	// target.
	Breaker(ctx context.Context, rule, target string) (BreakerState, error)
}

// BreakerState is what a rollout needs to know of a gray target's
// breaker (across a fleet: of any gateway's).
type BreakerState struct {
	// OpenNow reports an open breaker.
	OpenNow bool `json:"open_now,omitempty"`
	// LastOpen is when the breaker last opened (zero: never), and
	// Reason why.
	LastOpen time.Time `json:"last_open,omitzero"`
	Reason   string    `json:"reason,omitempty"`
}

// StateOf reads a breaker snapshot.
func StateOf(s breaker.Snapshot) BreakerState {
	var out BreakerState
	out.OpenNow = s.State == breaker.Open
	for _, t := range s.Transitions {
		if t.To == breaker.Open && t.At.After(out.LastOpen) {
			out.LastOpen, out.Reason = t.At, t.Reason
		}
	}
	if out.OpenNow && s.Since.After(out.LastOpen) {
		out.LastOpen, out.Reason = s.Since, s.Reason
	}
	return out
}

// Recorder keeps the traffic the built-in metrics read, for the rules
// with an active rollout only: each rule's gray requests, where a gray
// attempt that failed before answering and was replayed on stable counts
// as a failed gray request (the main traffic windows count it as the
// stable answer it became), and every request the rule's stable target
// answered, whichever rule sent it there (a gray rule's users outside the
// gray share fall through to other rules or the default, so the stable
// version's error rate is that of all it serves: the baseline Argo
// Rollouts and Flagger compare a canary with).
//
// Record is on the request path: with no active rollout it is one atomic
// load; otherwise two map lookups and, for the requests it keeps, a
// traffic.Set Record (no lock, no allocation once the series exists).
// BenchmarkRecord on this project's loaded 2-core machine: 5 ns without a
// rollout, 110–160 ns for a request it keeps, 0 allocations. It is safe
// for concurrent use.
type Recorder struct {
	set   *traffic.Set
	watch atomic.Pointer[watchSet]
}

type watchSet struct {
	gray   map[string]bool     // rule keys under rollout
	stable map[string][]string // stable pool name → rule keys
}

// NewRecorder returns a Recorder whose windows read now.
func NewRecorder(now func() time.Time) (*Recorder, error) {
	set, err := traffic.New(traffic.Options{Now: now})
	if err != nil {
		return nil, err
	}
	return &Recorder{set: set}, nil
}

// Run keeps the traffic windows' clock (see traffic.Set.Run) until ctx
// ends.
func (r *Recorder) Run(ctx context.Context) { r.set.Run(ctx) }

// watchRules sets the rules to record: rule key → stable pool name.
func (r *Recorder) watchRules(rules map[string]string) {
	if len(rules) == 0 {
		r.watch.Store(nil)
		r.set.Retain(func(string) bool { return false })
		return
	}
	w := &watchSet{gray: map[string]bool{}, stable: map[string][]string{}}
	for k, pool := range rules {
		w.gray[k] = true
		if pool != "" {
			w.stable[pool] = append(w.stable[pool], k)
		}
	}
	r.watch.Store(w)
	r.set.Retain(func(k string) bool { return w.gray[k] })
}

// Record counts one finished request (the gateway calls it from the data
// plane's OnDone).
func (r *Recorder) Record(d *router.Decision, status int, elapsed time.Duration) {
	w := r.watch.Load()
	if w == nil {
		return
	}
	if w.gray[d.Rule] {
		switch {
		case d.Group == router.GroupGray:
			r.set.Record(d.Rule, GroupGray, status, false, elapsed)
		case d.Degraded == router.DegradedFallback && d.Experiment == "" && d.Intended != nil:
			r.set.Record(d.Rule, GroupGray, 0, true, elapsed)
		}
	}
	if d.Target != nil {
		for _, k := range w.stable[d.Target.Name] {
			r.set.Record(k, GroupStable, status, false, elapsed)
		}
	}
}

// Window returns the recorded traffic of (rule, group) over the last d.
func (r *Recorder) Window(rule, group string, d time.Duration) traffic.Stats {
	return r.set.Window(rule, group, d)
}

// export returns the recorded buckets of rule over the last d, for a
// fleet's drivers.
func (r *Recorder) export(key string, d time.Duration) traffic.Export {
	e := r.set.Export(d)
	kept := e.Series[:0]
	for _, s := range e.Series {
		if s.Rule == key {
			kept = append(kept, s)
		}
	}
	e.Series = kept
	return e
}

// Local is the Source of one gateway: its Recorder and its breakers.
type Local struct {
	Recorder *Recorder
	// Breakers returns the snapshot of the breaker guarding (rule, gray
	// target), if there is one.
	Breakers func(rule, target string) (breaker.Snapshot, bool)
}

// Window implements Source.
func (l *Local) Window(_ context.Context, rule, group string, d time.Duration) (traffic.Stats, error) {
	return l.Recorder.Window(rule, group, d), nil
}

// Breaker implements Source.
func (l *Local) Breaker(_ context.Context, rule, target string) (BreakerState, error) {
	return l.state(rule, target), nil
}

func (l *Local) state(rule, target string) BreakerState {
	if l.Breakers == nil {
		return BreakerState{}
	}
	s, ok := l.Breakers(rule, target)
	if !ok {
		return BreakerState{}
	}
	return StateOf(s)
}

// grayTarget returns the gray target string of r (the breaker key's
// second half).
func grayTarget(r *rule.Rule) string {
	if r.Targets == nil {
		return ""
	}
	return r.Targets.Gray
}
