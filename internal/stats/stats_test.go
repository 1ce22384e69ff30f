package stats

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// values returns the aggregates of a mean metric's unit values.
func values(name string, xs ...float64) Metric {
	m := Metric{Name: name, Type: Mean, Units: int64(len(xs))}
	for _, x := range xs {
		if x != 0 {
			m.Count++
		}
		m.Sum += x
		m.SumSquares += x * x
	}
	return m
}

// conversions returns a binomial metric with k of n units converted.
func conversions(name string, k, n int64) Metric {
	return Metric{Name: name, Type: Binomial, Units: n, Count: k, Sum: float64(k), SumSquares: float64(k)}
}

// twoGroups is an experiment of control A and treatment B, weighted 50/50,
// whose group units are their metric's units.
func twoGroups(a, b Metric, opt Options) Input {
	return Input{
		Experiment: "exp", RuleVersion: 3, Control: "A", Options: opt,
		Groups: []Group{
			{Name: "A", Weight: 50, Units: a.Units, Metrics: []Metric{a}},
			{Name: "B", Weight: 50, Units: b.Units, Metrics: []Metric{b}},
		},
	}
}

func ptr(x float64) *float64 { return &x }

func near(got *float64, want float64) bool {
	return got != nil && math.Abs(*got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

func show(p *float64) any {
	if p == nil {
		return "null"
	}
	return *p
}

// TestHandCheckedComparisons checks cases whose every number follows in
// closed form: the t distribution with 1 degree of freedom is Cauchy's,
// P(T > t) = 1/2 − atan(t)/π and t_{0.975} = tan(0.475π); with 2 it is
// P(T > t) = (1 − t/√(t²+2))/2 and t_u = (2u−1)/√(2u(1−u)).
func TestHandCheckedComparisons(t *testing.T) {
	t2q := 0.95 / math.Sqrt(2*0.975*0.025)
	tests := []struct {
		name         string
		a, b         Metric
		baseline     *float64
		mean         *float64
		t, df, p     *float64
		lift, liftSE *float64
		ci           *[2]float64
		reason       string
	}{
		{
			// s_a² = 1, s_b² = 5/3, se² = 1/3 + 5/12 = 3/4, t = 3.5/√0.75,
			// ν = 0.75² / ((1/3)²/2 + (5/12)²/3) = 243/49,
			// Var(lift) = (5/12)/2² + (1/3)·5.5²/2⁴ = 35.25/48.
			name: "small unequal groups", a: values("m", 1, 2, 3), b: values("m", 4, 5, 6, 7),
			baseline: ptr(2), mean: ptr(5.5), t: ptr(3.5 / math.Sqrt(0.75)), df: ptr(243.0 / 49),
			lift: ptr(1.75), liftSE: ptr(math.Sqrt(35.25 / 48)),
		},
		{
			// A is constant, so ν = n_b − 1 = 2; se² = 1/3; t = −3√3;
			// p = 1 − t/√(t²+2) = 1 − √(27/29); Var(lift) = (1/3)/25.
			name: "constant control, df 2", a: values("m", 5, 5, 5), b: values("m", 1, 2, 3),
			baseline: ptr(5), mean: ptr(2), t: ptr(-3 * math.Sqrt(3)), df: ptr(2), p: ptr(1 - math.Sqrt(27.0/29)),
			lift: ptr(-0.6), liftSE: ptr(math.Sqrt(1.0 / 75)),
			ci: &[2]float64{-0.6 - t2q*math.Sqrt(1.0/75), -0.6 + t2q*math.Sqrt(1.0/75)},
		},
		{
			// ν = 1, se² = 2/2 = 1, t = −3, p = 1 − 2·atan(3)/π;
			// Var(lift) = 1/25, t_{1,0.975} = tan(0.475π).
			name: "constant control, df 1", a: values("m", 5, 5), b: values("m", 1, 3),
			baseline: ptr(5), mean: ptr(2), t: ptr(-3), df: ptr(1), p: ptr(1 - 2*math.Atan(3)/math.Pi),
			lift: ptr(-0.6), liftSE: ptr(0.2),
			ci: &[2]float64{-0.6 - math.Tan(0.475*math.Pi)*0.2, -0.6 + math.Tan(0.475*math.Pi)*0.2},
		},
		{
			// Binomial 1/2 against 2/3: s² = n·p(1−p)/(n−1) = 1/2 and 1/3.
			// se² = 1/4 + 1/9 = 13/36, t = (2/3 − 1/2)/√(13/36) = 1/√13,
			// ν = (13/36)² / ((1/4)²/1 + (1/9)²/2) = 169/89.
			name: "binomial, sample variance", a: conversions("m", 1, 2), b: conversions("m", 2, 3),
			baseline: ptr(0.5), mean: ptr(2.0 / 3), t: ptr(1 / math.Sqrt(13)), df: ptr(169.0 / 89),
			lift: ptr(1.0 / 3), liftSE: ptr(math.Sqrt((1.0/9)/0.25 + 0.25*(4.0/9)/0.0625)),
		},
		{
			name: "no units in the treatment", a: conversions("m", 3, 10), b: conversions("m", 0, 0),
			baseline: ptr(0.3), reason: "no units",
		},
		{
			name: "one unit in the treatment", a: conversions("m", 3, 10), b: conversions("m", 1, 1),
			baseline: ptr(0.3), mean: ptr(1), lift: ptr(0.7 / 0.3), reason: "at least 2 units",
		},
		{
			name: "nobody converted anywhere", a: conversions("m", 0, 100), b: conversions("m", 0, 100),
			baseline: ptr(0), mean: ptr(0), reason: "zero variance",
		},
		{
			name: "two different constants", a: conversions("m", 0, 50), b: conversions("m", 50, 50),
			baseline: ptr(0), mean: ptr(1), reason: "zero variance",
		},
		{
			// The baseline is 0, so no lift, but Welch's test is defined:
			// ν = n_b − 1 = 9, se² = s_b²/10 with s_b² = 10·0.25/9.
			name: "baseline mean 0", a: conversions("m", 0, 10), b: conversions("m", 5, 10),
			baseline: ptr(0), mean: ptr(0.5), t: ptr(0.5 / math.Sqrt(10*0.25/9/10)), df: ptr(9),
			reason: "baseline mean is 0",
		},
		{
			// Everyone in the control converted: its variance is 0, the
			// treatment's is not, so lift and its interval exist.
			name: "constant baseline", a: conversions("m", 10, 10), b: conversions("m", 5, 10),
			baseline: ptr(1), mean: ptr(0.5), t: ptr(-0.5 / math.Sqrt(10*0.25/9/10)), df: ptr(9),
			lift: ptr(-0.5), liftSE: ptr(math.Sqrt(10 * 0.25 / 9 / 10)),
		},
		{
			// The treatment is constant 0: Var(lift) = 0 + Var(m_a)·0²/m_a⁴.
			name: "treatment all zero", a: conversions("m", 5, 10), b: conversions("m", 0, 10),
			baseline: ptr(0.5), mean: ptr(0), t: ptr(-0.5 / math.Sqrt(10*0.25/9/10)), df: ptr(9),
			lift: ptr(-1), reason: "delta-method variance of the lift is 0",
		},
		{
			// A negative baseline: lift divides by |m_a| (GrowthBook's
			// frequentist_diff), so a higher mean is a positive lift.
			name: "negative baseline", a: values("m", -3, -2, -1), b: values("m", -2, -1, 0),
			baseline: ptr(-2), mean: ptr(-1), t: ptr(1 / math.Sqrt(2.0/3)), df: ptr(4),
			lift: ptr(0.5), liftSE: ptr(math.Sqrt((1.0/3)/4 + (1.0/3)*1/16)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Compute(twoGroups(tt.a, tt.b, Options{}))
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			if len(res.Comparisons) != 1 {
				t.Fatalf("got %d comparisons, want 1", len(res.Comparisons))
			}
			c := res.Comparisons[0]
			check := func(field string, got, want *float64) {
				t.Helper()
				if want == nil {
					if got != nil {
						t.Errorf("%s = %v, want null", field, *got)
					}
					return
				}
				if !near(got, *want) {
					t.Errorf("%s = %v, want %v", field, show(got), *want)
				}
			}
			check("baseline_mean", c.BaselineMean, tt.baseline)
			check("mean", c.Mean, tt.mean)
			check("t", c.T, tt.t)
			check("df", c.DF, tt.df)
			check("lift", c.Lift, tt.lift)
			check("lift_std_err", c.LiftStdErr, tt.liftSE)
			if tt.p != nil {
				check("p_value", c.PValue, tt.p)
			}
			if tt.t == nil && c.PValue != nil {
				t.Errorf("p_value = %v, want null without a t statistic", *c.PValue)
			}
			if tt.t != nil && c.PValue == nil {
				t.Error("p_value is null, want a number")
			}
			if tt.ci != nil {
				if c.CI95 == nil || !near(&c.CI95[0], tt.ci[0]) || !near(&c.CI95[1], tt.ci[1]) {
					t.Errorf("ci95 = %v, want %v", c.CI95, *tt.ci)
				}
			}
			if (c.CI95 != nil) != (tt.liftSE != nil) {
				t.Errorf("ci95 = %v, want it exactly when lift_std_err is %v", c.CI95, show(tt.liftSE))
			}
			if tt.mean != nil && tt.baseline != nil && !near(c.AbsDiff, *tt.mean-*tt.baseline) {
				t.Errorf("abs_diff = %v, want %v", show(c.AbsDiff), *tt.mean-*tt.baseline)
			}
			if !strings.Contains(c.Reason, tt.reason) || (tt.reason == "") != (c.Reason == "") {
				t.Errorf("reason = %q, want one containing %q", c.Reason, tt.reason)
			}
		})
	}
}

// TestSequential checks the always-valid interval's defining properties:
// it is wider than the fixed-horizon interval, at the same centre; its
// p-value is GrowthBook's e-value p-value, never below the Welch one here;
// and a larger tuning parameter narrows it for large n.
func TestSequential(t *testing.T) {
	in := twoGroups(conversions("m", 1000, 10000), conversions("m", 1150, 10000), Options{})
	fixed, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Options = Options{Sequential: true}
	seq, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	f, s := fixed.Comparisons[0], seq.Comparisons[0]
	if !seq.Sequential || seq.SequentialTuning != DefaultSequentialTuning || fixed.Sequential {
		t.Errorf("sequential %v tuning %v (fixed: %v), want true %v (false)", seq.Sequential, seq.SequentialTuning, fixed.Sequential, DefaultSequentialTuning)
	}
	if s.CI95[0] >= f.CI95[0] || s.CI95[1] <= f.CI95[1] {
		t.Errorf("sequential ci95 %v is not wider than the fixed %v", *s.CI95, *f.CI95)
	}
	if mid := (s.CI95[0] + s.CI95[1]) / 2; !near(&mid, *f.Lift) {
		t.Errorf("sequential ci95 %v is not centred on the lift %v", *s.CI95, *f.Lift)
	}
	if *s.PValue < *f.PValue || s.WelchPValue == nil || *s.WelchPValue != *f.PValue {
		t.Errorf("sequential p %v, welch_p_value %v; fixed p %v", *s.PValue, show(s.WelchPValue), *f.PValue)
	}
	// ρ for N = 5000 at α = 0.05, by hand: −2 ln 0.05 = 5.99146…,
	// ρ² = (5.99146 + ln 6.99146)/5000.
	l := -2 * math.Log(0.05)
	if got, want := sequentialRho(5000), math.Sqrt((l+math.Log(l+1))/5000); got != want || math.Abs(got-0.03984) > 1e-5 {
		t.Errorf("sequentialRho(5000) = %v, want %v ≈ 0.03984", got, want)
	}
	in.Options.SequentialTuning = 50000
	wide, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	if w := wide.Comparisons[0].CI95; w[1]-w[0] >= s.CI95[1]-s.CI95[0] {
		t.Errorf("tuning 50000 (n = 20000) gives width %v, not narrower than tuning 5000's %v", w[1]-w[0], s.CI95[1]-s.CI95[0])
	}
}

// TestSequentialPValueIsNeverFixedHorizon: with "sequential": true, p_value
// is the always-valid p-value of the lift. When the lift (a baseline mean
// of 0) or its delta-method variance (a constant treatment whose mean is 0)
// is undefined, there is none: p_value is null, and the fixed-horizon Welch
// p-value is in welch_p_value only, never passed off as p_value, which a
// sequential experiment's readers peek at. Each case has 3 units a group
// and one unit of 3 converted in one group, so t = ±1 with 2 degrees of
// freedom and Welch's p = 1 − 1/√3.
func TestSequentialPValueIsNeverFixedHorizon(t *testing.T) {
	welch := 1 - 1/math.Sqrt(3)
	tests := []struct {
		name string
		a, b Metric
	}{
		{"baseline mean 0", conversions("m", 0, 3), conversions("m", 1, 3)},
		{"lift variance 0", conversions("m", 1, 3), conversions("m", 0, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sequential := range []bool{false, true} {
				res, err := Compute(twoGroups(tt.a, tt.b, Options{Sequential: sequential}))
				if err != nil {
					t.Fatal(err)
				}
				c := res.Comparisons[0]
				if !near(c.DF, 2) || c.T == nil || !near(ptr(math.Abs(*c.T)), 1) {
					t.Fatalf("sequential %v: t %v df %v, want ±1 and 2", sequential, show(c.T), show(c.DF))
				}
				if !sequential {
					if !near(c.PValue, welch) || c.WelchPValue != nil {
						t.Errorf("fixed horizon: p_value %v welch_p_value %v, want %v and null", show(c.PValue), show(c.WelchPValue), welch)
					}
					continue
				}
				if c.PValue != nil || !near(c.WelchPValue, welch) {
					t.Errorf("sequential: p_value %v welch_p_value %v, want null and %v", show(c.PValue), show(c.WelchPValue), welch)
				}
				if c.CI95 != nil || !strings.Contains(c.Reason, "always-valid p-value") {
					t.Errorf("sequential: ci95 %v, reason %q; want null and a reason naming the always-valid p-value", c.CI95, c.Reason)
				}
			}
		})
	}
}

func TestSRMHandChecked(t *testing.T) {
	tests := []struct {
		name    string
		weights []float64
		units   []int64
		judged  bool
		ok      bool
		df      int
		chi2    *float64
		p       *float64
		reason  string
	}{
		{name: "exact split", weights: []float64{50, 50}, units: []int64{500, 500}, judged: true, ok: true, df: 1, chi2: ptr(0), p: ptr(1)},
		// χ² = 2·10²/50 = 4; P(χ²₁ > 4) = erfc(√2).
		{name: "60/40 at 50/50", weights: []float64{50, 50}, units: []int64{60, 40}, judged: true, ok: true, df: 1, chi2: ptr(4), p: ptr(math.Erfc(math.Sqrt2))},
		// χ² = 2; P(χ²₂ > 2) = e⁻¹.
		{name: "three groups", weights: []float64{1, 1, 1}, units: []int64{30, 30, 40}, judged: true, ok: true, df: 2, chi2: ptr(2), p: ptr(math.Exp(-1))},
		// Weights are relative: 2:8 is 20/80. χ² = 20²/200 + 20²/800 = 2.5.
		{name: "relative weights", weights: []float64{2, 8}, units: []int64{220, 780}, judged: true, ok: true, df: 1, chi2: ptr(2.5), p: ptr(math.Erfc(math.Sqrt(1.25)))},
		// χ² = 2·500²/9500 = 52.63; erfc(√(χ²/2)) ≈ 2.8e-13.
		{name: "10% of B dropped", weights: []float64{50, 50}, units: []int64{10000, 9000}, judged: true, ok: false, df: 1, chi2: ptr(2 * 500.0 * 500 / 9500), p: ptr(math.Erfc(math.Sqrt(500.0 * 500 / 9500)))},
		// A group that got fewer than 8 units is judged once it expects 8:
		// 7 of 107 at 50/50 is a glaring mismatch, not a reason to wait.
		// χ² = 2·46.5²/53.5; p = erfc(√(χ²/2)).
		{name: "a group below 8 units", weights: []float64{50, 50}, units: []int64{7, 100}, judged: true, ok: false, df: 1, chi2: ptr(2 * 46.5 * 46.5 / 53.5), p: ptr(math.Erfc(math.Sqrt(46.5 * 46.5 / 53.5)))},
		// χ² = 2·8²/8 = 16, p = erfc(√8): 16 units all in one group.
		{name: "a group with no units", weights: []float64{50, 50}, units: []int64{0, 16}, judged: true, ok: false, df: 1, chi2: ptr(16), p: ptr(math.Erfc(math.Sqrt(8)))},
		// 400 units at 40/40/20 all in A (B's and the holdout's never
		// arrive): χ² = 240²/160 + 160 + 80 = 600; df 2, so p = e^(−χ²/2).
		{name: "only one group gets units", weights: []float64{40, 40, 20}, units: []int64{400, 0, 0}, judged: true, ok: false, df: 2, chi2: ptr(600), p: ptr(math.Exp(-300))},
		{name: "expected units just enough", weights: []float64{50, 50}, units: []int64{8, 8}, judged: true, ok: true, df: 1, chi2: ptr(0), p: ptr(1)},
		{name: "expected units too few", weights: []float64{50, 50}, units: []int64{0, 15}, ok: true, df: 1, reason: `group "A" expects 7.5 (50% of 15 units)`},
		{name: "nobody yet", weights: []float64{50, 50}, units: []int64{0, 0}, ok: true, df: 1, reason: "at least 8 units"},
		// A weight-0 group without units takes no part: df is 1, not 2.
		{name: "empty weight-0 group", weights: []float64{50, 50, 0}, units: []int64{60, 40, 0}, judged: true, ok: true, df: 1, chi2: ptr(4), p: ptr(math.Erfc(math.Sqrt2))},
		{name: "units in a weight-0 group", weights: []float64{50, 50, 0}, units: []int64{60, 40, 1}, judged: true, ok: false, df: 1, p: ptr(0), reason: `group "C" has weight 0 but 1 units`},
		{name: "one weighted group", weights: []float64{100, 0}, units: []int64{60, 0}, ok: true, df: 0, reason: "at least 2 groups with a positive weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Experiment: "exp", Control: "A"}
			for i, w := range tt.weights {
				in.Groups = append(in.Groups, Group{Name: string(rune('A' + i)), Weight: w, Units: tt.units[i]})
			}
			res, err := Compute(in)
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			s := res.SRM
			if s.Judged != tt.judged || s.OK != tt.ok || s.DF != tt.df {
				t.Errorf("judged %v ok %v df %d, want %v %v %d (%s)", s.Judged, s.OK, s.DF, tt.judged, tt.ok, tt.df, s.Reason)
			}
			if (s.Chi2 == nil) != (tt.chi2 == nil) || (tt.chi2 != nil && !near(s.Chi2, *tt.chi2)) {
				t.Errorf("chi2 = %v, want %v", show(s.Chi2), show(tt.chi2))
			}
			if (s.PValue == nil) != (tt.p == nil) || (tt.p != nil && !near(s.PValue, *tt.p)) {
				t.Errorf("p_value = %v, want %v", show(s.PValue), show(tt.p))
			}
			if s.Threshold != DefaultSRMThreshold {
				t.Errorf("threshold = %v, want %v", s.Threshold, DefaultSRMThreshold)
			}
			if !strings.Contains(s.Reason, tt.reason) || (tt.reason == "") != (s.Reason == "") {
				t.Errorf("reason = %q, want one containing %q", s.Reason, tt.reason)
			}
		})
	}
}

func TestSRMThresholdOption(t *testing.T) {
	// 60/40 has p = 0.0455: fine at 0.001, flagged at 0.05.
	in := Input{Experiment: "exp", Control: "A", Groups: []Group{{Name: "A", Weight: 1, Units: 60}, {Name: "B", Weight: 1, Units: 40}}}
	for _, tt := range []struct {
		threshold float64
		ok        bool
	}{{0, true}, {0.001, true}, {0.05, false}} {
		in.Options.SRMThreshold = tt.threshold
		res, err := Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		if res.SRM.OK != tt.ok {
			t.Errorf("threshold %v: ok = %v, want %v (p %v)", tt.threshold, res.SRM.OK, tt.ok, *res.SRM.PValue)
		}
	}
}

func TestResultsShape(t *testing.T) {
	// The example of issue 14: the field names are a contract.
	in := Input{
		Experiment: "exp_checkout", RuleVersion: 3, Control: "A",
		Groups: []Group{
			{Name: "A", Weight: 50, Units: 10234, Metrics: []Metric{conversions("purchase", 812, 10234)}},
			{Name: "B", Weight: 50, Units: 10110, Metrics: []Metric{conversions("purchase", 870, 10110)}},
		},
	}
	res, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"experiment": "exp_checkout", "rule_version": 3.0, "control": "A"}
	for k, v := range want {
		if doc[k] != v {
			t.Errorf("%s = %v, want %v", k, doc[k], v)
		}
	}
	g := doc["groups"].([]any)[0].(map[string]any)
	for k, v := range map[string]any{"name": "A", "weight": 50.0, "units": 10234.0} {
		if g[k] != v {
			t.Errorf("groups[0].%s = %v, want %v", k, g[k], v)
		}
	}
	m := g["metrics"].(map[string]any)["purchase"].(map[string]any)
	for k, v := range map[string]any{"units": 10234.0, "count": 812.0, "sum": 812.0, "sum_squares": 812.0, "mean": 812.0 / 10234} {
		if m[k] != v {
			t.Errorf("groups[0].metrics.purchase.%s = %v, want %v", k, m[k], v)
		}
	}
	srm := doc["srm"].(map[string]any)
	for _, k := range []string{"chi2", "p_value", "threshold", "ok"} {
		if _, ok := srm[k]; !ok {
			t.Errorf("srm lacks %q: %s", k, b)
		}
	}
	c := doc["comparisons"].([]any)[0].(map[string]any)
	for _, k := range []string{"group", "metric", "baseline_mean", "mean", "abs_diff", "lift", "ci95", "p_value"} {
		if _, ok := c[k]; !ok {
			t.Errorf("comparisons[0] lacks %q: %s", k, b)
		}
	}
	if ci, ok := c["ci95"].([]any); !ok || len(ci) != 2 {
		t.Errorf("ci95 = %v, want a pair", c["ci95"])
	}
	if c["group"] != "B" || c["metric"] != "purchase" {
		t.Errorf("comparison of %v/%v, want B/purchase", c["group"], c["metric"])
	}
	if _, ok := c["welch_p_value"]; ok {
		t.Error("welch_p_value is present in a fixed-horizon result")
	}
}

