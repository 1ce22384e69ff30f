package stats

import (
	"errors"
	"fmt"
	"math"

	"github.com/graygate/graygate/internal/strict"
)

// MetricType says what a metric's per-unit value is.
type MetricType string

const (
	// Binomial is a 0/1 value per unit: did the unit convert.
	Binomial MetricType = "binomial"
	// Mean is a real value per unit: the sum of what the unit reported.
	Mean MetricType = "mean"
)

const (
	// DefaultSequentialTuning is GrowthBook's default tuning parameter N of
	// the always-valid interval (frequentist/tests.py L35): the total sample
	// size at which the sequential interval is tightest relative to the
	// fixed-horizon one.
	DefaultSequentialTuning = 5000
	// DefaultSRMThreshold is the p-value below which a split is flagged,
	// as in issue 14 and GrowthBook's DEFAULT_SRM_THRESHOLD
	// (packages/shared/src/constants.ts L113).
	DefaultSRMThreshold = 0.001
	// SRMMinUnits is the number of units every group must expect (its
	// share of all units, by weight) before the χ² test is judged: with
	// fewer, the χ² approximation is too coarse. It gates on expected,
	// not observed, counts (Cochran's rule), because a group that
	// receives too few units is the very mismatch the check exists for.
	SRMMinUnits = 8
	// SRMSequentialConcentration is C, the concentration of the Dirichlet
	// prior of the sequential SRM test around the configured shares: the
	// test is most powerful for mismatches that show after about C units.
	// Optimizely's ssrm defaults to 10,000; a gateway's experiments are often
	// smaller, and at 1,000 a 10% drop of one of two groups is flagged
	// within 10,000 units (issue 14's planted SRM).
	SRMSequentialConcentration = 1000
	// alpha is the level of ci95 and of the sequential interval.
	alpha = 0.05
)

// Input is one experiment's aggregates, as the exposure and conversion
// stores count them. Compute does not modify it.
type Input struct {
	// Experiment is the experiment's key.
	Experiment string
	// RuleVersion is the rule version the aggregates belong to.
	RuleVersion int64
	// Control names the group every other group is compared with.
	Control string
	// Groups are the experiment's groups, control included, in the order
	// the results list them.
	Groups []Group
	// Options are the rule's statistics options.
	Options Options
}

// Options tunes the statistics of one rule. The zero value is the default:
// fixed-horizon tests and an SRM threshold of DefaultSRMThreshold.
type Options struct {
	// Sequential makes ci95 and p_value always valid, so that reading the
	// results every minute does not inflate false positives.
	Sequential bool
	// SequentialTuning is the tuning parameter N; 0 means
	// DefaultSequentialTuning.
	SequentialTuning float64
	// SRMThreshold is the SRM p-value threshold in (0, 1); 0 means
	// DefaultSRMThreshold.
	SRMThreshold float64
}

// Group is one group's aggregates.
type Group struct {
	// Name is the group's name, unique in the experiment.
	Name string
	// Weight is the configured weight, relative to the sum of all weights.
	Weight float64
	// Units is the number of units exposed to the group.
	Units int64
	// Metrics are the group's metrics; every group has the same ones.
	Metrics []Metric
}

// Metric is one metric's aggregates over a group's units.
type Metric struct {
	// Name is the metric's name, unique in the group.
	Name string
	// Type is Binomial or Mean.
	Type MetricType
	// Units is the number of exposed units the metric counted.
	Units int64
	// Count is the number of units that converted (binomial) or have a
	// non-zero value (mean).
	Count int64
	// Sum is the sum of the per-unit values.
	Sum float64
	// SumSquares is the sum of the squares of the per-unit values.
	SumSquares float64
}

