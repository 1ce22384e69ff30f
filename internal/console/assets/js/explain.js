// The explain playground: describe a request and see the decision the
// live rules make for it, with the trace of every rule (POST
// /api/v1/explain runs the same decision code as traffic).
import {h, json, pill, replace} from './dom.js';
import {APIError, request} from './api.js';

// lines parses "Name: value" (sep ':') or "name=value" (sep '=') lines.
export function lines(text, sep) {
  const out = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line) continue;
    const i = line.indexOf(sep);
    if (i <= 0) throw new Error(`"${line}": want name${sep === ':' ? ': ' : '='}value`);
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

export function explain(ctx) {
  const {main} = ctx;
  const field = (id, label, input, hint) => h('div', {class: 'row'}, h('label', {for: id}, label), input,
    hint ? h('span', {class: 'hint'}, hint) : null, h('span', {class: 'field-error', 'data-error-for': id}));
  const method = h('select', {id: 'x-method'}, ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'].map((m) => h('option', {value: m}, m)));
  const host = h('input', {type: 'text', id: 'x-host', placeholder: 'api.example.com (optional)', autocomplete: 'off'});
  const path = h('input', {type: 'text', id: 'x-path', value: '/', autocomplete: 'off', spellcheck: 'false'});
  const user = h('input', {type: 'text', id: 'x-user', placeholder: 'sent as the X-User-Id header', autocomplete: 'off'});
  const headers = h('textarea', {id: 'x-headers', rows: 3, placeholder: 'User-Agent: Mozilla/5.0 WeChat\nX-Region: CN/Beijing', spellcheck: 'false'});
  const cookies = h('textarea', {id: 'x-cookies', rows: 2, placeholder: 'user_id=42', spellcheck: 'false'});
  const query = h('textarea', {id: 'x-query', rows: 2, placeholder: 'user_id=42', spellcheck: 'false'});
  const remote = h('input', {type: 'text', id: 'x-remote', placeholder: '203.0.113.9 (optional)', autocomplete: 'off'});
  const go = h('button', {type: 'submit', class: ['btn', 'primary'], id: 'x-submit'}, 'Explain');
  const result = h('div', {id: 'x-result'});
  const form = h('form', {class: 'form explain', id: 'explain-form', autocomplete: 'off'},
    field('x-method', 'Method', method), field('x-host', 'Host', host), field('x-path', 'Path', path),
    field('x-user', 'User id', user), field('x-headers', 'Headers', headers, 'one “Name: value” a line'),
    field('x-cookies', 'Cookies', cookies, 'one “name=value” a line'), field('x-query', 'Query', query, 'one “name=value” a line'),
    field('x-remote', 'Client IP', remote), h('div', {class: 'actions'}, go));
  const byPath = {path: 'x-path', host: 'x-host', method: 'x-method', headers: 'x-headers', cookies: 'x-cookies', query: 'x-query', remote_addr: 'x-remote'};

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    for (const el of form.querySelectorAll('[data-error-for]')) el.textContent = '';
    const req = {method: method.value, path: path.value.trim() || '/'};
    if (host.value.trim()) req.host = host.value.trim();
    if (remote.value.trim()) req.remote_addr = remote.value.trim();
    try {
      req.headers = lines(headers.value, ':');
      req.cookies = lines(cookies.value, '=');
      req.query = lines(query.value, '=');
    } catch (ex) {
      replace(result, h('p', {class: 'error'}, ex.message));
      return;
    }
    if (user.value.trim() && !Object.keys(req.headers).some((k) => k.toLowerCase() === 'x-user-id')) req.headers['X-User-Id'] = user.value.trim();
    go.disabled = true;
    try {
      const {data} = await request('POST', '/api/v1/explain', {body: req});
      replace(result, answer(data));
    } catch (ex) {
      if (ex instanceof APIError && ex.details.length) {
        for (const d of ex.details) {
          const top = (d.path || '').split(/[.[]/)[0];
          const slot = form.querySelector(`[data-error-for="${byPath[top] || ''}"]`);
          if (slot) slot.textContent = d.message;
        }
      }
      replace(result, h('p', {class: 'error'}, `Explain failed: ${ex.message}`));
    } finally {
      go.disabled = false;
    }
  });

  replace(main, h('div', {class: 'titlebar'}, h('h1', null, 'Explain a request')),
    h('p', {class: 'muted'}, 'Describe a request: the live rules decide it with the same code as traffic, and show why.'),
    h('section', {class: 'card'}, form), result);
  path.focus();
  return {dispose() {}};
}

