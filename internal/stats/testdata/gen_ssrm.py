#!/usr/bin/python3
"""Reference values for the sequential SRM test (internal/stats/srm.go).

For each case: the null shares theta (the configured weights), the unit
counts, and log BF of the Dirichlet(C*theta) mixture of multinomials against
the multinomial of theta, with C = 1000 (stats.SRMSequentialConcentration).

Two-group cases are computed by numerical integration of the Beta mixture,
independently of the closed form graygate uses:

    BF = integral of Beta(p; C*t, C*(1-t)) * p^x1 (1-p)^x2 dp / (t^x1 (1-t)^x2)

and the script asserts that the closed form (scipy.special.gammaln) agrees.
Cases of three or more groups use the closed form. Run with Debian's
python3-scipy: /usr/bin/python3 gen_ssrm.py > ssrm_reference.json
"""
import json
import math

from scipy import integrate, optimize
from scipy.special import gammaln
from scipy.stats import beta

C = 1000.0


def closed(x, theta):
    a = [C * t for t in theta]
    n = sum(x)
    return (gammaln(sum(a)) - gammaln(sum(a) + n)
            + sum(gammaln(ai + xi) - gammaln(ai) - xi * math.log(t)
                  for ai, xi, t in zip(a, x, theta)))


def by_quad(x, theta):
    x1, x2 = x
    t = theta[0]
    a1, a2 = C * t, C * (1 - t)

    def logf(p):
        return (beta.logpdf(p, a1, a2) + x1 * math.log(p) + x2 * math.log1p(-p)
                - x1 * math.log(t) - x2 * math.log1p(-t))

    # The integrand peaks at the posterior mode; integrate exp(logf - peak)
    # around it, where all its mass is.
    mode = (a1 + x1 - 1) / (a1 + a2 + x1 + x2 - 2)
    peak = logf(mode)
    sd = math.sqrt(mode * (1 - mode) / (a1 + a2 + x1 + x2))
    lo, hi = max(1e-12, mode - 40 * sd), min(1 - 1e-12, mode + 40 * sd)
    v, err = integrate.quad(lambda p: math.exp(logf(p) - peak), lo, hi,
                            points=[mode], limit=500, epsabs=0, epsrel=1e-12)
    return peak + math.log(v)


cases = [
    ("50/50, issue 14's planted SRM (10% of B dropped)", [50, 50], [5000, 4500]),
    ("50/50, clean, 1,000 units", [50, 50], [497, 503]),
    ("50/50, chi-square p 0.001 at 500 units", [50, 50], [287, 213]),
    ("50/50, first units", [50, 50], [8, 8]),
    ("50/50, lopsided start", [50, 50], [60, 9]),
    ("50/50, a million units, clean", [50, 50], [500400, 499600]),
    ("50/50, a million units, 1% drop of B", [50, 50], [500000, 495000]),
    ("90/10, clean", [90, 10], [9012, 988]),
    ("90/10, 10% of the small group dropped", [90, 10], [90000, 9000]),
    ("20/80, 200 units", [20, 80], [47, 153]),
    ("three groups, clean", [34, 33, 33], [3390, 3320, 3290]),
    ("three groups, one 5% short", [34, 33, 33], [3400, 3300, 3135]),
    ("four groups with a holdout", [45, 45, 5, 5], [4480, 4530, 495, 505]),
    ("four groups, holdout doubled", [45, 45, 5, 5], [4500, 4500, 1000, 500]),
]

out = []
for name, w, x in cases:
    theta = [wi / sum(w) for wi in w]
    lbf = closed(x, theta)
    entry = {"name": name, "weights": w, "units": x, "log_bf": lbf}
    if len(x) == 2:
        q = by_quad(x, theta)
        assert abs(q - lbf) <= 1e-7 * max(1, abs(lbf)), (name, q, lbf)
        entry["log_bf_quad"] = q
    entry["sequential_p_value"] = min(1.0, math.exp(-lbf))
    out.append(entry)

print(json.dumps({
    "generator": "gen_ssrm.py with Debian python3-scipy",
    "concentration": C,
    "cases": out,
}, indent=1))
