// The status screen: the store and its state, the ruleset revision, the
// last reload and error, version and uptime, and the breakers.
import {fmtDuration, fmtTime, h, pill, replace, serial} from './dom.js';
import {get} from './api.js';

const REFRESH_MS = 5000;

// storeInfo reads the store from a status document whose store field is
// a string ("file", "etcd", with stale and store_sync beside it) or an
// object {kind, state, since, revision}.
export function storeInfo(doc) {
  const st = doc.store;
  if (st && typeof st === 'object') {
    return {kind: st.kind || 'unknown', state: st.state || 'unknown', since: st.since || null, revision: st.revision ?? null};
  }
  let state = doc.stale ? 'stale' : 'live';
  if (doc.store_sync && !doc.store_sync.synced) state = 'stale';
  return {kind: st || 'unknown', state, since: doc.store_sync ? doc.store_sync.last_sync : null, revision: null};
}

function windowText(w) {
  if (!w) return '—';
  return `${w.requests ?? 0} requests, ${w.failures ?? 0} failed, p99 ${w.p99 ?? '—'} over ${w.length ?? '—'}`;
}

export function status(ctx) {
  const {main} = ctx;
  const body = h('div', {id: 'status'});
  const problem = h('p', {class: 'error', id: 'status-problem', role: 'alert'});
  replace(main, h('div', {class: 'titlebar'}, h('h1', null, 'Status')), problem, body);
  let alive = true;

  // load refreshes the screen, one refresh at a time; a failed one keeps
  // what the screen showed and says why.
  const load = serial(async () => {
    let doc;
    try {
      doc = await get('/api/v1/status');
    } catch (ex) {
      if (alive) problem.textContent = `Could not load the status: ${ex.message}.`;
      return;
    }
    if (!alive) return;
    problem.textContent = '';
    const store = storeInfo(doc);
    const result = doc.last_reload_result || '—';
    const rows = [
      ['Store', h('span', {id: 'st-store'}, store.kind)],
      ['Store state', h('span', {id: 'st-state'}, pill(store.state, store.state === 'live' ? 'ok' : 'warn'))],
      store.since ? ['Store state since', fmtTime(store.since)] : null,
      ['Revision', h('span', {id: 'st-revision'}, String(store.revision ?? doc.revision))],
      ['Rules serving', String(doc.rules ?? '—')],
      ['Global rollback', doc.rolled_back ? pill('on', 'warn') : 'off'],
      ['Last reload', h('span', {id: 'st-reload'}, pill(result, result === 'ok' ? 'ok' : result === 'partial' ? 'warn' : 'bad'), ` at ${fmtTime(doc.last_reload)}`)],
      ['Last error', h('span', {id: 'st-error', class: doc.last_error ? 'bad-text' : 'muted'},
        doc.last_error ? `${doc.last_error} (at ${fmtTime(doc.last_error_at)})` : 'none')],
      ['Version', h('span', {id: 'st-version'}, doc.version || '—')],
      ['Uptime', h('span', {id: 'st-uptime'}, doc.uptime_s !== undefined ? fmtDuration(doc.uptime_s) : '—'),
        doc.started_at ? ` (since ${fmtTime(doc.started_at)})` : ''],
      ['Config generation', String(doc.config_generation ?? '—')],
    ].filter(Boolean);
    const broken = Object.entries(doc.broken_rules || {});
    const breakers = doc.breakers || [];
    replace(body,
      h('section', {class: 'card'}, h('table', {class: 'fields', id: 'status-fields'}, h('tbody', null,
        rows.map(([k, ...v]) => h('tr', null, h('th', null, k), h('td', null, ...v)))))),
      broken.length ? h('section', {class: 'card'}, h('h2', null, 'Disabled rules'),
        h('ul', {id: 'broken'}, broken.map(([k, e]) => h('li', null, h('strong', null, k), `: ${e}`)))) : null,
      h('section', {class: 'card'}, h('h2', null, 'Circuit breakers'),
        breakers.length ? h('table', {class: 'trace'},
          h('thead', null, h('tr', null, ['Rule | gray target', 'State', 'Since', 'Why', 'Window'].map((t) => h('th', null, t)))),
          h('tbody', null, breakers.map((b) => h('tr', null,
            h('td', null, b.name), h('td', null, pill(b.state, b.state === 'open' ? 'bad' : b.state === 'half-open' ? 'warn' : 'ok')),
            h('td', null, fmtTime(b.since)), h('td', null, b.reason || '—'),
            h('td', {class: 'muted small'}, windowText(b.window))))))
          : h('p', {class: 'muted'}, 'No breaker has been created yet (a gray rule makes one).')));
  });

  load();
  const timer = setInterval(load, REFRESH_MS);
  return {dispose() { alive = false; clearInterval(timer); }};
}
