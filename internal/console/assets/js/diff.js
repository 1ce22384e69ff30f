// Field diffs, the same as the admin API's history diffs (internal/admin
// diff.go): objects key by key in sorted order, lists of strings as sets.

function isObject(v) { return v !== null && typeof v === 'object' && !Array.isArray(v); }

function stringSet(v) {
  if (!Array.isArray(v) || !v.every((e) => typeof e === 'string')) return null;
  return [...new Set(v)];
}

export function joinPath(path, key) { return path ? `${path}.${key}` : key; }

function equal(a, b) { return JSON.stringify(a) === JSON.stringify(b); }

function diffValue(path, a, b, out) {
  const aNone = a === undefined || a === null, bNone = b === undefined || b === null;
  if (aNone && bNone) return;
  if (aNone) { out.push({path, op: 'added', after: b}); return; }
  if (bNone) { out.push({path, op: 'removed', before: a}); return; }
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    for (const k of keys) diffValue(joinPath(path, k), a[k], b[k], out);
    return;
  }
  const as = stringSet(a), bs = stringSet(b);
  if (as && bs) {
    for (const x of as) if (!bs.includes(x)) out.push({path, op: 'removed', before: x});
    for (const x of bs) if (!as.includes(x)) out.push({path, op: 'added', after: x});
    return;
  }
  if (!equal(a, b)) out.push({path, op: 'changed', before: a, after: b});
}

// diff lists the differences from rule a to rule b.
export function diff(a, b) {
  const out = [];
  diffValue('', a, b, out);
  return out;
}

function short(v) {
  const t = JSON.stringify(v);
  return t.length > 120 ? t.slice(0, 117) + '...' : t;
}

// diffText renders one diff line as the CLI does: "~ gray_percent: 5 → 20".
export function diffText(d) {
  const path = d.path || '(rule)';
  switch (d.op) {
    case 'added': return `+ ${path}: ${short(d.after)}`;
    case 'removed': return `- ${path}: ${short(d.before)}`;
    default: return `~ ${path}: ${short(d.before)} → ${short(d.after)}`;
  }
}