// Results is what GET /api/v1/experiments/{key}/results returns. Every
// float pointer is nil exactly when the number is undefined, so the JSON
// never holds NaN or Inf.
type Results struct {
	Experiment  string `json:"experiment"`
	RuleVersion int64  `json:"rule_version"`
	Control     string `json:"control"`
	// Sequential says whether ci95 and p_value are always valid.
	Sequential bool `json:"sequential"`
	// SequentialTuning is the tuning parameter N in use, when Sequential.
	SequentialTuning float64       `json:"sequential_tuning,omitempty"`
	Groups           []GroupResult `json:"groups"`
	SRM              SRM           `json:"srm"`
	// Comparisons are one per non-control group and metric, in the order of
	// the groups and of the control group's metrics.
	Comparisons []Comparison `json:"comparisons"`
}

// GroupResult is one group's counts and per-metric summaries.
type GroupResult struct {
	Name    string                  `json:"name"`
	Weight  float64                 `json:"weight"`
	Units   int64                   `json:"units"`
	Metrics map[string]MetricResult `json:"metrics"`
}

// MetricResult is one metric's aggregates in one group and what follows
// from them alone.
type MetricResult struct {
	Type       MetricType `json:"type"`
	Units      int64      `json:"units"`
	Count      int64      `json:"count"`
	Sum        float64    `json:"sum"`
	SumSquares float64    `json:"sum_squares"`
	// Mean is sum/units; nil without units.
	Mean *float64 `json:"mean"`
	// Variance is the sample variance of the unit values; nil below 2 units.
	Variance *float64 `json:"variance"`
}

// SRM is the sample-ratio-mismatch check of the whole split.
type SRM struct {
	// Chi2 is Pearson's statistic; nil when not judged or infinite.
	Chi2 *float64 `json:"chi2"`
	// DF is the number of degrees of freedom: weighted groups − 1.
	DF int `json:"df"`
	// PValue is P(χ²_df > Chi2); nil when not judged.
	PValue    *float64 `json:"p_value"`
	Threshold float64  `json:"threshold"`
	// OK is false only when the split was judged and PValue < Threshold.
	OK bool `json:"ok"`
	// SequentialPValue is the anytime-valid p-value of the split
	// (sequentialSRM): unlike PValue, it stays valid however often it is
	// read. nil when not judged.
	SequentialPValue *float64 `json:"sequential_p_value"`
	// Alert is what the gateway acts on while it watches an experiment
	// (the WARN, the srm notification, srm_action: freeze): the split is
	// judged and both PValue and SequentialPValue are below Threshold. The
	// gateway checks every experiment several times a second; χ² alone,
	// read that often, would flag a clean split sooner or later.
	Alert bool `json:"alert"`
	// Judged is false while some weighted group expects fewer than
	// SRMMinUnits units (weight/Σweights × all units); Reason then says
	// which. A group that gets fewer units than that, or none, does not
	// hold the judgement back.
	Judged bool   `json:"judged"`
	Reason string `json:"reason,omitempty"`
}

// Comparison is one metric of one group against the control group.
type Comparison struct {
	Group        string   `json:"group"`
	Metric       string   `json:"metric"`
	BaselineMean *float64 `json:"baseline_mean"`
	Mean         *float64 `json:"mean"`
	// AbsDiff is mean − baseline_mean.
	AbsDiff *float64 `json:"abs_diff"`
	// Lift is abs_diff/|baseline_mean|.
	Lift *float64 `json:"lift"`
	// CI95 is the 95% interval of Lift: the delta-method interval, or the
	// always-valid one when Sequential.
	CI95 *[2]float64 `json:"ci95"`
	// PValue is Welch's two-sided p-value, or the always-valid one when
	// Sequential; the latter tests the lift, so it is null when the lift
	// or its variance is undefined, never the fixed-horizon one instead.
	PValue *float64 `json:"p_value"`
	// WelchPValue is the fixed-horizon Welch p-value, set only when
	// Sequential (otherwise it is PValue).
	WelchPValue *float64 `json:"welch_p_value,omitempty"`
	// T and DF are Welch's t statistic and Welch–Satterthwaite degrees of
	// freedom.
	T  *float64 `json:"t"`
	DF *float64 `json:"df"`
	// LiftStdErr is the delta-method standard error of Lift.
	LiftStdErr *float64 `json:"lift_std_err"`
	// Reason says why a field is null; empty when none is.
	Reason string `json:"reason,omitempty"`
}

