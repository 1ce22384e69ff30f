#!/usr/bin/python3
"""Generates reference.json: experiment aggregates and the statistics scipy
computes for them, for internal/stats's reference test (see README.md here).

Every case draws per-unit values from a seeded numpy Generator, reduces them
to the aggregates graygate stores (units, count, sum, sum_squares per group
and metric) and computes, with scipy:

  - Welch's t statistic, degrees of freedom and two-sided p-value, both with
    scipy.stats.ttest_ind(b, a, equal_var=False) on the raw unit values and
    with scipy.stats.ttest_ind_from_stats from the aggregates;
  - the lift and its delta-method 95% interval as GrowthBook's frequentist
    engine forms them (gbstats at commit
    8f1db4456915a8e7b7faf23d5632ca7219d2f469: utils.py frequentist_diff,
    frequentist_variance, variance_of_ratios; frequentist/tests.py
    TTest.dof and TwoSidedTTest), with the t critical value from scipy
    (t.sf inverted by brentq; see t_critical for why not t.ppf alone);
  - the sequential (always-valid) interval and p-value of
    SequentialTwoSidedTTest (frequentist/tests.py sequential_rho,
    sequential_interval_halfwidth, SequentialTwoSidedTTest.p_value);
  - the SRM statistic and p-value with scipy.stats.chisquare against the
    counts the configured weights expect, judged once every weighted group
    expects (not has) SRM_MIN_UNITS units.

Run it with Debian's interpreter (python3-scipy), from this directory:

    /usr/bin/python3 gen_reference.py > reference.json
"""

import json
import math
import sys

import numpy as np
import scipy
import scipy.stats as st
from scipy.optimize import brentq

ALPHA = 0.05
SRM_MIN_UNITS = 8


# ---- unit-value generators: each returns a float64 array of per-unit values.

def binomial(p):
    return lambda rng, n: rng.binomial(1, p, n).astype(np.float64)


def revenue(conv, mu, sigma):
    """Zero for most units, a log-normal amount in cents for converters."""
    def draw(rng, n):
        buys = rng.random(n) < conv
        amount = np.round(rng.lognormal(mu, sigma, n), 2)
        return np.where(buys, amount, 0.0)
    return draw


def normal(mu, sd):
    return lambda rng, n: rng.normal(mu, sd, n)


def exponential(scale):
    return lambda rng, n: rng.exponential(scale, n)


def near_constant(value, bump, bumped):
    """value for every unit but `bumped` of them, which get value + bump."""
    def draw(rng, n):
        x = np.full(n, value)
        x[rng.choice(n, bumped, replace=False)] += bump
        return x
    return draw


def ones_at(k):
    """A binomial metric with exactly k conversions."""
    def draw(rng, n):
        x = np.zeros(n)
        x[rng.choice(n, k, replace=False)] = 1.0
        return x
    return draw


# ---- statistics: scipy for the distributions and tests, GrowthBook's formulas
# for the lift and the sequential interval.

def aggregates(x):
    return {
        "units": int(x.size),
        "count": int(np.count_nonzero(x)),
        "sum": float(np.sum(x)),
        "sum_squares": float(np.sum(x * x)),
    }


def moments(a):
    n = a["units"]
    s, ss = a["sum"], a["sum_squares"]
    mean = s / n if n > 0 else None
    var = None
    if n > 1:
        var = max((ss - s * s / n) / (n - 1), 0.0)
    return n, mean, var


def finite_or_none(x):
    x = float(x)
    return x if math.isfinite(x) else None


def t_critical(df):
    """t_{df, 1-alpha/2}, the root of t.sf(q, df) = alpha/2.

    scipy 1.10's t.ppf (cephes stdtri) is off by up to ~1e-9 relative for
    some non-integer df (at df = 57.81 its result has t.sf(q) - 0.025 =
    6.4e-11), while t.sf agrees with an independent implementation (gonum)
    to ~1e-14 there. Solving t.sf(q, df) = alpha/2 with brentq gives the
    quantile to full precision; t.ppf's value is kept beside it in the
    reference (t_crit_ppf) for comparison."""
    target = ALPHA / 2
    return float(brentq(lambda q: st.t.sf(q, df) - target, 0.0, 1e3,
                        xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500))


