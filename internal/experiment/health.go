package experiment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/graygate/graygate/internal/stats"
)

// SRMAlert is one experiment whose split was found mismatched: the units
// per group do not fit the weights (chi-square p below the threshold), so
// its results cannot be trusted.
type SRMAlert struct {
	// Rule is the ab rule's key; Experiment its experiment id.
	Rule, Experiment string
	// PValue is the χ² p-value and SequentialPValue the anytime-valid one,
	// both below Threshold.
	PValue, SequentialPValue, Threshold float64
	// Units are the units per group the check judged: every unit, or
	// those assigned since Since.
	Units map[string]int64
	// Since, when not zero, is when the experiment's current phase began
	// (its allocation changed, or a freeze was lifted): only the units
	// assigned since were judged.
	Since time.Time
	// Frozen says the rule is being rolled back (experiments.srm_action:
	// freeze).
	Frozen bool
}

// checkHealth runs the SRM check of every experiment from the store's unit
// counts (with Redis, the fleet's) and keeps the numbers for the metrics.
// It judges the units of the experiment's current phase (phase.go): after
// its allocation changed, or a freeze of it was lifted, only the units
// assigned since. A split that turns mismatched (stats.SRM.Alert: the χ²
// and the anytime-valid p-values both below the threshold, since this
// check reads every experiment several times a second) is reported once:
// a WARN log naming the experiment, OnSRM, and with
// experiments.srm_action: freeze a one-click rollback of the rule version
// that was judged, whose history records why. The phase records the
// freeze, so that a restart neither reports nor freezes it again, and a
// resume of the rule begins a new phase. It runs on the writer.
func (r *Recorder) checkHealth(ctx context.Context) {
	cat := r.cat.Load()
	seen := map[string]bool{}
	phases := map[string]phaseCheck{} // by experiment id: rules may share one
	now := r.opts.Now()
	for _, k := range cat.rules {
		sp := cat.byRule[k]
		seen[k] = true
		pc, done := phases[sp.ID]
		if !done {
			pc = r.reconcile(ctx, cat, sp, now)
			phases[sp.ID] = pc
		}
		if !pc.ok {
			continue // the store is down; keep the last numbers
		}
		res, err := stats.Compute(input(sp, counts{units: pc.units}, nil))
		r.mu.Lock()
		h := r.health[k]
		if h == nil {
			h = &health{}
			r.health[k] = h
		}
		h.id, h.units, h.p, h.seqP = sp.ID, pc.c.units, nil, nil
		if h.since != pc.ph.Since {
			h.since, h.flagged = pc.ph.Since, false // a new phase: a new judgement
		}
		if _, frozen := pc.ph.Frozen[k]; frozen {
			h.flagged = true // reported and frozen in this phase already
		}
		if err != nil {
			r.mu.Unlock()
			continue // fewer than two groups: nothing to compare
		}
		h.p, h.seqP = res.SRM.PValue, res.SRM.SequentialPValue
		mismatch := res.SRM.Judged && res.SRM.Alert
		edge := mismatch && !h.flagged
		if res.SRM.Judged {
			h.flagged = mismatch
		}
		r.mu.Unlock()
		if !edge {
			continue
		}
		p, seqP := 0.0, 0.0
		if res.SRM.PValue != nil {
			p = *res.SRM.PValue
		}
		if res.SRM.SequentialPValue != nil {
			seqP = *res.SRM.SequentialPValue
		}
		var since time.Time
		judgedUnits := unitList(res)
		if pc.ph.Since != 0 {
			since = time.UnixMilli(pc.ph.Since).UTC()
			judgedUnits += " since " + since.Format(time.RFC3339)
		}
		args := []any{"experiment", sp.ID, "rule", k, "p_value", p, "sequential_p_value", seqP, "threshold", res.SRM.Threshold, "units", pc.units}
		if !since.IsZero() {
			// In the first phase every unit is judged: there is no since
			// to name (a zero time would read as the year 1).
			args = append(args, "since", since)
		}
		args = append(args, "frozen", cat.Freeze && !sp.RolledBack)
		r.log.Warn("sample ratio mismatch: the split does not match the weights, so this experiment's results cannot be trusted", args...)
		if r.opts.OnSRM != nil {
			units := make(map[string]int64, len(res.Groups))
			for _, g := range res.Groups {
				units[g.Name] = g.Units
			}
			r.opts.OnSRM(SRMAlert{Rule: k, Experiment: sp.ID, PValue: p, SequentialPValue: seqP, Threshold: res.SRM.Threshold, Units: units, Since: since,
				Frozen: cat.Freeze && !sp.RolledBack && r.opts.Freeze != nil})
		}
		if cat.Freeze && !sp.RolledBack && r.opts.Freeze != nil {
			r.freeze(k, sp.ID, sp.Version, fmt.Sprintf("sample ratio mismatch in experiment %q: SRM p-value %.3g < %g, sequential p-value %.3g (units %s); frozen by experiments.srm_action: freeze", sp.ID, p, res.SRM.Threshold, seqP, judgedUnits))
		}
	}
	r.mu.Lock()
	for k := range r.health {
		if !seen[k] {
			delete(r.health, k)
		}
	}
	r.mu.Unlock()
}