func TestComparisonOrder(t *testing.T) {
	metrics := func(k int64) []Metric {
		return []Metric{conversions("purchase", k, 100), values("revenue", 1, 2, float64(k)), conversions("signup", k/2, 100)}
	}
	in := Input{Experiment: "exp", Control: "B", Groups: []Group{
		{Name: "A", Weight: 1, Units: 100, Metrics: metrics(10)},
		{Name: "B", Weight: 1, Units: 100, Metrics: metrics(12)},
		{Name: "C", Weight: 1, Units: 100, Metrics: []Metric{metrics(14)[2], metrics(14)[0], metrics(14)[1]}},
	}}
	res, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range res.Comparisons {
		got = append(got, c.Group+"/"+c.Metric)
	}
	want := "A/purchase A/revenue A/signup C/purchase C/revenue C/signup"
	if strings.Join(got, " ") != want {
		t.Errorf("comparisons %v, want %s", got, want)
	}
}

func TestValidation(t *testing.T) {
	good := func() Input {
		return twoGroups(conversions("purchase", 10, 100), conversions("purchase", 12, 100), Options{})
	}
	tests := []struct {
		name   string
		modify func(*Input)
		want   []string
	}{
		{"no experiment", func(in *Input) { in.Experiment = "" }, []string{"experiment: is required"}},
		{"no control", func(in *Input) { in.Control = "" }, []string{"control: is required"}},
		{"unknown control", func(in *Input) { in.Control = "Z" }, []string{`control: names no group: "Z"`}},
		{"one group", func(in *Input) { in.Groups = in.Groups[:1] }, []string{"groups: an experiment needs at least 2 groups, got 1"}},
		{"duplicate group", func(in *Input) { in.Groups[1].Name = "A" }, []string{`groups[1].name: duplicates groups[0].name "A"`}},
		{"negative weight", func(in *Input) { in.Groups[1].Weight = -1 }, []string{"groups[1].weight: must be a finite number ≥ 0, got -1"}},
		{"NaN weight", func(in *Input) { in.Groups[0].Weight = math.NaN() }, []string{"groups[0].weight: must be a finite number ≥ 0, got NaN"}},
		{"zero weights", func(in *Input) { in.Groups[0].Weight, in.Groups[1].Weight = 0, 0 }, []string{"groups: weights must sum to a positive finite number, got 0"}},
		{"negative units", func(in *Input) { in.Groups[0].Units = -5 }, []string{"groups[0].units: must be ≥ 0, got -5", "groups[0].metrics.purchase.units: must be 0..-5"}},
		{"count above units", func(in *Input) { m := &in.Groups[1].Metrics[0]; m.Count, m.Sum, m.SumSquares = 120, 120, 120 }, []string{"groups[1].metrics.purchase.count: must be 0..100 (the metric's units), got 120"}},
		{"metric units above group units", func(in *Input) { in.Groups[1].Metrics[0].Units = 101 }, []string{"groups[1].metrics.purchase.units: must be 0..100 (the group's units), got 101"}},
		{"binomial sum not count", func(in *Input) { in.Groups[0].Metrics[0].Sum = 11 }, []string{"groups[0].metrics.purchase.sum: must equal count (10) for a binomial metric, got 11"}},
		{"binomial sum_squares not count", func(in *Input) { in.Groups[0].Metrics[0].SumSquares = 9 }, []string{"groups[0].metrics.purchase.sum_squares: must equal count (10) for a binomial metric, got 9"}},
		{"Inf sum", func(in *Input) { in.Groups[0].Metrics[0].Sum = math.Inf(1) }, []string{"groups[0].metrics.purchase.sum: must be finite, got +Inf"}},
		{"negative sum_squares", func(in *Input) {
			in.Groups[0].Metrics[0] = Metric{Name: "purchase", Type: Mean, Units: 100, Count: 3, Sum: 3, SumSquares: -1}
			in.Groups[1].Metrics[0].Type = Mean
		}, []string{"groups[0].metrics.purchase.sum_squares: must be finite and ≥ 0, got -1"}},
		{"sum_squares too small", func(in *Input) {
			in.Groups[0].Metrics[0] = Metric{Name: "purchase", Type: Mean, Units: 100, Count: 2, Sum: 10, SumSquares: 40}
			in.Groups[1].Metrics[0].Type = Mean
		}, []string{"groups[0].metrics.purchase.sum_squares: is 40, too small for sum 10 over 2 non-zero units"}},
		{"values without count", func(in *Input) {
			in.Groups[0].Metrics[0] = Metric{Name: "purchase", Type: Mean, Units: 100, Count: 0, Sum: 1, SumSquares: 1}
			in.Groups[1].Metrics[0].Type = Mean
		}, []string{"groups[0].metrics.purchase.count: is 0, but sum is 1"}},
		{"unknown type", func(in *Input) { in.Groups[0].Metrics[0].Type = "ratio" }, []string{`groups[0].metrics.purchase.type: must be "binomial" or "mean", got "ratio"`}},
		{"type differs from control", func(in *Input) { in.Groups[1].Metrics[0] = values("purchase", 1, 0) }, []string{`groups[1].metrics.purchase.type: is "mean", but "binomial" in the control group "A"`}},
		{"metric missing", func(in *Input) { in.Groups[1].Metrics = nil }, []string{`groups[1].metrics: lacks metric "purchase" of the control group "A"`}},
		{"extra metric", func(in *Input) {
			in.Groups[1].Metrics = append(in.Groups[1].Metrics, conversions("signup", 1, 100))
		}, []string{`groups[1].metrics.signup: is not a metric of the control group "A"`}},
		{"unnamed metric", func(in *Input) { in.Groups[0].Metrics[0].Name = "" }, []string{"groups[0].metrics[0].name: is required"}},
		{"duplicate metric", func(in *Input) {
			in.Groups[0].Metrics = append(in.Groups[0].Metrics, in.Groups[0].Metrics[0])
		}, []string{`groups[0].metrics[1].name: duplicates groups[0].metrics[0].name "purchase"`}},
		{"bad threshold", func(in *Input) { in.Options.SRMThreshold = 1 }, []string{"srm_threshold: must be in (0, 1), got 1"}},
		{"bad tuning", func(in *Input) { in.Options.SequentialTuning = -3 }, []string{"sequential_tuning: must be a positive number, got -3"}},
		{"all at once", func(in *Input) { in.Experiment = ""; in.Groups[1].Weight = -1 }, []string{"experiment: is required", "groups[1].weight"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := good()
			tt.modify(&in)
			res, err := Compute(in)
			if err == nil {
				t.Fatalf("Compute succeeded (%+v), want an error", res)
			}
			if res != nil {
				t.Error("Compute returned results with an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if _, err := Compute(good()); err != nil {
		t.Fatalf("the valid input fails: %v", err)
	}
}

// TestRoundingTolerated: sums of floats may break sum² ≤ n·sum_squares by
// an ulp where the true variance is 0; that is a variance of 0, not an error.
func TestRoundingTolerated(t *testing.T) {
	a := values("m", 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1)
	b := values("m", 0.1, 0.2, 0.3)
	res, err := Compute(twoGroups(a, b, Options{}))
	if err != nil {
		t.Fatalf("Compute: %v", err)
	}
	if v := res.Groups[0].Metrics["m"].Variance; v == nil || *v < 0 || *v > 1e-15 {
		t.Errorf("variance of ten 0.1s = %v, want ≈ 0", show(v))
	}
	if c := res.Comparisons[0]; c.PValue == nil {
		t.Errorf("no p-value: %s", c.Reason)
	}
}