def compare(a_agg, b_agg, a_raw, b_raw, tuning):
    """Everything internal/stats reports for treatment b against control a."""
    na, ma, va = moments(a_agg)
    nb, mb, vb = moments(b_agg)
    out = {"baseline_mean": ma, "mean": mb, "abs_diff": mb - ma}
    out["lift"] = (mb - ma) / abs(ma) if ma != 0 else None
    undefined = {"t": None, "df": None, "p_value": None, "lift_std_err": None,
                 "ci95": None, "seq_ci95": None, "seq_p_value": None,
                 "t_crit": None, "t_crit_ppf": None}
    if na < 2 or nb < 2 or va + vb == 0:
        # No t-test: too few units, or two constants (internal/stats's doc).
        out.update(undefined)
        return out
    sa, sb = va / na, vb / nb
    se2 = sa + sb
    # Welch–Satterthwaite (gbstats frequentist/tests.py TTest.dof).
    df = se2 * se2 / (sa * sa / (na - 1) + sb * sb / (nb - 1))
    res = st.ttest_ind_from_stats(mb, math.sqrt(vb), nb, ma, math.sqrt(va), na,
                                  equal_var=False)
    t, p = float(res.statistic), float(res.pvalue)
    # The df above must be the one scipy used for its p-value.
    p_df = 2 * st.t.sf(abs(t), df)
    assert abs(p_df - p) <= 1e-12 * max(p, 1e-300) or abs(p_df - p) < 1e-300, (p_df, p)
    out.update({"t": t, "df": df, "p_value": p, "t_raw": None, "p_value_raw": None, "raw_agrees": False})
    if a_raw is not None:
        raw = st.ttest_ind(b_raw, a_raw, equal_var=False)
        t_raw, p_raw = float(raw.statistic), float(raw.pvalue)
        out.update({"t_raw": t_raw, "p_value_raw": p_raw})
        # The aggregate path equals the raw one unless sum_squares − sum²/n
        # cancels catastrophically (the near-constant cases).
        out["raw_agrees"] = bool(abs(t_raw - t) <= 1e-10 * abs(t) and abs(p_raw - p) <= 1e-12)
    if out["lift"] is None:
        out.update({k: None for k in ("lift_std_err", "ci95", "seq_ci95", "seq_p_value", "t_crit", "t_crit_ppf")})
        return out
    lift = out["lift"]
    # variance_of_ratios(mb, vb/nb, ma, va/na, 0) (gbstats utils.py).
    var_lift = sb / ma ** 2 + sa * mb ** 2 / ma ** 4
    if var_lift == 0:
        out.update({k: None for k in ("lift_std_err", "ci95", "seq_ci95", "seq_p_value", "t_crit", "t_crit_ppf")})
        return out
    se = math.sqrt(var_lift)
    out["lift_std_err"] = se
    crit = t_critical(df)
    out["t_crit"] = crit
    out["t_crit_ppf"] = float(st.t.ppf(1 - ALPHA / 2, df))
    half = crit * se
    out["ci95"] = [lift - half, lift + half]
    # SequentialTwoSidedTTest: n = na + nb, s2 = se²·n.
    n = na + nb
    rho = math.sqrt((-2 * math.log(ALPHA) + math.log(-2 * math.log(ALPHA) + 1)) / tuning)
    s2 = se * se * n
    seq_half = math.sqrt(s2) * math.sqrt(
        (2 * (n * rho ** 2 + 1)) * math.log(math.sqrt(n * rho ** 2 + 1) / ALPHA)
        / (n * rho) ** 2)
    out["seq_ci95"] = [lift - seq_half, lift + seq_half]
    st2 = lift ** 2 * n / se ** 2
    tr2p1 = n * rho ** 2 + 1
    with np.errstate(over="ignore"):
        evalue = np.exp(rho ** 2 * st2 / (2 * tr2p1)) / np.sqrt(tr2p1)
    out["seq_p_value"] = float(min(1 / evalue, 1))
    return out


def srm(groups):
    weighted = [g for g in groups if g["weight"] > 0]
    total = sum(g["units"] for g in groups)
    wsum = sum(g["weight"] for g in weighted)
    obs = np.array([g["units"] for g in weighted], dtype=np.float64)
    exp = np.array([g["weight"] / wsum * total for g in weighted])
    res = st.chisquare(obs, exp)
    return {
        "df": len(weighted) - 1,
        "chi2": finite_or_none(res.statistic),
        "p_value": finite_or_none(res.pvalue),
        # Cochran's rule on the expected counts: a group starved of units
        # is the mismatch the check is for, so its own count never holds
        # the judgement back.
        "judged": bool(len(exp) > 1 and all(e >= SRM_MIN_UNITS for e in exp)),
    }


