#!/usr/bin/python3
"""Generates units.csv and reference.json for internal/gateway's
TestExperimentEndToEnd (see README.md here).

units.csv is 20,000 units of experiment "exp_checkout_2026" with everything
the test sends for each through the gateway's listener:

    id,group,orders,failed,signup

  - group: the group graygate assigns, xxh64(experiment_id + ":" + id) %
    10000 walked over the weights 50/50 (A below 5000), computed here with
    an implementation of XXH64 written from its specification
    (github.com/Cyan4973/xxHash, doc/xxhash_spec.md); the test checks it
    against the X-Gray-Group of every answer;
  - orders: the amounts of the unit's successful POST /api/order/ requests,
    ';'-separated (each answered 201 with X-Gray-Metric-Revenue: amount);
    group A converts with probability 0.10, group B with 0.12: a planted
    2-point lift;
  - failed: 1 if the unit also sends an order that fails (500): it neither
    converts nor earns;
  - signup: 1 for a signup event posted after the exposure, "before" for one
    dated an hour before it (which must not count), 0 for none.

reference.json holds, from those per-unit values, the aggregates per group
and what scipy says of group B against group A for each metric (purchase:
0/1 per unit; revenue: the unit's summed order amounts; signup: 0/1),
computed by internal/stats/testdata/gen_reference.py's compare() (scipy's
ttest_ind on the raw unit values, GrowthBook's lift interval) and srm()
(scipy.stats.chisquare).

Run it with Debian's interpreter (python3-scipy), from this directory:

    /usr/bin/python3 gen_units.py
"""

import json
import os
import sys

import numpy as np
import scipy

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "stats", "testdata"))
import gen_reference as ref  # noqa: E402

EXPERIMENT = "exp_checkout_2026"
UNITS = 20_000
SEED = 20261130
P_PURCHASE = {"A": 0.10, "B": 0.12}
P_SIGNUP = 0.25

M = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def xround(acc, lane):
    return (rotl((acc + lane * P2) & M, 31) * P1) & M


def merge(acc, v):
    return ((acc ^ xround(0, v)) * P1 + P4) & M


def xxh64(data, seed=0):
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while i + 32 <= n:
            for j in range(4):
                v[j] = xround(v[j], int.from_bytes(data[i + 8 * j:i + 8 * j + 8], "little"))
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
        for x in v:
            h = merge(h, x)
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        h ^= xround(0, int.from_bytes(data[i:i + 8], "little"))
        h = (rotl(h, 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * P1) & M
        h = (rotl(h, 23) * P2 + P3) & M
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M
        h = (rotl(h, 11) * P1) & M
        i += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    return h ^ (h >> 32)


# Known XXH64 values (seed 0), e.g. python-xxhash's README example for the
# last one; the Go test also checks every unit's group against graygate.
assert xxh64(b"") == 0xEF46DB3751D8E999
assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
assert xxh64(b"abc") == 0x44BC2CF5AD770999
assert xxh64(b"Nobody inspects the spammish repetition") == 0xFBCEA83C8A378BF1


def main():
    rng = np.random.default_rng(SEED)
    rows = []
    values = {g: {"purchase": [], "revenue": [], "signup": []} for g in ("A", "B")}
    for i in range(UNITS):
        uid = "u%05d" % i
        group = "A" if xxh64((EXPERIMENT + ":" + uid).encode()) % 10000 < 5000 else "B"
        orders = []
        if rng.random() < P_PURCHASE[group]:
            n = 2 if rng.random() < 0.2 else 1
            orders = [round(float(rng.lognormal(3.5, 0.6)), 2) for _ in range(n)]
        failed = int(rng.random() < 0.04)
        r = rng.random()
        signup = "1" if r < P_SIGNUP else ("before" if r < P_SIGNUP + 0.01 else "0")
        rows.append("%s,%s,%s,%d,%s" % (uid, group, ";".join("%.2f" % a for a in orders), failed, signup))
        v = values[group]
        v["purchase"].append(1.0 if orders else 0.0)
        v["revenue"].append(float(sum(orders)))
        v["signup"].append(1.0 if signup == "1" else 0.0)
    with open(os.path.join(HERE, "units.csv"), "w") as f:
        f.write("id,group,orders,failed,signup\n")
        f.write("\n".join(rows) + "\n")
    out = {"experiment": EXPERIMENT, "scipy": scipy.__version__, "numpy": np.__version__,
           "groups": {}, "comparisons": {}}
    for g in ("A", "B"):
        out["groups"][g] = {m: ref.aggregates(np.array(x)) for m, x in values[g].items()}
    for m in ("purchase", "revenue", "signup"):
        a, b = np.array(values["A"][m]), np.array(values["B"][m])
        out["comparisons"][m] = ref.compare(ref.aggregates(a), ref.aggregates(b), a, b, 5000)
    units = [{"units": len(values[g]["purchase"]), "weight": 50} for g in ("A", "B")]
    out["srm"] = ref.srm(units)
    assert out["comparisons"]["purchase"]["p_value_raw"] < 0.05, out["comparisons"]["purchase"]
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
