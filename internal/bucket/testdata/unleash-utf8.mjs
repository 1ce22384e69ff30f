// unleash-utf8.mjs prints unleash-utf8.json: Unleash's normalized values
// (murmur3_x86_32(groupId + ":" + id, seed) % normalizer + 1) for non-ASCII
// ids and group ids, computed with murmurhash3js 3.0.1 (the murmur3 the
// client-specification's scripts/generate-wanted-hash.ts uses) over the
// UTF-8 bytes of the string, which is what Unleash's Go, Java and Python
// SDKs hash. Run it where the package is installed:
//
//	npm install murmurhash3js@3.0.1 && node unleash-utf8.mjs > unleash-utf8.json
import murmurHash3 from "murmurhash3js";

const utf8 = (s) => Buffer.from(s, "utf8").toString("latin1"); // one char per byte
const ids = ["123", "用户42", "ü", "naïve", "😀", "x😀y", "日本語のユーザー", "\u0100"];
const groups = ["gr1", "Feature.UTF-8.Hellø_Wørld", "Feature.UTF-8.😊_φriend_你好_🌍", "实验"];
const cases = [];
for (const groupId of groups) {
  for (const id of ids) {
    for (const [seed, normalizer] of [[0, 100], [86028157, 100], [86028157, 3]]) {
      cases.push({ id, group_id: groupId, seed, normalizer, value: (murmurHash3.x86.hash32(utf8(groupId + ":" + id), seed) % normalizer) + 1 });
    }
  }
}
console.log(lines({ source: "murmurhash3js 3.0.1 over UTF-8 bytes", normalized: cases }));

// lines writes an object of arrays as JSON with one case per line.
function lines(obj) {
  const parts = Object.entries(obj).map(([k, v]) =>
    Array.isArray(v) ? `${JSON.stringify(k)}: [\n${v.map((c) => "  " + JSON.stringify(c)).join(",\n")}\n]` : `${JSON.stringify(k)}: ${JSON.stringify(v)}`);
  return "{\n" + parts.join(",\n") + "\n}";
}