// Compute computes the results of in. It returns an error naming every bad
// field (by path, as groups[1].metrics.purchase.count) when the aggregates
// are inconsistent, and then no results.
func Compute(in Input) (*Results, error) {
	opt, err := in.validate()
	if err != nil {
		return nil, fmt.Errorf("computing results of experiment %q: %w", in.Experiment, err)
	}
	res := &Results{
		Experiment:  in.Experiment,
		RuleVersion: in.RuleVersion,
		Control:     in.Control,
		Sequential:  opt.Sequential,
		Groups:      make([]GroupResult, len(in.Groups)),
		Comparisons: []Comparison{},
	}
	if opt.Sequential {
		res.SequentialTuning = opt.SequentialTuning
	}
	control := -1
	for i, g := range in.Groups {
		if g.Name == in.Control {
			control = i
		}
		gr := GroupResult{Name: g.Name, Weight: g.Weight, Units: g.Units, Metrics: make(map[string]MetricResult, len(g.Metrics))}
		for _, m := range g.Metrics {
			s := summarize(m)
			gr.Metrics[m.Name] = MetricResult{
				Type: m.Type, Units: m.Units, Count: m.Count, Sum: m.Sum, SumSquares: m.SumSquares,
				Mean: s.meanPtr(), Variance: s.varPtr(),
			}
		}
		res.Groups[i] = gr
	}
	res.SRM = checkSRM(in.Groups, opt.SRMThreshold)
	ctrl := in.Groups[control]
	for i, g := range in.Groups {
		if i == control {
			continue
		}
		for _, cm := range ctrl.Metrics {
			m, _ := metricByName(g.Metrics, cm.Name)
			c := compare(summarize(cm), summarize(m), opt)
			c.Group, c.Metric = g.Name, cm.Name
			res.Comparisons = append(res.Comparisons, c)
		}
	}
	return res, nil
}

// validate checks in and returns its options with the defaults filled in.
func (in *Input) validate() (Options, error) {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	opt := in.Options
	switch {
	case opt.SequentialTuning == 0:
		opt.SequentialTuning = DefaultSequentialTuning
	case !(opt.SequentialTuning > 0) || math.IsInf(opt.SequentialTuning, 0):
		add("sequential_tuning", "must be a positive number, got %v", opt.SequentialTuning)
	}
	switch {
	case opt.SRMThreshold == 0:
		opt.SRMThreshold = DefaultSRMThreshold
	case !(opt.SRMThreshold > 0 && opt.SRMThreshold < 1):
		add("srm_threshold", "must be in (0, 1), got %v", opt.SRMThreshold)
	}
	if in.Experiment == "" {
		add("experiment", "is required")
	}
	if len(in.Groups) < 2 {
		add("groups", "an experiment needs at least 2 groups, got %d", len(in.Groups))
	}
	names := map[string]int{}
	control := -1
	weights := 0.0
	for i, g := range in.Groups {
		p := strict.Index("groups", i)
		if g.Name == "" {
			add(p+".name", "is required")
		} else if j, dup := names[g.Name]; dup {
			add(p+".name", "duplicates groups[%d].name %q", j, g.Name)
		} else {
			names[g.Name] = i
		}
		if g.Name == in.Control && control < 0 {
			control = i
		}
		if !(g.Weight >= 0) || math.IsInf(g.Weight, 0) {
			add(p+".weight", "must be a finite number ≥ 0, got %v", g.Weight)
		} else {
			weights += g.Weight
		}
		if g.Units < 0 {
			add(p+".units", "must be ≥ 0, got %d", g.Units)
		}
		errs = append(errs, validateMetrics(p, g)...)
	}
	if in.Control == "" {
		add("control", "is required")
	} else if control < 0 {
		add("control", "names no group: %q", in.Control)
	}
	if len(in.Groups) > 0 && !(weights > 0 && !math.IsInf(weights, 0)) {
		add("groups", "weights must sum to a positive finite number, got %v", weights)
	}
	if control >= 0 {
		ctrl := in.Groups[control]
		for i, g := range in.Groups {
			if i == control {
				continue
			}
			p := strict.Index("groups", i)
			for _, cm := range ctrl.Metrics {
				m, ok := metricByName(g.Metrics, cm.Name)
				if !ok {
					add(p+".metrics", "lacks metric %q of the control group %q", cm.Name, ctrl.Name)
				} else if m.Type != cm.Type {
					add(p+".metrics."+m.Name+".type", "is %q, but %q in the control group %q", m.Type, cm.Type, ctrl.Name)
				}
			}
			for _, m := range g.Metrics {
				if _, ok := metricByName(ctrl.Metrics, m.Name); !ok && m.Name != "" {
					add(p+".metrics."+m.Name, "is not a metric of the control group %q", ctrl.Name)
				}
			}
		}
	}
	return opt, errors.Join(errs...)
}

