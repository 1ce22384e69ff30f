// The rule page (#/rules/{key}): the rule's fields; for admins an editor
// that validates as you type (PUT ?dry_run=1) and shows each problem next
// to its field by JSON path, a diff before saving, and a save with
// If-Match; the history with field diffs and Revert; per-rule Rollback and
// Resume; live traffic per group; and, where the gateway has them for
// this rule, the rollout timeline, the experiment results and the shadow
// traffic diff, refreshed with the live traffic.
import {confirmDialog, focusMark, fmtTime, h, json, pill, replace, serial, toast, writeGate} from './dom.js';
import {APIError, enc, get, post, probe, request, uncertain, writeFailure} from './api.js';
import {diff, diffText, joinPath} from './diff.js';
import {REFRESH_MS, breakerPill, definedGroups, liveTable, split, statsByRule} from './overview.js';
import {loadRollout, rolloutPanel} from './rollout.js';
import {experimentPanel, loadResults} from './experiment.js';
import {loadDiff, mirrorPanel} from './mirror.js';

// META are the fields GET adds to a rule; they are not part of the rule.
const META = ['key', 'version', 'revision', 'updated_at', 'updated_by', 'rolled_back', 'reason'];

function isObject(v) { return v !== null && typeof v === 'object' && !Array.isArray(v); }

// ORDER is how the rule's fields are listed: what an operator changes
// most first, then the rest by name.
const ORDER = ['type', 'rule_name', 'gray_percent', 'experiment_id', 'groups', 'white_list', 'targets', 'target_tags',
  'conditions', 'when', 'priority', 'hash', 'route', 'breaker'];

function ruleOnly(view) {
  const r = structuredClone(view);
  for (const k of META) delete r[k];
  const keys = Object.keys(r).sort((a, b) => {
    const ia = ORDER.indexOf(a), ib = ORDER.indexOf(b);
    if (ia !== ib) return (ia < 0 ? ORDER.length : ia) - (ib < 0 ? ORDER.length : ib);
    return a < b ? -1 : a > b ? 1 : 0;
  });
  const out = {};
  for (const k of keys) out[k] = r[k];
  return out;
}

const NUMBER = /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;

// parentPaths lists path and its ancestors: "groups[1].weight",
// "groups[1]", "groups".
export function parentPaths(path) {
  const out = [];
  let p = path;
  while (p) {
    out.push(p);
    const m = p.match(/^(.*)(\[\d+\]|\.[^.[\]]+)$/);
    p = m ? m[1] : '';
  }
  return out;
}

