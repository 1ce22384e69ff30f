package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

// The reference values come from scipy (testdata/gen_reference.py; the
// versions and the command are in testdata/README.md).

// refTol is the agreement asked of Go against scipy. Probabilities (p-values)
// are compared absolutely: |got − want| ≤ 1e-9, since a p-value is read on
// an absolute scale and one of 1e-300 has no relative digits worth keeping.
// Every other number (means, variances, t, df, lift, its standard error and
// interval ends, χ²) is compared relatively: |got − want| ≤ 1e-9·|want|, with
// an absolute floor of 1e-15 for values that are 0.
//
// Beyond largeDF degrees of freedom (over ~5 million units per group)
// gonum's Student t limits the agreement of the numbers that depend on it
// (p-values and interval ends) to largeDFTol; see normalDF.
const (
	refTol     = 1e-9
	largeDF    = 1e7
	largeDFTol = 2e-8
)

type refFile struct {
	Scipy       string    `json:"scipy"`
	Numpy       string    `json:"numpy"`
	Alpha       float64   `json:"alpha"`
	SRMMinUnits int       `json:"srm_min_units"`
	Cases       []refCase `json:"cases"`
}

type refCase struct {
	Name             string     `json:"name"`
	Control          string     `json:"control"`
	SequentialTuning float64    `json:"sequential_tuning"`
	Groups           []refGroup `json:"groups"`
	Expected         struct {
		Groups      map[string]map[string]refMoments `json:"groups"`
		SRM         refSRM                           `json:"srm"`
		Comparisons []refComparison                  `json:"comparisons"`
	} `json:"expected"`
}

type refGroup struct {
	Name    string      `json:"name"`
	Weight  float64     `json:"weight"`
	Units   int64       `json:"units"`
	Metrics []refMetric `json:"metrics"`
}

type refMoments struct {
	Mean     *float64 `json:"mean"`
	Variance *float64 `json:"variance"`
}

type refSRM struct {
	DF     int      `json:"df"`
	Chi2   *float64 `json:"chi2"`
	PValue *float64 `json:"p_value"`
	Judged bool     `json:"judged"`
}

type refComparison struct {
	Group        string      `json:"group"`
	Metric       string      `json:"metric"`
	BaselineMean *float64    `json:"baseline_mean"`
	Mean         *float64    `json:"mean"`
	AbsDiff      *float64    `json:"abs_diff"`
	Lift         *float64    `json:"lift"`
	T            *float64    `json:"t"`
	DF           *float64    `json:"df"`
	PValue       *float64    `json:"p_value"`
	TRaw         *float64    `json:"t_raw"`
	PValueRaw    *float64    `json:"p_value_raw"`
	RawAgrees    bool        `json:"raw_agrees"`
	LiftStdErr   *float64    `json:"lift_std_err"`
	CI95         *[2]float64 `json:"ci95"`
	SeqCI95      *[2]float64 `json:"seq_ci95"`
	SeqPValue    *float64    `json:"seq_p_value"`
}

// refMetric is a metric's aggregates as the generator writes them.
type refMetric struct {
	Name       string     `json:"name"`
	Type       MetricType `json:"type"`
	Units      int64      `json:"units"`
	Count      int64      `json:"count"`
	Sum        float64    `json:"sum"`
	SumSquares float64    `json:"sum_squares"`
}

func loadReference(t *testing.T) refFile {
	t.Helper()
	b, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatalf("reading the scipy reference: %v", err)
	}
	var ref refFile
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatalf("decoding testdata/reference.json: %v", err)
	}
	if len(ref.Cases) == 0 {
		t.Fatal("testdata/reference.json has no cases")
	}
	if ref.Alpha != alpha || ref.SRMMinUnits != SRMMinUnits {
		t.Fatalf("reference made with alpha %v, min units %d; the package uses %v, %d", ref.Alpha, ref.SRMMinUnits, alpha, SRMMinUnits)
	}
	return ref
}