// validateMetrics checks one group's metrics; p is the group's path.
func validateMetrics(p string, g Group) []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, strict.Errorf(path, format, args...))
	}
	seen := map[string]int{}
	for j, m := range g.Metrics {
		mp := strict.Index(p+".metrics", j)
		if m.Name == "" {
			add(mp+".name", "is required")
		} else if k, dup := seen[m.Name]; dup {
			add(mp+".name", "duplicates %s.metrics[%d].name %q", p, k, m.Name)
			continue
		} else {
			seen[m.Name] = j
			mp = p + ".metrics." + m.Name
		}
		if m.Type != Binomial && m.Type != Mean {
			add(mp+".type", "must be %q or %q, got %q", Binomial, Mean, m.Type)
		}
		if m.Units < 0 || m.Units > g.Units {
			add(mp+".units", "must be 0..%d (the group's units), got %d", g.Units, m.Units)
		}
		if m.Count < 0 || m.Count > m.Units {
			add(mp+".count", "must be 0..%d (the metric's units), got %d", max(m.Units, 0), m.Count)
		}
		finite := true
		if math.IsNaN(m.Sum) || math.IsInf(m.Sum, 0) {
			add(mp+".sum", "must be finite, got %v", m.Sum)
			finite = false
		}
		if !(m.SumSquares >= 0) || math.IsInf(m.SumSquares, 0) {
			add(mp+".sum_squares", "must be finite and ≥ 0, got %v", m.SumSquares)
			finite = false
		}
		if !finite {
			continue
		}
		switch m.Type {
		case Binomial:
			// Every unit's value is 0 or 1, so sum = sum of squares = count.
			if m.Sum != float64(m.Count) {
				add(mp+".sum", "must equal count (%d) for a binomial metric, got %v", m.Count, m.Sum)
			}
			if m.SumSquares != float64(m.Count) {
				add(mp+".sum_squares", "must equal count (%d) for a binomial metric, got %v", m.Count, m.SumSquares)
			}
		case Mean:
			if m.Count == 0 && (m.Sum != 0 || m.SumSquares != 0) {
				add(mp+".count", "is 0, but sum is %v and sum_squares %v: some unit has a non-zero value", m.Sum, m.SumSquares)
			}
			// Cauchy–Schwarz: sum² ≤ count·sum_squares, since only count
			// units are non-zero. Rounding in the stores' float sums may
			// break it by a few ulps, never by more than this slack.
			if c := float64(m.Count); m.Sum*m.Sum > c*m.SumSquares*(1+1e-9) {
				add(mp+".sum_squares", "is %v, too small for sum %v over %d non-zero units (sum² ≤ count·sum_squares)", m.SumSquares, m.Sum, m.Count)
			}
		}
	}
	return errs
}

// metricByName returns the metric called name in ms.
func metricByName(ms []Metric, name string) (Metric, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// finite returns a pointer to x, or nil when x is NaN or ±Inf: every float
// in Results goes through it, which is what keeps NaN out of the JSON.
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}
