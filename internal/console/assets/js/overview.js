// The overview: every rule with its split, breaker, rollback and rollout
// state, and live per-group traffic refreshed every few seconds; Rollback
// all and Resume for admins.
import {append, confirmDialog, fmtMs, fmtPercent, fmtRate, fmtTime, h, pill, place, replace, serial, sparkline, toast, writeGate} from './dom.js';
import {enc, get, look, post, writeFailure} from './api.js';

export const REFRESH_MS = 3000;

// split describes how a rule divides its traffic.
export function split(r) {
  if (r.type === 'gray') {
    const wl = Array.isArray(r.white_list) && r.white_list.length ? ` + ${r.white_list.length} whitelisted` : '';
    return `${r.gray_percent ?? 0}% gray${wl}`;
  }
  if (Array.isArray(r.groups)) return r.groups.map((g) => `${g.name} ${g.weight}`).join(' · ');
  return '';
}

// definedGroups are the groups a rule can send traffic to.
export function definedGroups(r) {
  if (r.type === 'gray') return ['gray', 'stable'];
  return Array.isArray(r.groups) ? r.groups.map((g) => g.name) : [];
}

// breakerOf finds the breaker of a gray rule in the status document
// (breakers are named "rule|gray target").
export function breakerOf(statusDoc, key) {
  const bs = (statusDoc && statusDoc.breakers) || [];
  return bs.find((b) => typeof b.name === 'string' && b.name.startsWith(key + '|')) || null;
}

export function breakerPill(r, statusDoc) {
  if (r.type !== 'gray') return h('span', {class: 'muted'}, '—');
  // null: the status did not load, so the breaker's state is not known.
  if (!statusDoc) return h('span', {class: 'muted', title: 'the status did not load'}, 'unknown');
  const b = breakerOf(statusDoc, r.key);
  if (!b) return pill('closed', 'ok');
  const kind = b.state === 'open' ? 'bad' : b.state === 'half-open' ? 'warn' : 'ok';
  const p = pill(b.state, kind);
  if (b.reason) p.title = b.reason;
  return p;
}

// rolloutPill says where a gray rule's rollout stands, from the rollout
// status the rule carries: its state and step. A rule without a rollout
// shows a dash.
export function rolloutPill(r) {
  const ro = r.rollout;
  if (!ro || !Array.isArray(ro.steps)) return h('span', {class: 'muted'}, '—');
  const st = ro.status;
  if (!st) return pill('starting', 'off');
  const kind = {progressing: 'ok', paused: 'warn', aborted: 'bad', completed: 'ok'}[st.state] || 'off';
  const p = pill(st.state === 'completed' ? 'completed' : `${st.state} · step ${st.step}/${ro.steps.length}`, kind);
  if (st.message) p.title = st.message;
  return p;
}

export function rollbackPill(r) {
  return r.rolled_back ? pill('rolled back', 'warn') : h('span', {class: 'muted'}, 'no');
}

// liveTable renders the traffic of one rule's groups.
export function liveTable(groups, stats) {
  const rows = groups.map((g) => {
    const st = stats.get(g);
    const cells = st && st.requests > 0
      ? [h('td', {class: 'num', 'data-stat': 'rps'}, fmtRate(st.rps)),
         h('td', {class: ['num', st.error_rate > 0.05 ? 'bad-text' : null], 'data-stat': 'error_rate'}, fmtPercent(st.error_rate)),
         h('td', {class: 'num', 'data-stat': 'p99'}, fmtMs(st.p99_ms))]
      : [h('td', {class: 'num muted', 'data-stat': 'rps'}, '0/s'), h('td', {class: 'num muted'}, '—'), h('td', {class: 'num muted'}, '—')];
    return h('tr', {'data-group': g},
      h('td', {class: 'group'}, g), ...cells,
      h('td', null, sparkline(st ? st.trend : [])));
  });
  return h('table', {class: 'live'}, h('tbody', null, rows));
}

