// Package stats computes an experiment's results from per-group unit aggregates: means, Welch's t-test, the delta-method CI of the lift, sample-ratio mismatch, and optional always-valid (sequential) intervals.
//
// The input is what the gateway can count without keeping every unit's
// value: per group and metric the exposed units n, the units with a
// conversion or a non-zero value, and the sum and the sum of squares of the
// per-unit values (a binomial metric's value is 0 or 1 per unit; a mean
// metric's value is the unit's summed value). Compute is a pure function of
// that input: it keeps no state, is safe for concurrent use, and its Results
// never hold NaN or ±Inf, so encoding/json can always marshal them.
//
// # Formulas
//
// The reference implementation is GrowthBook's gbstats
// (github.com/growthbook/growthbook, packages/stats/gbstats, read at commit
// 8f1db4456915a8e7b7faf23d5632ca7219d2f469). Line numbers below are of that
// commit.
//
//   - Mean and variance of a group: mean = sum/n and
//     s² = (sum_squares − sum²/n)/(n − 1), as SampleMeanStatistic does
//     (models/statistics.py L49–58). Issue 14 asks for this sample variance
//     for binomial metrics too, so a binomial group's variance is
//     n·p(1−p)/(n−1) where ProportionStatistic uses p(1−p)
//     (models/statistics.py L80–82); the two differ by the factor n/(n−1),
//     and ours is what a t-test on the raw 0/1 values uses.
//   - p_value: Welch's two-sided t-test of the treatment mean against the
//     control mean, t = (m_b − m_a)/√(s_a²/n_a + s_b²/n_b), with the
//     Welch–Satterthwaite degrees of freedom
//     ν = (s_a²/n_a + s_b²/n_b)² / ((s_a²/n_a)²/(n_a−1) + (s_b²/n_b)²/(n_b−1))
//     (frequentist/tests.py L62–72, TTest.dof) and p = 2·P(T_ν > |t|), as
//     scipy.stats.ttest_ind(b, a, equal_var=False) computes it.
//   - lift: (m_b − m_a)/|m_a| (utils.py L22–28, frequentist_diff with
//     relative=True). For a positive baseline mean this is
//     (mean − baseline_mean)/baseline_mean; dividing by |m_a| keeps a
//     positive lift meaning "the treatment's mean is higher" when the
//     baseline is negative.
//   - Variance of the lift by the delta method for a ratio of independent
//     means: Var = (s_b²/n_b)/m_a² + (s_a²/n_a)·m_b²/m_a⁴, which is
//     variance_of_ratios(m_b, s_b²/n_b, m_a, s_a²/n_a, 0)
//     (utils.py L31–35 and L59–66); its standard error is √Var
//     (models/tests.py L206–212).
//   - ci95: lift ± t_{ν, 0.975}·se, with ν the Welch–Satterthwaite
//     degrees of freedom of the unit values above, not of the ratio
//     (frequentist/tests.py L198–211, TwoSidedTTest.confidence_interval).
//   - Sequential (Options.Sequential): the always-valid interval of
//     Waudby-Smith et al. (arXiv:2103.06476v7, eq. 9), which GrowthBook
//     implements after Howard et al.'s GAVI: with N the tuning parameter
//     (default 5000), α = 0.05, n = n_a + n_b (models/tests.py L289–291) and
//     s² = se²·n (frequentist/tests.py L312),
//     ρ = √((−2 ln α + ln(−2 ln α + 1))/N) (L244–250, eq. 161) and
//     halfwidth = √s² · √(2(nρ²+1)·ln(√(nρ²+1)/α)/(nρ)²) (L253–265).
//     Its p_value is GrowthBook's always-valid one (L323–334, eq. 155):
//     p = min(1, 1/E) with E = exp(ρ²·S/(2(nρ²+1)))/√(nρ²+1) and
//     S = lift²·n/se²; it is computed as exp(−ρ²S/(2(nρ²+1)) + ½ln(nρ²+1)),
//     the same number without the overflow of exp for large S. The
//     fixed-horizon Welch p-value is then kept in welch_p_value.
//   - SRM: Pearson's χ² of the groups' unit counts against the counts the
//     configured weights expect, e_i = w_i/Σw · Σn, with groups − 1 degrees
//     of freedom and p = P(χ²_df > χ²) (utils.py L70–84, check_srm). It is
//     judged only when every group with a positive weight expects at least
//     SRMMinUnits units (e_i ≥ 8, Cochran's rule for the χ² approximation);
//     the units a group actually got do not hold the judgement back, or a
//     group starved of units, the worst mismatch, would never be judged.
//     ok is false when p < threshold (default 0.001).
//     sequential_p_value is the anytime-valid p-value of the split: 1/BF
//     of a Dirichlet(C·θ)-multinomial mixture against the multinomial of
//     the weights θ (Lindon and Malek 2022, Optimizely's ssrm), C =
//     SRMSequentialConcentration. alert is true when both are below the
//     threshold: what a caller that reads the split continually acts on.
//
// The Student t, normal and χ² distributions are gonum's (stat/distuv).
// gonum's Student t loses about log10(ν) digits at large ν (it evaluates the
// incomplete beta at ν/(t²+ν)): against scipy it agrees to 1e-9 up to
// ν ≈ 10⁷ and to ~2e-8 up to ν = 10⁸, beyond which the standard normal,
// whose error (≈ (z²+1)/(4ν) relative) is then smaller, takes its place.
// Such differences are far below any decision threshold.
//
// # Where a number is undefined
//
// A field that has no value is null in JSON (a nil pointer in Go), and the
// comparison's reason says why. Mean is null when the metric has no units.
// The t-test (t, df, p_value) needs at least 2 units in both groups and a
// positive standard error: when both groups have zero variance it is null
// (a difference of two constants has no sampling distribution). When only
// one group has zero variance Welch's test is still defined (ν becomes the
// other group's n − 1) and is reported; GrowthBook refuses every zero
// variance there, we refuse only the undefined case. Lift is null when the
// baseline mean is 0, and ci95 is null when the lift's delta-method
// variance is 0 or the test is undefined. With Sequential, p_value is the
// always-valid test of the lift and is null with it; the fixed-horizon
// p-value is then only in welch_p_value, so that no one peeking at a
// sequential experiment reads a p-value that peeking invalidates. SRM
// reports judged: false with a reason, and null chi2 and p_value, when it
// is not judged (some group expects fewer than SRMMinUnits units); a group
// whose weight is 0 but which has units is a certain mismatch: ok false,
// p_value 0 and chi2 null (it is infinite).
package stats