# ---- cases

def split(rng, total, weights):
    """Units per group: a multinomial draw of total units at the weights."""
    p = np.array(weights, dtype=np.float64) / sum(weights)
    return [int(k) for k in rng.multinomial(total, p)]


def case(name, seed, weights, units, metrics, tuning=5000, drop=None):
    """units: a list (fixed per group) or an int (multinomial total).
    metrics: {metric name: (type, [generator per group])}.
    drop: (group index, fraction) removes that share of one group's units."""
    rng = np.random.default_rng(seed)
    names = "ABCD"[: len(weights)]
    if isinstance(units, int):
        units = split(rng, units, weights)
    units = list(units)
    if drop is not None:
        i, frac = drop
        units[i] = int(round(units[i] * (1 - frac)))
    raw = {}
    groups = []
    for gi, gname in enumerate(names):
        ms = []
        for mname, (mtype, gens) in metrics.items():
            x = gens[gi](rng, units[gi])
            raw[(gname, mname)] = x
            ms.append({"name": mname, "type": mtype, **aggregates(x)})
        groups.append({"name": gname, "weight": weights[gi], "units": units[gi], "metrics": ms})
    return finish(name, seed, tuning, groups, metrics, raw)


def counts_case(name, seed, units, probs, tuning=5000):
    """A binomial experiment too large for raw arrays: each group's
    conversions are one binomial draw, so there is no raw-value t-test."""
    rng = np.random.default_rng(seed)
    groups = []
    for gname, n, p in zip("ABCD", units, probs):
        k = int(rng.binomial(n, p))
        agg = {"units": n, "count": k, "sum": float(k), "sum_squares": float(k)}
        groups.append({"name": gname, "weight": 50, "units": n,
                       "metrics": [{"name": "purchase", "type": "binomial", **agg}]})
    return finish(name, seed, tuning, groups, {"purchase": None}, None)


def finish(name, seed, tuning, groups, metrics, raw):
    expected = {"groups": {}, "srm": srm(groups), "comparisons": []}
    for g in groups:
        expected["groups"][g["name"]] = {}
        for m in g["metrics"]:
            n, mean, var = moments(m)
            expected["groups"][g["name"]][m["name"]] = {"mean": mean, "variance": var}
    control = groups[0]
    for g in groups[1:]:
        for mname in metrics:
            a = next(m for m in control["metrics"] if m["name"] == mname)
            b = next(m for m in g["metrics"] if m["name"] == mname)
            a_raw = raw[(control["name"], mname)] if raw else None
            b_raw = raw[(g["name"], mname)] if raw else None
            c = compare(a, b, a_raw, b_raw, tuning)
            expected["comparisons"].append({"group": g["name"], "metric": mname, **c})
    return {
        "name": name,
        "seed": seed,
        "control": control["name"],
        "sequential_tuning": tuning,
        "groups": groups,
        "expected": expected,
    }


