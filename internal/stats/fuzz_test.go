package stats

import (
	"math"
	"testing"
)

// FuzzCompute feeds arbitrary aggregates to Compute. It must never panic;
// it either rejects the input or returns results that marshal to JSON
// without NaN or Inf, whose p-values are probabilities and whose intervals
// are ordered. mode picks how the metric aggregates are formed: 0 derives a
// binomial's sum and sum_squares from its count (so the fuzzer explores
// valid binomials), 1 takes a mean metric's numbers as given, 2 takes a
// binomial's numbers as given (mostly invalid).
func FuzzCompute(f *testing.F) {
	f.Add(uint8(0), int64(10234), int64(812), 0.0, 0.0, int64(10110), int64(870), 0.0, 0.0, 50.0, 50.0, 0.0, int64(0), false, 0.0, 0.0)
	f.Add(uint8(1), int64(3), int64(3), 6.0, 14.0, int64(4), int64(4), 22.0, 126.0, 1.0, 1.0, 0.0, int64(0), true, 0.0, 0.0)
	f.Add(uint8(1), int64(3), int64(3), 15.0, 75.0, int64(3), int64(3), 6.0, 14.0, 50.0, 50.0, 0.0, int64(0), false, 0.0, 0.0)
	f.Add(uint8(0), int64(0), int64(0), 0.0, 0.0, int64(1), int64(1), 0.0, 0.0, 50.0, 0.0, 10.0, int64(5), true, 1000.0, 0.01)
	f.Add(uint8(1), int64(1e13), int64(1e13), 1e160, 1e307, int64(4), int64(1), -1.0, 1.0, 1e308, 5e-324, 1.0, int64(9), true, 1e-300, 0.5)
	f.Add(uint8(2), int64(5), int64(2), 2.0, 3.0, int64(5), int64(0), 0.0, 0.0, -1.0, math.NaN(), math.Inf(1), int64(-1), false, -1.0, 2.0)
	f.Fuzz(func(t *testing.T, mode uint8, na, ca int64, sa, ssa float64, nb, cb int64, sb, ssb float64,
		wa, wb, wc float64, nc int64, sequential bool, tuning, threshold float64) {
		typ := Mean
		if mode%3 != 1 {
			typ = Binomial
		}
		metric := func(n, c int64, s, ss float64) Metric {
			if mode%3 == 0 {
				s, ss = float64(c), float64(c)
			}
			return Metric{Name: "m", Type: typ, Units: n, Count: c, Sum: s, SumSquares: ss}
		}
		in := Input{
			Experiment: "fuzz", RuleVersion: 1, Control: "A",
			Options: Options{Sequential: sequential, SequentialTuning: tuning, SRMThreshold: threshold},
			Groups: []Group{
				{Name: "A", Weight: wa, Units: na, Metrics: []Metric{metric(na, ca, sa, ssa)}},
				{Name: "B", Weight: wb, Units: nb, Metrics: []Metric{metric(nb, cb, sb, ssb)}},
			},
		}
		if wc != 0 || nc != 0 {
			// A third group, a copy of A's metric scaled to its units.
			in.Groups = append(in.Groups, Group{Name: "C", Weight: wc, Units: nc,
				Metrics: []Metric{metric(nc, min(max(ca, 0), max(nc, 0)), sa, ssa)}})
		}
		res, err := Compute(in)
		if err != nil {
			if res != nil {
				t.Fatal("results returned with an error")
			}
			return
		}
		assertCleanJSON(t, res)
		prob := func(what string, p *float64) {
			if p != nil && !(*p >= 0 && *p <= 1) {
				t.Fatalf("%s = %v, not a probability", what, *p)
			}
		}
		prob("srm.p_value", res.SRM.PValue)
		if res.SRM.Judged && res.SRM.PValue == nil {
			t.Fatal("srm judged without a p-value")
		}
		if !res.SRM.OK && !res.SRM.Judged {
			t.Fatal("srm not ok but not judged")
		}
		prob("srm.sequential_p_value", res.SRM.SequentialPValue)
		if res.SRM.Judged && res.SRM.SequentialPValue == nil {
			t.Fatal("srm judged without a sequential p-value")
		}
		if res.SRM.Alert && (res.SRM.OK || !res.SRM.Judged) {
			t.Fatalf("srm alerts but is ok or not judged: %+v", res.SRM)
		}
		for _, c := range res.Comparisons {
			prob("p_value", c.PValue)
			prob("welch_p_value", c.WelchPValue)
			if c.CI95 != nil && !(c.CI95[0] <= c.CI95[1]) {
				t.Fatalf("ci95 %v is not ordered", *c.CI95)
			}
			if c.CI95 != nil && c.Lift == nil {
				t.Fatal("ci95 without a lift")
			}
		}
	})
}