func (c refCase) input(sequential bool) Input {
	in := Input{Experiment: c.Name, RuleVersion: 1, Control: c.Control,
		Options: Options{Sequential: sequential, SequentialTuning: c.SequentialTuning}}
	for _, g := range c.Groups {
		grp := Group{Name: g.Name, Weight: g.Weight, Units: g.Units}
		for _, m := range g.Metrics {
			grp.Metrics = append(grp.Metrics, Metric(m))
		}
		in.Groups = append(in.Groups, grp)
	}
	return in
}

// worst is the worst disagreement seen under one tolerance, for the log.
type worst struct {
	rel, abs     float64
	relAt, absAt string
}

func (a *agreement) worstFor(tol float64) *worst {
	if a.worst == nil {
		a.worst = map[float64]*worst{}
	}
	if a.worst[tol] == nil {
		a.worst[tol] = &worst{}
	}
	return a.worst[tol]
}

// agreement checks numbers against scipy and tracks the worst disagreement.
type agreement struct {
	t           *testing.T
	tol         float64            // for the numbers that depend on the t distribution
	worst       map[float64]*worst // by the tolerance in force
	comparisons int
}

func (a *agreement) rel(what string, got, want *float64) {
	a.t.Helper()
	a.relTol(what, got, want, refTol)
}

func (a *agreement) relTol(what string, got, want *float64, tol float64) {
	a.t.Helper()
	if !a.null(what, got, want) {
		return
	}
	d := math.Abs(*got - *want)
	if d > tol*math.Abs(*want) && d > 1e-15 {
		a.t.Errorf("%s = %.17g, scipy %.17g (relative error %.3g > %g)", what, *got, *want, d/math.Abs(*want), tol)
	}
	if w := a.worstFor(tol); *want != 0 && d/math.Abs(*want) > w.rel {
		w.rel, w.relAt = d/math.Abs(*want), what
	}
}

func (a *agreement) abs(what string, got, want *float64) {
	a.t.Helper()
	if !a.null(what, got, want) {
		return
	}
	d := math.Abs(*got - *want)
	if d > a.tol {
		a.t.Errorf("%s = %.17g, scipy %.17g (absolute error %.3g > %g)", what, *got, *want, d, a.tol)
	}
	if w := a.worstFor(a.tol); d > w.abs {
		w.abs, w.absAt = d, what
	}
}

func (a *agreement) pair(what string, got, want *[2]float64) {
	a.t.Helper()
	if (got == nil) != (want == nil) {
		a.t.Errorf("%s = %v, scipy %v", what, fmtPair(got), fmtPair(want))
		return
	}
	if got != nil {
		a.relTol(what+"[0]", &got[0], &want[0], a.tol)
		a.relTol(what+"[1]", &got[1], &want[1], a.tol)
	}
}

// null reports whether both are set; it fails when only one is.
func (a *agreement) null(what string, got, want *float64) bool {
	a.t.Helper()
	if (got == nil) != (want == nil) {
		a.t.Errorf("%s = %v, scipy %v", what, fmtPtr(got), fmtPtr(want))
		return false
	}
	return got != nil
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%.17g", *p)
}

func fmtPair(p *[2]float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("[%.17g, %.17g]", p[0], p[1])
}

