package stats

import (
	"math"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// summary is one metric's moments in one group.
type summary struct {
	n    float64 // units
	mean float64 // NaN without units
	vari float64 // sample variance; NaN below 2 units
}

// summarize computes a metric's mean and sample variance from its
// aggregates: mean = sum/n, s² = (sum_squares − sum²/n)/(n − 1)
// (gbstats models/statistics.py L49–58). Rounding in sum_squares − sum²/n can
// leave a tiny negative number where the true variance is 0; it is clamped
// to 0. Where sum² overflows float64 the variance stays undefined (NaN).
func summarize(m Metric) summary {
	s := summary{n: float64(m.Units), mean: math.NaN(), vari: math.NaN()}
	if m.Units > 0 {
		s.mean = m.Sum / s.n
	}
	if m.Units > 1 {
		if v := (m.SumSquares - m.Sum*m.Sum/s.n) / (s.n - 1); !math.IsInf(v, 0) {
			s.vari = max(v, 0)
		}
	}
	return s
}

func (s summary) meanPtr() *float64 { return finite(s.mean) }
func (s summary) varPtr() *float64  { return finite(s.vari) }

// compare compares treatment b with control a (see the package doc for the
// formulas and their sources).
func compare(a, b summary, opt Options) (c Comparison) {
	var why []string
	defer func() { c.Reason = strings.Join(why, "; ") }()

	c.BaselineMean, c.Mean = a.meanPtr(), b.meanPtr()
	if c.BaselineMean == nil || c.Mean == nil {
		why = append(why, "a group has no units for this metric")
		return c
	}
	diff := b.mean - a.mean
	c.AbsDiff = finite(diff)
	if a.mean == 0 {
		why = append(why, "the baseline mean is 0, so the relative lift is undefined")
	} else {
		c.Lift = finite(diff / math.Abs(a.mean))
	}
	if a.n < 2 || b.n < 2 {
		why = append(why, "each group needs at least 2 units for a t-test")
		return c
	}
	if math.IsNaN(a.vari) || math.IsNaN(b.vari) {
		why = append(why, "a variance overflows float64")
		return c
	}

	// Welch's t-test and the Welch–Satterthwaite degrees of freedom
	// (gbstats frequentist/tests.py L62–72).
	va, vb := a.vari/a.n, b.vari/b.n
	se2 := va + vb
	if se2 == 0 {
		why = append(why, "both groups have zero variance, so no test is possible")
		return c
	}
	df := se2 * se2 / (va*va/(a.n-1) + vb*vb/(b.n-1))
	if !(df > 0) || math.IsInf(df, 0) {
		why = append(why, "the degrees of freedom are not finite (the variances underflow)")
		return c
	}
	tdist := studentT(df)
	t := diff / math.Sqrt(se2)
	c.T, c.DF = finite(t), finite(df)
	welchP := finite(2 * tdist.Survival(math.Abs(t)))
	if !opt.Sequential {
		c.PValue = welchP
	} else {
		// p_value is the always-valid one, which is a test of the lift: it
		// is set below or stays null. The fixed-horizon p-value must not
		// stand in for it (a baseline mean of 0 is common early on, just
		// when a sequential experiment is peeked at) or every peek at it
		// inflates false positives, which is what sequential is there to
		// prevent.
		c.WelchPValue = welchP
	}

	if c.Lift == nil {
		if opt.Sequential {
			why = append(why, "there is no always-valid p-value either (welch_p_value is the fixed-horizon one)")
		}
		return c
	}
	// The delta method for the ratio of two independent means
	// (gbstats utils.py L31–35, L59–66).
	varLift := vb/(a.mean*a.mean) + va*b.mean*b.mean/(a.mean*a.mean*a.mean*a.mean)
	if !(varLift > 0) || math.IsInf(varLift, 0) {
		why = append(why, "the delta-method variance of the lift is 0, so its interval is undefined")
		if opt.Sequential {
			why = append(why, "there is no always-valid p-value either (welch_p_value is the fixed-horizon one)")
		}
		return c
	}
	se := math.Sqrt(varLift)
	c.LiftStdErr = finite(se)
	lift := *c.Lift

	if !opt.Sequential {
		// gbstats frequentist/tests.py L203–211.
		half := tdist.Quantile(1-alpha/2) * se
		c.CI95 = interval(lift, half)
		return c
	}

	// The always-valid interval and p-value (gbstats frequentist/tests.py
	// L244–265 and L309–334).
	n := a.n + b.n
	rho := sequentialRho(opt.SequentialTuning)
	nr2 := n*rho*rho + 1
	half := math.Sqrt(varLift*n) * math.Sqrt(2*nr2*math.Log(math.Sqrt(nr2)/alpha)/((n*rho)*(n*rho)))
	c.CI95 = interval(lift, half)
	st2 := lift * lift * n / (varLift)
	c.PValue = finite(min(1, math.Exp(-rho*rho*st2/(2*nr2)+0.5*math.Log(nr2))))
	return c
}

// normalDF is the number of degrees of freedom beyond which the Student t
// is taken to be the standard normal. gonum's StudentsT evaluates the
// incomplete beta at ν/(t²+ν), which rounds away about log10(ν) digits: its
// 97.5% quantile is off by ~1e-8 relative near ν = 10⁸ and by ~1e-7 at
// 10⁹, while the normal's error, ≈ (z²+1)/(4ν), falls below it from about
// ν = 10⁸ (1.2e-8 there, 1.2e-9 at 10⁹). Either way a CI end moves by less
// than 2·10⁻⁸ of itself.
const normalDF = 1e8

// distribution is what the t-test needs of a distribution.
type distribution interface {
	Survival(x float64) float64
	Quantile(p float64) float64
}

// studentT returns the t distribution with df degrees of freedom (see
// normalDF for large df).
func studentT(df float64) distribution {
	if df > normalDF {
		return distuv.Normal{Mu: 0, Sigma: 1}
	}
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}
}

// sequentialRho is ρ of the two-sided always-valid interval for tuning
// parameter N (Waudby-Smith et al., arXiv:2103.06476v7, eq. 161; gbstats
// frequentist/tests.py L244–250).
func sequentialRho(tuning float64) float64 {
	l := -2 * math.Log(alpha)
	return math.Sqrt((l + math.Log(l+1)) / tuning)
}

// interval returns [mid − half, mid + half], or nil when either end is not
// finite.
func interval(mid, half float64) *[2]float64 {
	lo, hi := finite(mid-half), finite(mid+half)
	if lo == nil || hi == nil {
		return nil
	}
	return &[2]float64{*lo, *hi}
}
