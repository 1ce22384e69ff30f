package stats

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// checkSRM runs Pearson's χ² test of the groups' unit counts against the
// configured weights (gbstats utils.py L70–84). Groups of weight 0 expect
// no units: without units they take no part (and add no degree of freedom,
// where gbstats still counts them in df); with units they are a certain
// mismatch. The groups' weights and units must have been validated.
func checkSRM(groups []Group, threshold float64) SRM {
	s := SRM{Threshold: threshold, OK: true}
	var total, weights float64
	k := 0
	for _, g := range groups {
		if g.Weight > 0 {
			k++
			weights += g.Weight
		}
		total += float64(g.Units)
	}
	s.DF = max(k-1, 0)
	for _, g := range groups {
		if g.Weight == 0 && g.Units > 0 {
			s.Judged, s.OK = true, false
			s.PValue = finite(0)
			s.Reason = fmt.Sprintf("group %q has weight 0 but %d units", g.Name, g.Units)
			return s
		}
	}
	if k < 2 {
		s.Reason = fmt.Sprintf("needs at least 2 groups with a positive weight, got %d", k)
		return s
	}
	for _, g := range groups {
		if g.Weight > 0 && g.Units < SRMMinUnits {
			s.Reason = fmt.Sprintf("not judged until every group has at least %d units: group %q has %d", SRMMinUnits, g.Name, g.Units)
			return s
		}
	}
	chi2 := 0.0
	for _, g := range groups {
		if g.Weight == 0 {
			continue
		}
		e := g.Weight / weights * total
		d := float64(g.Units) - e
		chi2 += d * d / e
	}
	s.Judged = true
	if math.IsInf(chi2, 0) {
		// An expected count so small it underflows to 0, yet units came:
		// as certain a mismatch as a weight of 0.
		s.OK = false
		s.PValue = finite(0)
		s.Reason = "an expected unit count underflows to 0 but the group has units"
		return s
	}
	p := distuv.ChiSquared{K: float64(s.DF)}.Survival(chi2)
	s.Chi2, s.PValue = finite(chi2), finite(p)
	s.OK = p >= threshold
	return s
}