export function rulePage(ctx, key) {
  const {main, session} = ctx;
  let alive = true, timer = null, shown = null, optionals = null, optionalsType = '';
  // extras holds the optional sections (rollout, experiment, mirror
  // diff) that the gateway has for this rule; it is empty otherwise.
  const extras = h('div', {id: 'rule-extras'});
  const live = h('div', {id: 'rule-live'}, h('h2', null, 'Live traffic, last 10 s'), h('p', {class: 'muted'}, '…'));
  // notice says when the rule changed or was deleted after the page
  // drew it; noticeFor is what it says it about, so that a refresh that
  // finds the same never replaces the button under the pointer. Its
  // place is kept, one line high, whether it says something or not: a
  // notice that pushed the page down would move a button away from a
  // pointer about to press it.
  const notice = h('div', {id: 'rule-notice', role: 'status'});
  let noticeFor = '';
  // One change at a time: a second press while one is out sends nothing.
  const gate = writeGate(main);

  // load draws the page from the API, one load at a time. Until the rule
  // has come, the page says it is loading, then why it could not load
  // it, with Try again; once the page shows the rule, a reload that fails
  // keeps it and says why in the notice (a rule that is gone says so).
  const load = serial(async () => {
    if (!shown) replace(main, back(), h('p', {class: 'muted', id: 'rule-loading'}, `Loading ${key}…`));
    let view;
    try {
      view = await get(`/api/v1/rules/${enc(key)}`);
    } catch (ex) {
      if (!alive) return;
      if (ex instanceof APIError && ex.status === 404) {
        shown = null;
        replace(main, back(), h('p', {class: 'error', id: 'rule-missing'}, `There is no rule named ${key}.`));
      } else if (shown) {
        problemNotice(`Could not reload ${key}: ${ex.message}. This page shows version ${shown.version} as it was loaded.`);
      } else {
        replace(main, back(), h('p', {class: 'error', id: 'rule-error', role: 'alert'}, `Could not load rule ${key}: ${ex.message}.`),
          h('div', {class: 'actions'}, h('button', {type: 'button', class: 'btn', id: 'rule-retry', onclick: reloadPage}, 'Try again')));
      }
      return;
    }
    // The history and the status are not the rule: without them the page
    // says what is missing rather than showing none or a closed breaker.
    const [hist, statusDoc] = await Promise.all([
      get(`/api/v1/rules/${enc(key)}/history`).catch((ex) => ({failed: ex.message})),
      get('/api/v1/status').catch(() => null)]);
    if (!alive) return;
    shown = view;
    replace(notice);
    noticeFor = '';
    draw(view, hist.failed ? hist.failed : hist.history || [], statusDoc);
    refreshLive();
    if (!optionals || optionalsType !== view.type) {
      optionals = optionalsFor(view);
      optionalsType = view.type;
    }
    // The load is done when the optional sections are drawn too: an
    // action awaits it before the keyboard focus goes back (writeGate).
    await refreshExtras();
  });

  // reloadPage is load for a button that asks for it (Reload, Load the
  // latest version, Try again). The button goes with the page it
  // reloads: the keyboard focus goes to the button that says the reload
  // failed, if one does, else to the page's title, never to the top of
  // the document.
  async function reloadPage() {
    const mark = focusMark(main);
    await load();
    mark.restore();
    const title = document.getElementById('rule-title');
    if (title) mark.give(title);
  }

  // problemNotice says in the notice that the page could not refresh the
  // rule; it shows what it last loaded.
  function problemNotice(say) {
    noticeFor = 'error';
    const reload = h('button', {type: 'button', class: ['btn', 'small'], id: 'rule-reload'}, 'Reload');
    reload.addEventListener('click', reloadPage);
    replace(notice, h('p', {class: ['error', 'stale'], id: 'rule-problem', role: 'alert'}, h('span', {title: say}, say), reload));
  }

  // optionalsFor lists the sections a rule of view's type may have:
  // each shows only while its API answers for this rule, so a gateway
  // without the API (or a rule without a rollout or a mirror) shows no
  // trace of it and no error.
  function optionalsFor(view) {
    const list = [];
    if (view.type === 'gray') list.push(optional(rolloutPanel({...ctx, gate}, key, load), () => loadRollout(key)));
    if (view.type === 'ab') list.push(optional(experimentPanel(), () => loadResults(key)));
    if (view.type === 'gray') list.push(optional(mirrorPanel(), () => loadDiff(key)));
    return list;
  }

  function optional(panel, loader) {
    const o = {el: panel.el, shown: false};
    const problem = h('p', {class: 'error', role: 'alert'});
    o.refresh = async () => {
      const got = await loader();
      if (!alive) return;
      if (got.state === 'absent') { o.shown = false; return; }
      if (got.state === 'error') {
        // A section already shown says it could not refresh; one never
        // shown stays out of the page.
        if (o.shown) problem.textContent = `Could not refresh: ${got.message}`;
        return;
      }
      problem.textContent = '';
      panel.render(got.data);
      if (o.el.lastChild !== problem) o.el.appendChild(problem);
      o.shown = true;
    };
    return o;
  }

  // refreshExtras refreshes the optional sections, one refresh at a
  // time: one asked for while another runs (after an action, say) runs
  // when it ends, so what is shown is never older than the action. It
  // resolves when that last refresh has drawn them.
  const refreshExtras = serial(async () => {
    const list = optionals;
    if (!list) return;
    await Promise.all(list.map((o) => o.refresh()));
    if (!alive) return;
    const want = list.filter((o) => o.shown).map((o) => o.el);
    const have = [...extras.children];
    if (want.length !== have.length || want.some((el, i) => el !== have[i])) replace(extras, want);
    // How many rounds of probes have answered: a page without any
    // optional section is then known to be complete.
    extras.dataset.rounds = String(Number(extras.dataset.rounds || 0) + 1);
  });

  const refreshLive = serial(async () => {
    const view = shown;
    const doc = await probe('/api/v1/stats?window=10s');
    if (!alive || !doc || !view) return;
    const stats = statsByRule(doc).get(key) || new Map();
    const groups = definedGroups(view);
    for (const g of stats.keys()) if (!groups.includes(g)) groups.push(g);
    replace(live, h('h2', null, 'Live traffic, last 10 s'), liveTable(groups, stats));
  });

  function back() { return h('p', null, h('a', {href: '#/', class: 'back'}, '← All rules')); }

  // checkCurrent looks whether the rule is still the version the page
  // shows, so that an operator looking at it (or editing it) learns that
  // someone changed or deleted it before acting on what is no longer so.
  // It never redraws the page by itself: an edit in progress stays. One
  // check runs at a time; one that gets no answer says so.
  const checkCurrent = serial(async () => {
    const was = shown;
    if (!was) return;
    let about, say;
    try {
      const now = await get(`/api/v1/rules/${enc(key)}`);
      if (now.version !== was.version) {
        about = `v${now.version}`;
        say = `${key} changed since this page loaded it: it is now version ${now.version} (by ${now.updated_by || '—'} at ${fmtTime(now.updated_at)}); this page shows version ${was.version}.`;
      } else if (now.rolled_back !== was.rolled_back) {
        // The global switch changes no rule's version.
        about = `rolled_back=${now.rolled_back}`;
        say = now.rolled_back ? `${key} is rolled back now: every rule was rolled back since this page loaded it.`
          : `${key} is no longer rolled back: every rule was resumed since this page loaded it.`;
      } else {
        about = '';
      }
    } catch (ex) {
      if (!(ex instanceof APIError && ex.status === 404)) {
        if (alive && shown === was && noticeFor !== 'error') {
          problemNotice(`Could not check whether ${key} changed: ${ex.message}. This page shows version ${was.version} as it was loaded.`);
        }
        return;
      }
      about = 'deleted';
      say = `${key} has been deleted since this page loaded it; this page shows version ${was.version} as it was.`;
    }
    if (!alive || shown !== was || about === noticeFor) return;
    noticeFor = about;
    if (!about) { replace(notice); return; }
    const reload = h('button', {type: 'button', class: ['btn', 'small'], id: 'rule-reload'},
      about === 'deleted' ? 'Reload' : session.canWrite ? 'Load the latest version (discards any edit)' : 'Load the latest version');
    reload.addEventListener('click', reloadPage);
    replace(notice, h('p', {class: 'stale', id: 'rule-stale', 'data-stale': about}, h('span', {title: say}, say), reload));
  });

  // since says how the rule stands now against view, the version the
  // page shows, after a compare-and-set write got 409: ", and it is now
  // version 3 (by alice at …)", or ", and it has since been deleted". It
  // resolves null when the rule is still at view's version: the 409 was
  // not about versions (the change would not serve), and the API's own
  // message says what it was.
  async function since(view) {
    try {
      const now = await get(`/api/v1/rules/${enc(key)}`);
      if (now.version === view.version) return null;
      return `, and it is now version ${now.version} (by ${now.updated_by || '—'} at ${fmtTime(now.updated_at)})`;
    } catch (ex) {
      return ex instanceof APIError && ex.status === 404 ? ', and it has since been deleted' : '';
    }
  }

  function draw(view, history, statusDoc) {
    const title = h('div', {class: 'titlebar'},
      h('h1', {id: 'rule-title', tabindex: '-1'}, h('span', {id: 'rule-key'}, key), ' ', pill(view.type, view.type),
        view.rolled_back ? pill('rolled back', 'warn') : null),
      h('span', {class: 'muted'}, `version ${view.version} · updated ${fmtTime(view.updated_at)} by ${view.updated_by || '—'}`));
    const name = view.rule_name ? h('p', {class: 'rule-name big', id: 'rule-name'}, view.rule_name) : null;
    const actions = h('div', {class: 'actions'});
    if (session.canWrite) {
      if (view.rolled_back) {
        actions.appendChild(h('button', {type: 'button', class: ['btn', 'primary'], id: 'rule-resume', 'data-write': '', 'data-focus': 'rule-switch', onclick: () => gate.run(() => setRollback(view, false))}, 'Resume'));
      } else {
        actions.appendChild(h('button', {type: 'button', class: ['btn', 'danger'], id: 'rule-rollback', 'data-write': '', 'data-focus': 'rule-switch', onclick: () => gate.run(() => setRollback(view, true))}, 'Rollback'));
      }
      if (statusDoc && statusDoc.rolled_back) actions.appendChild(h('span', {class: 'muted'}, 'Global rollback is on: Resume it on the overview.'));
    }
    replace(main, back(), title, notice, name, actions, extras,
      section('Fields', fieldsTable(view, statusDoc)),
      session.canWrite ? editor(view) : section('Rule JSON', h('pre', {class: 'json', id: 'rule-json'}, JSON.stringify(ruleOnly(view), null, 2))),
      h('section', {class: 'card'}, live),
      section('History', historyList(view, history)));
    // An action draws the page before it ends: its write buttons wait
    // for the end like the ones they replace.
    for (const btn of main.querySelectorAll('button[data-write]')) gate.hold(btn);
  }

  function section(title, ...children) {
    return h('section', {class: 'card'}, h('h2', null, title), ...children);
  }

  function fieldsTable(view, statusDoc) {
    const rows = [
      ['Type', view.type], ['Split', split(view)],
      ['Breaker', breakerPill(view, statusDoc)],
      ['Rolled back', view.rolled_back ? 'yes' : 'no']];
    const r = ruleOnly(view);
    for (const k of Object.keys(r)) {
      if (k === 'type') continue;
      const v = r[k];
      rows.push([k, typeof v === 'string' ? v : json(v)]);
    }
    rows.push(['Version', String(view.version)], ['Updated', `${fmtTime(view.updated_at)} by ${view.updated_by || '—'}`]);
    if (view.reason) rows.push(['Reason', view.reason]);
    return h('table', {class: 'fields', id: 'rule-fields'}, h('tbody', null,
      rows.map(([k, v]) => h('tr', {'data-field': k}, h('th', null, k), h('td', null, v)))));
  }

  async function setRollback(view, on) {
    const label = view.rule_name ? `${key} (${view.rule_name})` : key;
    const yes = await confirmDialog(on ? {
      title: `Roll back ${key}?`,
      message: `${label}: ${view.type === 'gray' ? 'nobody, whitelist included, goes to gray; those requests go to stable' : 'everyone goes to the control group'} until you resume it. The rule is kept as it is.`,
      confirm: `Roll back ${key}`,
    } : {
      title: `Resume ${key}?`,
      message: `${label} routes as written again.`,
      confirm: `Resume ${key}`, danger: false,
    });
    if (!yes) return;
    try {
      await post(`/api/v1/rules/${enc(key)}/${on ? 'rollback' : 'resume'}`, {reason: `console: ${on ? 'rollback' : 'resume'}`});
      toast(on ? `${key} is rolled back.` : `${key} resumed.`, on ? 'warn' : 'ok');
    } catch (ex) {
      toast(writeFailure(on ? 'Rollback' : 'Resume', ex), 'bad');
    }
    await load();
  }

  function historyList(view, history) {
    if (typeof history === 'string') return h('p', {class: 'error', id: 'history-error'}, `Could not load the history: ${history}.`);
    if (!history.length) return h('p', {class: 'muted'}, 'No history.');
    return h('ol', {class: 'history', id: 'history'}, history.map((it) => {
      const head = h('div', {class: 'history-head'},
        h('strong', null, `v${it.version}`), ' ', pill(it.op, 'op'), ' ',
        h('span', null, `${fmtTime(it.at)} by ${it.by || '—'}`),
        it.reason ? h('span', {class: 'reason'}, ` “${it.reason}”`) : null,
        it.version === view.version ? pill('current', 'ok') : null);
      const lines = (it.diff || []).map((d) => h('li', {class: ['diff', d.op]}, diffText(d)));
      const li = h('li', {'data-version': String(it.version)}, head, lines.length ? h('ul', {class: 'diff-lines'}, lines) : null);
      if (session.canWrite && it.after && it.version !== view.version) {
        li.appendChild(h('button', {type: 'button', class: ['btn', 'small'], 'data-write': '', 'data-revert': String(it.version), 'data-focus': `revert-${it.version}`,
          onclick: () => gate.run(() => revert(view, it.version))}, 'Revert to this version'));
      }
      return li;
    }));
  }

  async function revert(view, version) {
    const label = view.rule_name ? `${key} (${view.rule_name})` : key;
    const yes = await confirmDialog({
      title: `Revert ${key} to version ${version}?`,
      message: `${label} gets the rule of version ${version} back, saved as a new version; traffic follows it at once.`,
      confirm: `Revert ${key} to v${version}`});
    if (!yes) return;
    try {
      // Compare-and-set, as a save is: the revert applies only to the
      // version shown, so it neither overwrites a change made since nor
      // brings back a rule deleted since.
      const {data: out} = await request('POST', `/api/v1/rules/${enc(key)}/revert`,
        {body: {version}, headers: {'If-Match': String(view.version)}});
      toast(`${key} reverted to version ${version}: now version ${out.version}.`);
    } catch (ex) {
      const now = ex instanceof APIError && ex.status === 409 ? await since(view) : null;
      if (now !== null) {
        toast(`${key} changed since you opened it: you opened version ${view.version}${now}. Nothing was reverted.`, 'bad');
      } else {
        toast(writeFailure('Revert', ex), 'bad');
      }
    }
    await load();
  }

  // editor is the admin's form over the rule's fields, with a JSON view,
  // live validation, a diff review and a compare-and-set save.
  function editor(view) {
    const original = ruleOnly(view);
    let draft = structuredClone(original);
    let mode = 'fields';
    let seq = 0, debounce = null, valid = true, problems = [];
    const form = h('div', {class: 'form', id: 'editor-fields'});
    const jsonArea = h('textarea', {id: 'editor-json', class: 'json', rows: 18, spellcheck: 'false', 'data-write': ''});
    const summary = h('div', {class: 'summary', id: 'validation', role: 'status', 'aria-live': 'polite'});
    const review = h('button', {type: 'button', class: ['btn', 'primary'], id: 'review', 'data-write': '', disabled: true}, 'Review changes');
    const panel = h('div', {id: 'review-panel'});
    const tabs = h('div', {class: 'tabs'},
      h('button', {type: 'button', class: 'tab active', id: 'tab-fields', 'data-write': '', 'data-focus': 'editor'}, 'Fields'),
      h('button', {type: 'button', class: 'tab', id: 'tab-json', 'data-write': ''}, 'JSON'));
    const [tabFields, tabJson] = tabs.children;
    tabFields.addEventListener('click', () => setMode('fields'));
    tabJson.addEventListener('click', () => setMode('json'));
    jsonArea.addEventListener('input', () => {
      let parsed;
      try {
        parsed = JSON.parse(jsonArea.value);
      } catch (ex) {
        valid = false;
        showProblems([{path: '', message: `not valid JSON: ${ex.message}`}]);
        return;
      }
      if (!isObject(parsed)) {
        valid = false;
        showProblems([{path: '', message: 'a rule must be a JSON object'}]);
        return;
      }
      draft = parsed;
      changed(false);
    });
    review.addEventListener('click', showReview);

    function setMode(m) {
      mode = m;
      tabFields.classList.toggle('active', m === 'fields');
      tabJson.classList.toggle('active', m === 'json');
      form.hidden = m !== 'fields';
      jsonArea.hidden = m !== 'json';
      if (m === 'fields') renderForm(); else jsonArea.value = JSON.stringify(draft, null, 2);
    }

    function renderForm() {
      replace(form, Object.keys(draft).map((k) => node(draft, k, k, k)));
      showProblems(problems);
    }

    function errorSlot(path) {
      return h('span', {class: 'field-error', 'data-error-for': path, role: 'alert'});
    }

    // node renders draft value parent[k] at path.
    function node(parent, k, path, label) {
      const v = parent[k];
      if (Array.isArray(v)) {
        const items = v.map((_, i) => {
          const el = node(v, i, `${path}[${i}]`, `[${i}]`);
          const rm = h('button', {type: 'button', class: ['btn', 'small', 'ghost'], title: `remove ${path}[${i}]`, 'data-write': ''}, '×');
          rm.addEventListener('click', () => { v.splice(i, 1); renderForm(); changed(true); });
          return h('div', {class: 'item'}, el, rm);
        });
        const add = h('button', {type: 'button', class: ['btn', 'small'], 'data-write': ''}, `+ add to ${label}`);
        add.addEventListener('click', () => { v.push(blank(v[v.length - 1])); renderForm(); changed(true); });
        return h('fieldset', {'data-path': path}, h('legend', null, label, ' ', errorSlot(path)), items, add);
      }
      if (isObject(v)) {
        return h('fieldset', {'data-path': path}, h('legend', null, label, ' ', errorSlot(path)),
          Object.keys(v).map((kk) => node(v, kk, joinPath(path, kk), kk)));
      }
      const id = 'f-' + path.replace(/[^A-Za-z0-9_-]/g, '_');
      let input;
      if (typeof v === 'boolean') {
        input = h('input', {type: 'checkbox', id, checked: v, 'data-path': path, 'data-write': ''});
        input.addEventListener('change', () => { parent[k] = input.checked; changed(true); });
      } else {
        const numeric = typeof v === 'number';
        input = h('input', {type: 'text', id, value: v === null ? '' : String(v), 'data-path': path, 'data-write': '',
          inputmode: numeric ? 'decimal' : null, spellcheck: 'false', autocomplete: 'off'});
        input.addEventListener('input', () => {
          const t = input.value;
          parent[k] = numeric && NUMBER.test(t.trim()) ? Number(t.trim()) : t;
          changed(true);
        });
      }
      return h('div', {class: 'row'}, h('label', {for: id}, label), input, errorSlot(path));
    }

    // blank makes a new list element shaped like the last one.
    function blank(like) {
      if (typeof like === 'number') return 0;
      if (typeof like === 'boolean') return false;
      if (isObject(like)) {
        const o = {};
        for (const [k, v] of Object.entries(like)) o[k] = blank(v);
        return o;
      }
      if (Array.isArray(like)) return [];
      return '';
    }

    function changed(fromForm) {
      if (fromForm && mode === 'json') jsonArea.value = JSON.stringify(draft, null, 2);
      replace(panel);
      review.disabled = true;
      summary.textContent = 'checking…';
      summary.className = 'summary';
      clearTimeout(debounce);
      debounce = setTimeout(validate, 250);
    }

    async function validate() {
      const my = ++seq;
      try {
        await request('PUT', `/api/v1/rules/${enc(key)}?dry_run=1`, {body: draft});
        if (my !== seq || !alive) return;
        valid = true;
        showProblems([]);
      } catch (ex) {
        if (my !== seq || !alive) return;
        valid = false;
        showProblems(ex instanceof APIError && ex.details.length ? ex.details
          : [{path: '', message: uncertain(ex) ? `could not check the rule (${ex.message}); change a field to check again` : ex.message}]);
      }
    }

    // showProblems puts each problem next to the field its path names, or
    // the nearest enclosing one, and lists them all in the summary.
    function showProblems(list) {
      problems = list;
      for (const el of form.querySelectorAll('[data-error-for]')) el.textContent = '';
      for (const el of form.querySelectorAll('.invalid')) { el.classList.remove('invalid'); el.removeAttribute('aria-invalid'); }
      for (const p of list) {
        for (const path of parentPaths(p.path || '')) {
          const slot = form.querySelector(`[data-error-for="${CSS.escape(path)}"]`);
          if (!slot) continue;
          slot.textContent = slot.textContent ? `${slot.textContent}; ${p.message}` : p.message;
          const input = form.querySelector(`[data-path="${CSS.escape(path)}"]`);
          if (input) { input.classList.add('invalid'); input.setAttribute('aria-invalid', 'true'); }
          break;
        }
      }
      const dirty = diff(original, draft).length > 0;
      if (!list.length) {
        summary.className = 'summary ok';
        replace(summary, dirty ? '✓ valid: review your changes, then save.' : '✓ valid. Edit a field to change the rule.');
      } else {
        summary.className = 'summary bad';
        replace(summary, h('strong', null, `${list.length} problem(s); nothing is saved until they are fixed:`),
          h('ul', {id: 'problems'}, list.map((p) => h('li', {'data-problem': p.path || ''}, p.path ? `${p.path}: ${p.message}` : p.message))));
      }
      review.disabled = !(valid && !list.length && dirty);
    }

    function showReview() {
      const lines = diff(original, draft);
      const reason = h('input', {type: 'text', id: 'reason', placeholder: 'why (shown in the history)', 'data-write': '', autocomplete: 'off'});
      // After a save the page shows the new version with a fresh editor:
      // the keyboard focus goes to its start (data-focus).
      const save = h('button', {type: 'button', class: ['btn', 'primary'], id: 'save', 'data-write': '', 'data-focus': 'editor'}, `Save as version ${view.version + 1}`);
      const cancel = h('button', {type: 'button', class: 'btn', id: 'cancel-review', 'data-write': ''}, 'Back to editing');
      const msg = h('div', {id: 'save-result', role: 'alert'});
      cancel.addEventListener('click', () => {
        const mark = focusMark(panel);
        replace(panel);
        // Back to editing puts the focus back on what opened the review.
        mark.give(review);
      });
      save.addEventListener('click', async () => {
        const mark = focusMark(main);
        save.disabled = true;
        try {
          const body = {...draft};
          if (reason.value.trim()) body.reason = reason.value.trim();
          const {data} = await request('PUT', `/api/v1/rules/${enc(key)}`, {body, headers: {'If-Match': String(view.version)}});
          toast(`Saved ${key}: version ${data.version}.`);
          await load();
        } catch (ex) {
          save.disabled = false;
          const now = ex instanceof APIError && ex.status === 409 ? await since(view) : null;
          if (now !== null) {
            const reload = h('button', {type: 'button', class: 'btn', id: 'load-latest', 'data-write': ''}, 'Load the latest version (discards this edit)');
            reload.addEventListener('click', reloadPage);
            replace(msg, h('p', {class: 'error conflict', id: 'conflict'},
              `${key} changed since you opened it: you opened version ${view.version}${now}` +
              '. Nothing was saved. Your edit is still here.'), reload);
            save.disabled = true;
            // Save is disabled now; the one thing to do is the reload.
            mark.give(reload);
          } else if (ex instanceof APIError && (ex.status === 400 || ex.details.length)) {
            replace(msg, h('p', {class: 'error'}, ex.message));
            showProblems(ex.details);
          } else {
            replace(msg, h('p', {class: 'error'}, writeFailure('Save', ex)));
          }
        }
        // Back on Save if it works again, else where the page now puts
        // it (a no-op when the reload above has the focus).
        mark.restore();
      });
      replace(panel, h('div', {class: 'review'},
        h('h3', null, `Changes to ${key} (version ${view.version} → ${view.version + 1})`),
        lines.length ? h('ul', {class: 'diff-lines', id: 'review-diff'}, lines.map((d) => h('li', {class: ['diff', d.op]}, diffText(d))))
          : h('p', {class: 'muted'}, 'No changes.'),
        h('label', {for: 'reason'}, 'Reason'), reason,
        h('div', {class: 'actions'}, cancel, save), msg));
    }

    setMode('fields');
    jsonArea.hidden = true;
    showProblems([]);
    return h('section', {class: 'card', id: 'editor'}, h('h2', null, 'Edit'), tabs, form, jsonArea, summary,
      h('div', {class: 'actions'}, review), panel);
  }

  load();
  timer = setInterval(() => { if (shown) { refreshLive(); refreshExtras(); checkCurrent(); } }, REFRESH_MS);
  return {dispose() { alive = false; clearInterval(timer); }};
}
