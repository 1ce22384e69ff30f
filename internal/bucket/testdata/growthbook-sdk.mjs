// growthbook-sdk.mjs prints growthbook-sdk.json: decisions of GrowthBook's
// own JavaScript SDK (npm @growthbook/growthbook 1.7.0) through its public
// API, for ids that cases.json lacks (non-ASCII, surrogate pairs) and for the
// rollout and experiment shapes graygate maps onto. Run it where the package
// is installed:
//
//	npm install @growthbook/growthbook@1.7.0 && node growthbook-sdk.mjs > growthbook-sdk.json
import { GrowthBook } from "@growthbook/growthbook";

const ids = [
  "123", "user-1", "10001", "a",
  "用户42", "ü", "naïve", "Ωmega", "ÿĀ", "\u00ff", "\u0100", "\u07ff\u0800",
  "😀", "x😀y", "𝄞music", "日本語のユーザー", "ﬃ", "\uffff",
];
const seeds = ["exp_user_center_202405", "checkout", "", "种子", "gb-🌍"];
// Percentages, as a rule gives them; the last three are not whole.
const weightSets = [[50, 50], [10, 20, 70], [33, 33, 34], [0, 100], [25, 25, 25, 25], [1, 99], [100],
  [33.4, 33.3, 33.3], [12.5, 87.5], [0.01, 99.99]];
const percents = [0, 1, 35, 500, 1000, 1234, 5000, 9999, 10000]; // hundredths

function run(seed, id, weights) {
  const gb = new GrowthBook({ attributes: { id } });
  const exp = { key: seed, variations: weights.map((_, i) => i), hashVersion: 2 };
  // A weight as a GrowthBook experiment stores it: the decimal fraction
  // (33.4% is 0.334), not 33.4 / 100, which can be one unit in the last
  // place away from it.
  if (weights.length > 1) exp.weights = weights.map((w) => Number((w / 100).toPrecision(12)));
  const r = gb.run(exp);
  gb.destroy();
  return r;
}

function rolledOut(seed, id, hundredths) {
  const gb = new GrowthBook({
    attributes: { id },
    features: { f: { defaultValue: false, rules: [{ force: true, coverage: hundredths / 10000, hashVersion: 2, seed }] } },
  });
  const on = gb.isOn("f");
  gb.destroy();
  return on;
}

const out = { sdk: "@growthbook/growthbook 1.7.0", hash: [], experiments: [], rollouts: [] };
for (const seed of seeds) {
  for (const id of ids) {
    out.hash.push({ seed, id, n: run(seed, id, [50, 50]).bucket });
    for (const weights of weightSets) {
      out.experiments.push({ seed, id, weights, variation: run(seed, id, weights).variationId });
    }
    for (const p of percents) {
      if (seed === "") continue; // a rule without a seed hashes with the feature key
      out.rollouts.push({ seed, id, hundredths: p, on: rolledOut(seed, id, p) });
    }
  }
}
// The edges of a rollout: an id whose n is exactly the coverage is in (n <=
// coverage), the next bucket up is out.
for (const p of [1, 35, 1000, 1234]) {
  for (const want of [p, p + 1]) {
    for (let i = 0; ; i++) {
      const id = "edge-" + i;
      if (Math.round(run("edge", id, [50, 50]).bucket * 10000) === want) {
        out.rollouts.push({ seed: "edge", id, hundredths: p, on: rolledOut("edge", id, p) });
        break;
      }
    }
  }
}
console.log(lines(out));

// lines writes an object of arrays as JSON with one case per line.
function lines(obj) {
  const parts = Object.entries(obj).map(([k, v]) =>
    Array.isArray(v) ? `${JSON.stringify(k)}: [\n${v.map((c) => "  " + JSON.stringify(c)).join(",\n")}\n]` : `${JSON.stringify(k)}: ${JSON.stringify(v)}`);
  return "{\n" + parts.join(",\n") + "\n}";
}