// statsByRule indexes /api/v1/stats by rule, then group.
export function statsByRule(doc) {
  const m = new Map();
  for (const s of (doc && doc.series) || []) {
    if (!m.has(s.rule)) m.set(s.rule, new Map());
    m.get(s.rule).set(s.group, s);
  }
  return m;
}

export function overview(ctx) {
  const {main, session} = ctx;
  const barSlot = h('div'), tableSlot = h('div');
  const body = h('div', {id: 'overview'}, barSlot, tableSlot);
  let barOn = null, barText = null;
  const updated = h('span', {class: 'muted', id: 'updated'});
  // problem says why the last refresh failed; what the page showed
  // before stays.
  const problem = h('p', {class: 'error', id: 'overview-problem', role: 'alert'});
  replace(main, h('div', {class: 'titlebar'}, h('h1', null, 'Rules'), updated), problem, body);
  // One change at a time: a second press while one is out sends nothing.
  const gate = writeGate(barSlot);
  let timer = null, alive = true, hasStats = true;
  const thead = h('thead'), tbody = h('tbody');
  const table = h('table', {class: 'rules'}, thead, tbody);
  const empty = h('p', {class: 'muted'}, 'No rules yet. PUT one with the admin API or graygate rules put.');
  const footer = h('p', {class: 'muted small'});
  const rowsByKey = new Map();
  let headShape = '';

  // load refreshes the page, one refresh at a time (a hung one is not
  // joined by another every REFRESH_MS).
  let lastStats = null;
  const load = serial(async () => {
    try {
      const [list, statusDoc, stats] = await Promise.all([
        get('/api/v1/rules'), get('/api/v1/status'),
        hasStats ? look('/api/v1/stats?window=10s') : Promise.resolve({state: 'absent'})]);
      if (!alive) return;
      // A gateway without the stats API (404) has no live column; stats
      // that failed this time keep the last figures, and the page says so.
      if (stats.state === 'absent') hasStats = false;
      if (stats.state === 'ok') lastStats = stats.data;
      draw(list, statusDoc, hasStats ? lastStats : null);
      problem.textContent = stats.state === 'error' ? `Could not refresh the live traffic: ${stats.message}. It shows the last answer.` : '';
      updated.textContent = `live, every ${REFRESH_MS / 1000} s · updated ${new Date().toLocaleTimeString('en-GB')}`;
    } catch (ex) {
      if (alive) problem.textContent = `Could not refresh: ${ex.message}. The page shows the last answer.`;
    }
  });

  function draw(list, statusDoc, statsDoc) {
    const stats = statsByRule(statsDoc);
    const rules = list.rules || [];
    const globalOn = !!list.rolled_back;
    // The bar and its button stay in the page while the global state
    // holds, so a refresh never replaces the button under the pointer.
    if (barOn !== globalOn) {
      barOn = globalOn;
      barText = h('span');
      const bar = h('div', {class: ['globalbar', globalOn ? 'on' : null], id: 'global-rollback', 'data-rolled-back': String(globalOn)}, barText);
      if (session.canWrite) {
        bar.appendChild(gate.hold(globalOn
          ? h('button', {type: 'button', class: ['btn', 'primary'], id: 'resume-all', 'data-write': '', 'data-focus': 'global-switch', onclick: () => gate.run(resumeAll)}, 'Resume')
          : h('button', {type: 'button', class: ['btn', 'danger'], id: 'rollback-all', 'data-write': '', 'data-focus': 'global-switch', onclick: () => gate.run(rollbackAll)}, 'Rollback all')));
      }
      replace(barSlot, bar);
    }
    barText.textContent = globalOn
      ? 'Global rollback is ON: gray rules send everyone to stable, experiments to their control group.'
      : `Global rollback is off. Revision ${list.revision}, ${rules.length} rule(s).`;
    const anyRollout = rules.some((r) => r.rollout);
    const shape = `${anyRollout} ${hasStats}`;
    if (shape !== headShape) {
      headShape = shape;
      replace(thead, h('tr', null, ['Rule', 'Type', 'Split', 'Breaker', 'Rolled back'].map((t) => h('th', null, t)),
        anyRollout ? h('th', null, 'Rollout') : null,
        hasStats ? h('th', {class: 'live-head'}, 'Live, last 10 s: group · rate · errors · p99') : null));
    }
    const rows = rules.map((r) => {
      const groups = definedGroups(r);
      const seen = stats.get(r.key) || new Map();
      for (const g of seen.keys()) if (!groups.includes(g)) groups.push(g);
      return keptRow(r.key, r.rule_name || '', () => h('td', null,
        h('a', {href: '#/rules/' + enc(r.key), class: 'rule-key'}, r.key),
        r.rule_name ? h('div', {class: 'rule-name'}, r.rule_name) : null), [
        h('td', null, pill(r.type, r.type)),
        h('td', {class: 'split'}, split(r)),
        h('td', {class: 'breaker'}, breakerPill(r, statusDoc)),
        h('td', {class: 'rollback'}, rollbackPill(r)),
        anyRollout ? h('td', {class: 'rollout-state'}, rolloutPill(r)) : null,
        hasStats ? h('td', null, liveTable(groups, seen)) : null]);
    });
    const unclaimed = stats.get('');
    if (hasStats && unclaimed) {
      rows.push(keptRow('', '', () => h('td', {class: 'muted'}, 'no rule claimed'), [
        h('td'), h('td', {class: 'split muted'}, 'default upstream'), h('td'), h('td'),
        anyRollout ? h('td') : null,
        h('td', null, liveTable([...unclaimed.keys()], unclaimed))]));
    }
    const keep = new Set(rows);
    for (const [key, kept] of rowsByKey) if (!keep.has(kept.row)) rowsByKey.delete(key);
    place(tbody, rows);
    footer.textContent = `Store ${storeKind(statusDoc)}, last reload ${statusDoc.last_reload_result || '—'} at ${fmtTime(statusDoc.last_reload)}.`;
    const want = rules.length ? table : empty;
    if (tableSlot.firstChild !== want) replace(tableSlot, want, footer);
  }

  // keptRow returns the table row of one rule, made once and kept across
  // refreshes with its first cell (the rule's link) in place; only the
  // cells after it are made anew. A refresh that replaced the link between
  // a press and its release would swallow the click.
  function keptRow(key, name, firstCell, cells) {
    let kept = rowsByKey.get(key);
    if (!kept || kept.name !== name) {
      kept = {name, row: h('tr', {'data-rule': key}, firstCell())};
      rowsByKey.set(key, kept);
    }
    const row = kept.row;
    while (row.children.length > 1) row.lastElementChild.remove();
    append(row, cells);
    return row;
  }

  async function rollbackAll() {
    const yes = await confirmDialog({
      title: 'Roll back every rule?',
      message: 'Every gray rule stops sending anyone (whitelist included) to gray, and every experiment sends everyone to its control group, until you press Resume. The rules themselves are kept.',
      confirm: 'Roll back every rule'});
    if (!yes) return;
    try {
      await post('/api/v1/rollback', {reason: 'console: rollback all'});
      toast('Every rule is rolled back.', 'warn');
    } catch (ex) {
      toast(writeFailure('Rollback', ex), 'bad');
    }
    await load();
  }

  async function resumeAll() {
    const yes = await confirmDialog({
      title: 'Resume every rule?',
      message: 'Rules route as written again: gray users go back to gray, experiment groups to their targets.',
      confirm: 'Resume every rule', danger: false});
    if (!yes) return;
    try {
      await post('/api/v1/resume', {reason: 'console: resume'});
      toast('Resumed: rules route as written again.');
    } catch (ex) {
      toast(writeFailure('Resume', ex), 'bad');
    }
    await load();
  }

  load();
  timer = setInterval(load, REFRESH_MS);
  return {dispose() { alive = false; clearInterval(timer); }};
}

// storeKind reads the store's kind from the status document, whose store
// field is a string ("file", "etcd") or an object {kind, state, since,
// revision}.
export function storeKind(doc) {
  const st = doc && doc.store;
  if (st && typeof st === 'object') return st.kind || 'unknown';
  return st || 'unknown';
}