def fixed_cases():
    B = "binomial"
    M = "mean"
    return [
        case("binomial_small_n", 1, [50, 50], [30, 30],
             {"purchase": (B, [binomial(0.30), binomial(0.45)])}),
        case("binomial_tiny_effect_large_n", 2, [50, 50], [1_000_000, 1_000_000],
             {"purchase": (B, [binomial(0.050), binomial(0.0502)])}),
        case("binomial_big_effect", 3, [50, 50], [2000, 2000],
             {"purchase": (B, [binomial(0.10), binomial(0.30)])}),
        case("binomial_unequal_n_10_90", 4, [10, 90], 10_000,
             {"purchase": (B, [binomial(0.20), binomial(0.22)])}),
        case("revenue_three_groups", 5, [34, 33, 33], 3000,
             {"revenue": (M, [revenue(0.10, 3.0, 1.0), revenue(0.12, 3.0, 1.0), revenue(0.10, 3.2, 1.2)])}),
        case("mean_small_n_5_7", 6, [50, 50], [5, 7],
             {"score": (M, [normal(10, 2), normal(12, 3)])}),
        case("mean_unequal_variances", 7, [11, 89], [50, 400],
             {"latency": (M, [normal(100, 1), normal(101, 10)])}),
        case("four_groups_two_metrics", 8, [25, 25, 25, 25], 8000,
             {"purchase": (B, [binomial(0.08), binomial(0.09), binomial(0.08), binomial(0.10)]),
              "revenue": (M, [revenue(0.08, 3.5, 0.8), revenue(0.09, 3.5, 0.8),
                              revenue(0.08, 3.6, 0.8), revenue(0.10, 3.5, 0.9)])}),
        case("srm_dropped_10pct_of_B", 9, [50, 50], 20_000,
             {"purchase": (B, [binomial(0.10), binomial(0.10)])}, drop=(1, 0.10)),
        case("srm_small_group_not_judged", 10, [50, 50], [3, 10],
             {"purchase": (B, [binomial(0.5), binomial(0.5)])}),
        case("near_zero_variance_mean", 11, [50, 50], [10_000, 10_000],
             {"price": (M, [near_constant(7.25, 0.01, 3), near_constant(7.25, 0.01, 5)])}),
        case("near_zero_variance_binomial", 12, [50, 50], [50_000, 50_000],
             {"purchase": (B, [ones_at(1), ones_at(3)])}),
        case("negative_baseline_mean", 13, [50, 50], [500, 500],
             {"profit": (M, [normal(-2.0, 1.0), normal(-1.9, 1.0)])}),
        case("sequential_tuning_1000", 14, [50, 50], [5000, 5000],
             {"purchase": (B, [binomial(0.10), binomial(0.115)])}, tuning=1000),
        case("sequential_tuning_20000", 15, [50, 50], [5000, 5000],
             {"purchase": (B, [binomial(0.10), binomial(0.115)])}, tuning=20000),
        case("mean_large_n_exponential", 16, [50, 50], [200_000, 200_000],
             {"duration": (M, [exponential(30.0), exponential(30.1)])}),
        case("three_groups_10_30_60", 17, [10, 30, 60], 12_000,
             {"purchase": (B, [binomial(0.05), binomial(0.06), binomial(0.05)])}),
        case("mean_tiny_effect", 18, [50, 50], 40_000,
             {"basket": (M, [normal(100.0, 5.0), normal(100.01, 5.0)])}),
        case("srm_three_groups_planted", 19, [20, 30, 50], 30_000,
             {"purchase": (B, [binomial(0.1), binomial(0.1), binomial(0.1)])}, drop=(2, 0.05)),
        # Beyond what raw arrays allow: df ≈ 2·10⁷ (gonum's Student t) and
        # df ≈ 10⁹ (past internal/stats's normalDF, the normal).
        counts_case("binomial_10M_per_group_aggregates_only", 20, [10_000_000, 10_000_000], [0.05, 0.0501]),
        counts_case("binomial_500M_per_group_aggregates_only", 21, [500_000_000, 500_000_000], [0.05, 0.05001]),
        # A group that got 3 of 43 units at 50/50 expects 21.5: judged and
        # flagged, though it has fewer than SRM_MIN_UNITS units itself.
        case("srm_starved_group_judged", 22, [50, 50], [3, 40],
             {"purchase": (B, [binomial(0.5), binomial(0.5)])}),
    ]


def random_cases(count):
    """Cases with seeded random shapes: 2–4 groups, 100·groups to 50,000
    units (log-uniform), small effects on a binomial and a mean metric,
    unequal variances, weights from 5 to 95."""
    meta = np.random.default_rng(2024)
    out = []
    for i in range(count):
        k = int(meta.integers(2, 5))
        weights = [int(w) for w in meta.integers(5, 96, k)]
        total = int(round(math.exp(meta.uniform(math.log(100 * k), math.log(50_000)))))
        base = float(meta.uniform(0.02, 0.6))
        mu, sd = float(meta.uniform(-5, 50)), float(meta.uniform(0.5, 20))
        metrics = {
            "conv": ("binomial", [binomial(base * float(meta.uniform(0.9, 1.1))) for _ in range(k)]),
            "value": ("mean", [normal(mu + sd * float(meta.uniform(-0.05, 0.05)), sd * float(meta.uniform(0.7, 1.4)))
                               for _ in range(k)]),
        }
        out.append(case(f"random_{i:02d}", 1000 + i, weights, total, metrics,
                        tuning=float(meta.choice([1000, 5000, 20000]))))
    return out


def main():
    cases = fixed_cases() + random_cases(24)
    doc = {
        "generator": "internal/stats/testdata/gen_reference.py",
        "command": "/usr/bin/python3 gen_reference.py > reference.json",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "alpha": ALPHA,
        "srm_min_units": SRM_MIN_UNITS,
        "cases": cases,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