function answer(data) {
  const d = data.decision || {};
  const tr = data.trace || {};
  const summary = h('p', {class: 'decision', id: 'x-decision'},
    `user “${d.user_id}” (from ${d.identity_source}) → group `, h('strong', {id: 'x-group'}, d.group),
    `, upstream ${d.target || '—'}`, d.rule ? `, rule ${d.rule}` : ', no rule',
    d.degraded ? ` (degraded: ${d.degraded})` : '');
  const facts = h('table', {class: 'fields'}, h('tbody', null,
    [['Rule', d.rule || '— (none claimed it)'], ['Group', d.group], ['Upstream', d.target || '—'], ['Route', d.route || '(global)'],
     ['X-Gray-Tag', d.tag || '—'], ['Degraded', d.degraded || 'no'], ['Revision', String(data.revision)],
     tr.colored ? ['Colored', tr.colored] : null]
      .filter(Boolean).map(([k, v]) => h('tr', null, h('th', null, k), h('td', null, v)))));
  const rows = (tr.rules || []).map((r) => h('tr', {'data-rule': r.key, class: r.claimed ? 'claimed' : null},
    h('td', null, h('strong', null, r.key), h('div', {class: 'muted small'}, `${r.type}, priority ${r.priority}, ${r.hash}`)),
    h('td', null, r.in_scope ? pill('in scope', 'ok') : pill('out of scope', 'off')),
    h('td', null, h('ul', {class: 'conds'}, (r.conditions || []).map((c) => h('li', {class: c.matched ? 'ok-text' : 'bad-text'},
      `${c.matched ? '✓' : '✗'} ${c.condition} ${json(c.want)}, got “${c.got}”${c.source ? ` (${c.source})` : ''}`)))),
    h('td', {class: 'num'}, r.bucket !== undefined ? `${r.bucket} / ${r.threshold ?? '—'} of ${r.buckets}` : (r.whitelist_hit ? `whitelist ${r.whitelist_hit}` : '—')),
    h('td', null, r.claimed ? pill(`claimed → ${r.group}`, 'ok') : pill('no', 'off'), r.target ? h('div', {class: 'muted small'}, r.target) : null),
    h('td', {class: 'reason-cell'}, r.reason)));
  // Rules the path index left out are not evaluated, as for live traffic.
  for (const key of tr.skipped_by_index || []) {
    rows.push(h('tr', {'data-rule': key, class: 'skipped'},
      h('td', null, h('strong', null, key)),
      h('td', null, pill('skipped by the path index', 'off')),
      h('td', {colspan: '4', class: 'muted small'}, 'Its path conditions cannot match this path, so it is not evaluated.')));
  }
  return h('section', {class: 'card', id: 'x-answer'},
    h('h2', null, 'Decision'), summary, h('p', {class: 'muted', id: 'x-reason'}, tr.reason || ''), facts,
    h('h2', null, 'Trace: the rules evaluated, in order, until one claimed the request'),
    rows.length ? h('table', {class: 'trace', id: 'x-trace'},
      h('thead', null, h('tr', null, ['Rule', 'Scope', 'Conditions', 'Bucket', 'Claimed', 'Why'].map((t) => h('th', null, t)))),
      h('tbody', null, rows)) : h('p', {class: 'muted'}, 'No rules.'));
}