// unitList names each group's units, in the results' order: "A 5011, B 4473".
func unitList(res *stats.Results) string {
	var b strings.Builder
	for i, g := range res.Groups {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", g.Name, g.Units)
	}
	return b.String()
}

// freeze rolls version of rule back on its own goroutine, so that the
// writer never waits on the rule store; one freeze per rule is in flight at
// a time. A rule changed since the check (ErrRuleChanged) is not frozen:
// its next check judges the new version. A freeze made is handed to the
// writer (froze), which records it in the experiment's phase.
func (r *Recorder) freeze(rule, id string, version int64, reason string) {
	if _, busy := r.freezing.LoadOrStore(rule, struct{}{}); busy {
		return
	}
	go func() {
		defer r.freezing.Delete(rule)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.opts.Freeze(ctx, rule, version, reason); err != nil {
			if errors.Is(err, ErrRuleChanged) {
				r.log.Info("not frozen: the rule changed after its sample ratio mismatch was found", "rule", rule, "version", version, "err", err)
			} else {
				r.log.Error("freeze an experiment with a sample ratio mismatch", "rule", rule, "err", err)
			}
			r.mu.Lock()
			if h := r.health[rule]; h != nil {
				h.flagged = false // try again at the next check
			}
			r.mu.Unlock()
			return
		}
		r.froze.Store(rule, frozeAt{id: id, version: version})
		r.log.Warn("experiment frozen: everyone goes to the control group", "rule", rule, "reason", reason)
	}()
}

var (
	descUnits = prometheus.NewDesc("graygate_experiment_units",
		"Units exposed to an experiment, by group, as the experiment store counts them (the fleet's with Redis).", []string{"experiment", "group"}, nil)
	descSRM = prometheus.NewDesc("graygate_experiment_srm_p_value",
		"P-value of the sample-ratio-mismatch check (Pearson chi-squared against the weights), once every group expects 8 units.", []string{"experiment"}, nil)
	descSeqSRM = prometheus.NewDesc("graygate_experiment_srm_sequential_p_value",
		"Anytime-valid p-value of the sample-ratio-mismatch check (Lindon and Malek's Dirichlet-multinomial test), valid however often it is read; once every group expects 8 units.", []string{"experiment"}, nil)
	descDropped = prometheus.NewDesc("graygate_experiment_events_dropped_total",
		"Exposures and conversions not recorded, by reason.", []string{"reason"}, nil)
	descBacklog = prometheus.NewDesc("graygate_experiment_store_buffered_events",
		"Events waiting for an unreachable experiment store.", nil, nil)
	descStoreErr = prometheus.NewDesc("graygate_experiment_store_errors_total",
		"Flushes the experiment store failed.", nil, nil)
)

// Collector returns the recorder's Prometheus collector. It reports the
// numbers of the last health check and never calls the store.
func (r *Recorder) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Recorder }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUnits, descSRM, descSeqSRM, descDropped, descBacklog, descStoreErr} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	r.mu.Lock()
	done := map[string]bool{} // two rules may share an experiment id
	for _, h := range r.health {
		if done[h.id] {
			continue
		}
		done[h.id] = true
		for g, n := range h.units {
			ch <- prometheus.MustNewConstMetric(descUnits, prometheus.GaugeValue, float64(n), h.id, g)
		}
		if h.p != nil {
			ch <- prometheus.MustNewConstMetric(descSRM, prometheus.GaugeValue, *h.p, h.id)
		}
		if h.seqP != nil {
			ch <- prometheus.MustNewConstMetric(descSeqSRM, prometheus.GaugeValue, *h.seqP, h.id)
		}
	}
	r.mu.Unlock()
	for i, reason := range dropReasons {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(r.dropped[i].Load()), reason)
	}
	ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(r.backlogLen.Load()))
	ch <- prometheus.MustNewConstMetric(descStoreErr, prometheus.CounterValue, float64(r.storeErrors.Load()))
}
