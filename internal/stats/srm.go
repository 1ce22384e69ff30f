package stats

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// checkSRM runs Pearson's χ² test of the groups' unit counts against the
// configured weights (gbstats utils.py L70–84), once every weighted group
// expects at least SRMMinUnits units. Groups of weight 0 expect
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
			s.Judged, s.OK, s.Alert = true, false, true
			s.PValue, s.SequentialPValue = finite(0), finite(0)
			s.Reason = fmt.Sprintf("group %q has weight 0 but %d units", g.Name, g.Units)
			return s
		}
	}
	if k < 2 {
		s.Reason = fmt.Sprintf("needs at least 2 groups with a positive weight, got %d", k)
		return s
	}
	// The χ² approximation needs enough expected units in every group.
	// Gating on the units a group actually got instead would never judge
	// the worst mismatch of all: a group that gets (almost) none.
	for _, g := range groups {
		if e := g.Weight / weights * total; g.Weight > 0 && e < SRMMinUnits {
			s.Reason = fmt.Sprintf("not judged until every group expects at least %d units: group %q expects %.4g (%.4g%% of %.0f units)", SRMMinUnits, g.Name, e, g.Weight/weights*100, total)
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
		s.OK, s.Alert = false, true
		s.PValue, s.SequentialPValue = finite(0), finite(0)
		s.Reason = "an expected unit count underflows to 0 but the group has units"
		return s
	}
	p := distuv.ChiSquared{K: float64(s.DF)}.Survival(chi2)
	s.Chi2, s.PValue = finite(chi2), finite(p)
	s.OK = p >= threshold
	sp := sequentialSRM(groups, weights)
	s.SequentialPValue = finite(sp)
	s.Alert = !s.OK && sp < threshold
	return s
}

// sequentialSRM is the anytime-valid p-value of the split (Lindon and
// Malek, "Anytime-Valid Inference for Multinomial Count Data", NeurIPS
// 2022; Optimizely's ssrm): 1/BF, where BF is the Bayes factor of a
// Dirichlet(C·θ) mixture of multinomials against the multinomial of the
// configured shares θ, with C = SRMSequentialConcentration:
//
//	log BF = log Γ(C) − log Γ(C + n) + Σ [log Γ(Cθᵢ + xᵢ) − log Γ(Cθᵢ) − xᵢ log θᵢ]
//
// Under a correct split BF is a nonnegative martingale with mean 1, so by
// Ville's inequality it ever exceeds 1/α with probability at most α: the
// p-value may be read after every unit and a clean split is still flagged
// at most α of the time. It depends only on the cumulative counts. Groups
// of weight 0 take no part (checkSRM has already flagged any with units).
func sequentialSRM(groups []Group, weights float64) float64 {
	var x, theta, prior []float64
	for _, g := range groups {
		if g.Weight == 0 {
			continue
		}
		x = append(x, float64(g.Units))
		theta = append(theta, g.Weight/weights)
		prior = append(prior, g.Weight/weights*SRMSequentialConcentration)
	}
	logBF := logBayesFactor(x, theta, prior)
	if logBF <= 0 {
		return 1
	}
	return math.Exp(-logBF)
}

// logBayesFactor is log BF of counts x: the Dirichlet(alpha) mixture of
// multinomials against the multinomial of shares theta.
func logBayesFactor(x, theta, alpha []float64) float64 {
	n, sumAlpha, l := 0.0, 0.0, 0.0
	for i := range x {
		l += lgamma(alpha[i]+x[i]) - lgamma(alpha[i]) - x[i]*math.Log(theta[i])
		n += x[i]
		sumAlpha += alpha[i]
	}
	return l + lgamma(sumAlpha) - lgamma(sumAlpha+n)
}

func lgamma(x float64) float64 {
	v, _ := math.Lgamma(x)
	return v
}