func TestAgreesWithScipy(t *testing.T) {
	ref := loadReference(t)
	agree := &agreement{t: t}
	rawChecked, large := 0, 0
	for _, c := range ref.Cases {
		for _, sequential := range []bool{false, true} {
			res, err := Compute(c.input(sequential))
			if err != nil {
				t.Errorf("%s: Compute: %v", c.Name, err)
				continue
			}
			for _, g := range res.Groups {
				for name, m := range g.Metrics {
					want := c.Expected.Groups[g.Name][name]
					at := fmt.Sprintf("%s: groups[%s].metrics.%s", c.Name, g.Name, name)
					agree.rel(at+".mean", m.Mean, want.Mean)
					agree.rel(at+".variance", m.Variance, want.Variance)
				}
			}
			srm := c.Expected.SRM
			if res.SRM.Judged != srm.Judged || res.SRM.DF != srm.DF {
				t.Errorf("%s: srm judged %v df %d, want judged %v df %d (%s)", c.Name, res.SRM.Judged, res.SRM.DF, srm.Judged, srm.DF, res.SRM.Reason)
			}
			agree.tol = refTol
			if srm.Judged {
				agree.rel(c.Name+": srm.chi2", res.SRM.Chi2, srm.Chi2)
				agree.abs(c.Name+": srm.p_value", res.SRM.PValue, srm.PValue)
				if want := *srm.PValue >= DefaultSRMThreshold; res.SRM.OK != want {
					t.Errorf("%s: srm.ok = %v with p %v, want %v", c.Name, res.SRM.OK, *srm.PValue, want)
				}
			}
			if len(res.Comparisons) != len(c.Expected.Comparisons) {
				t.Errorf("%s: %d comparisons, want %d", c.Name, len(res.Comparisons), len(c.Expected.Comparisons))
				continue
			}
			for i, want := range c.Expected.Comparisons {
				got := res.Comparisons[i]
				at := fmt.Sprintf("%s (sequential %v): %s/%s", c.Name, sequential, want.Group, want.Metric)
				if got.Group != want.Group || got.Metric != want.Metric {
					t.Errorf("%s: comparison %d is %s/%s", at, i, got.Group, got.Metric)
					continue
				}
				agree.comparisons++
				agree.tol = refTol
				if want.DF != nil && *want.DF > largeDF {
					agree.tol = largeDFTol
					large++
				}
				agree.rel(at+".baseline_mean", got.BaselineMean, want.BaselineMean)
				agree.rel(at+".mean", got.Mean, want.Mean)
				agree.rel(at+".abs_diff", got.AbsDiff, want.AbsDiff)
				agree.rel(at+".lift", got.Lift, want.Lift)
				agree.rel(at+".t", got.T, want.T)
				agree.rel(at+".df", got.DF, want.DF)
				agree.rel(at+".lift_std_err", got.LiftStdErr, want.LiftStdErr)
				if sequential {
					// The always-valid interval and p-value need no t
					// distribution: 1e-9 at every size.
					agree.abs(at+".welch_p_value", got.WelchPValue, want.PValue)
					tTol := agree.tol
					agree.tol = refTol
					agree.abs(at+".p_value", got.PValue, want.SeqPValue)
					agree.pair(at+".ci95", got.CI95, want.SeqCI95)
					agree.tol = tTol
				} else {
					agree.abs(at+".p_value", got.PValue, want.PValue)
					agree.pair(at+".ci95", got.CI95, want.CI95)
					if got.WelchPValue != nil {
						t.Errorf("%s: welch_p_value set without sequential", at)
					}
				}
				// Against ttest_ind on the raw unit values, where the
				// aggregates carry the same information (not where
				// sum_squares − sum²/n cancels, see testdata/README.md).
				if want.RawAgrees {
					rawChecked++
					agree.rel(at+".t (raw)", got.T, want.TRaw)
					p := got.PValue
					if sequential {
						p = got.WelchPValue
					}
					agree.abs(at+".p_value (raw)", p, want.PValueRaw)
				}
			}
		}
	}
	if rawChecked == 0 {
		t.Error("no comparison was checked against the raw-value t-test")
	}
	t.Logf("%d cases (scipy %s, numpy %s), %d comparisons (%d also against raw values, %d with df > %g)",
		len(ref.Cases), ref.Scipy, ref.Numpy, agree.comparisons, rawChecked, large, largeDF)
	for _, tol := range []float64{refTol, largeDFTol} {
		if w := agree.worst[tol]; w != nil {
			t.Logf("held to %g: worst relative error %.3g at %s; worst absolute p-value error %.3g at %s", tol, w.rel, w.relAt, w.abs, w.absAt)
		}
	}
}
