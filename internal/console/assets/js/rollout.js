// The rollout timeline of a rule page: the plan's steps with the current
// one highlighted, the state, every analysis check with its last value
// and threshold, the measurements, and the rollout's events (the rule
// versions the rollout and its operators wrote); for admins Promote,
// Pause or Resume, Abort and Retry, each behind a confirmation that names
// the rule. It reads GET /api/v1/rules/{key}/rollout (where the rollout
// stands), the rule (its plan) and its history, and steers it with POST
// /api/v1/rules/{key}/rollout/{action}.
import {confirmDialog, fmtNum, fmtTime, h, pill, replace, toast} from './dom.js';
import {enc, get, look, post, writeFailure} from './api.js';

// STATE_KIND colors a rollout state.
const STATE_KIND = {progressing: 'ok', paused: 'warn', aborted: 'bad', completed: 'ok'};

// RESULT_MARK marks a measurement's or a check's result, as the CLI does.
const RESULT_MARK = {passed: '✔', failed: '✖', error: '⚠', inconclusive: '?'};
const RESULT_KIND = {passed: 'ok', failed: 'bad', error: 'bad', inconclusive: 'warn'};

// EVENTS_SHOWN bounds the events listed: the history has them all.
const EVENTS_SHOWN = 20;
// MEASUREMENTS_SHOWN bounds the measurements listed under one step.
const MEASUREMENTS_SHOWN = 5;

// loadRollout reads where key's rollout stands, its plan and its events.
// It resolves as api.look does: absent when the gateway has no rollout
// API or the rule no rollout.
export async function loadRollout(key) {
  const got = await look(`/api/v1/rules/${enc(key)}/rollout`);
  if (got.state !== 'ok') return got;
  try {
    const [rule, hist] = await Promise.all([
      get(`/api/v1/rules/${enc(key)}`),
      get(`/api/v1/rules/${enc(key)}/history`).catch(() => ({history: []}))]);
    if (!rule.rollout || !Array.isArray(rule.rollout.steps)) return {state: 'absent'};
    return {state: 'ok', data: {view: got.data, rule, plan: rule.rollout, history: hist.history || []}};
  } catch (ex) {
    return {state: 'error', message: ex.message};
  }
}

// checkLabel is a check's name in measurements (rule.Check.Label).
function checkLabel(c) {
  return c.name || c.metric || (c.prometheus ? 'prometheus' : c.webhook ? 'webhook' : 'check');
}

// planThreshold says what a check is held to, from the plan, for a check
// not measured yet.
function planThreshold(c) {
  const b = c.prometheus || c;
  const parts = [];
  if (b.min !== undefined && b.min !== null) parts.push(`min ${b.min}`);
  if (b.max !== undefined && b.max !== null) parts.push(`max ${b.max}`);
  if (c.webhook) parts.push('a 2xx answer');
  return parts.join(', ') || '—';
}

// stepText describes a step for people, as the CLI's timeline does.
export function stepText(s, plan) {
  if (s.percent !== undefined && s.percent !== null) return `percent ${s.percent}`;
  if (s.pause !== undefined && s.pause !== null) {
    return typeof s.pause === 'string' ? `pause ${s.pause}` : 'pause until promoted';
  }
  if (s.analysis) {
    const a = (plan.analyses || {})[s.analysis];
    if (!a) return `analysis ${s.analysis}`;
    return `analysis ${s.analysis} (${Math.max(a.count || 0, 1)} × ${a.interval}, failure_limit ${a.failure_limit || 0}, inconclusive_limit ${a.inconclusive_limit || 0})`;
  }
  return 'empty step';
}

// stepMark is a step's place on the timeline.
function stepMark(i, view) {
  if (view.state === 'completed' || i < view.step) return {mark: '✔', place: 'done'};
  if (i > view.step) return {mark: '○', place: 'pending'};
  if (view.state === 'aborted') return {mark: '✖', place: 'current'};
  if (view.state === 'paused') return {mark: '‖', place: 'current'};
  return {mark: '►', place: 'current'};
}

function checkText(c) {
  let t = c.check;
  if (c.value !== undefined && c.value !== null) t += ' ' + fmtNum(c.value);
  const extra = [];
  if (c.threshold) extra.push(c.threshold);
  if (c.requests !== undefined && c.requests !== null) extra.push(`${c.requests} req`);
  if (extra.length) t += ` (${extra.join(', ')})`;
  if (c.result !== 'passed') t += ' ' + c.result;
  return t;
}

function measurementLine(m) {
  const notes = [...new Set((m.checks || []).filter((c) => c.result !== 'passed' && c.message).map((c) => c.message))];
  return h('li', {class: ['measurement', m.result], 'data-result': m.result},
    h('span', {class: 'mark'}, RESULT_MARK[m.result] || '·'), ' ',
    `#${m.index} ${fmtTime(m.at).slice(11)} `, pill(m.result, RESULT_KIND[m.result] || 'off'), ' ',
    (m.checks || []).map(checkText).join(' · '),
    notes.length ? h('span', {class: 'muted'}, ' — ' + notes.join('; ')) : null);
}

// rolloutPanel renders into el and keeps its action buttons in the page
// across refreshes of the same state, so a refresh never replaces a
// button under the operator's pointer. onAction runs after an action.
// ctx.gate, when given, is the page's writeGate: an action runs only while
// no other change of the page is out.
export function rolloutPanel(ctx, key, onAction) {
  const {session} = ctx;
  const gate = ctx.gate || {hold: (b) => b, run: (fn) => fn()};
  const top = h('div'), actionSlot = h('div'), rest = h('div');
  const el = h('section', {class: ['card', 'rollout'], id: 'rollout'}, top, actionSlot, rest);
  let actionsFor = '';

  function render(data) {
    const {view, plan, rule, history} = data;
    const steps = plan.steps;
    const status = plan.status || {};
    el.setAttribute('data-state', view.state);
    const head = h('div', {class: 'rollout-head'},
      h('h2', null, 'Rollout ', pill(view.state, STATE_KIND[view.state] || 'off')),
      h('span', {id: 'rollout-step'}, view.state === 'completed' ? `completed all ${steps.length} steps` : `step ${view.step} of ${steps.length}`),
      h('span', {id: 'rollout-percent'}, `gray ${view.percent}%`),
      h('span', {class: 'muted'}, `started ${fmtTime(view.started_at)} · step started ${fmtTime(view.step_started_at)}`));
    const message = h('p', {class: 'rollout-message', id: 'rollout-message'}, view.message || '');
    const failure = status.failure && view.state === 'aborted' ? h('p', {class: 'error', id: 'rollout-failure'},
      `Aborted by ${status.failure.analysis ? `analysis ${status.failure.analysis}, ` : ''}check ${status.failure.check}` +
      (status.failure.value !== undefined && status.failure.value !== null ? `: ${fmtNum(status.failure.value)}` : '') +
      (status.failure.threshold ? ` (${status.failure.threshold})` : '') +
      (status.failure.message ? ` — ${status.failure.message}` : '')) : null;
    if (session.canWrite && actionsFor !== view.state) {
      replace(actionSlot, actionBar(view, rule));
      actionsFor = view.state;
    }
    const measurements = view.measurements || [];
    const byStep = new Map();
    const background = [];
    for (const m of measurements) {
      if (m.background) { background.push(m); continue; }
      if (!byStep.has(m.step)) byStep.set(m.step, []);
      byStep.get(m.step).push(m);
    }
    const timeline = h('ol', {class: 'timeline', id: 'rollout-steps'}, steps.map((s, i) => {
      const {mark, place} = stepMark(i, view);
      const ms = (byStep.get(i) || []).slice(-MEASUREMENTS_SHOWN);
      return h('li', {class: ['step', place, place === 'current' ? view.state : null], 'data-step': String(i),
        'data-place': place, 'aria-current': place === 'current' ? 'step' : null},
      h('span', {class: 'mark'}, mark), ' ',
      h('span', {class: 'step-index'}, String(i)), ' ',
      h('span', {class: 'step-text'}, stepText(s, plan)),
      place === 'current' && view.message ? h('span', {class: 'muted'}, ` — ${view.message}`) : null,
      ms.length ? h('ul', {class: 'measurements'}, ms.map(measurementLine)) : null);
    }));
    replace(top, head, message, failure);
    replace(rest, timeline,
      background.length ? [h('h3', null, `Background analysis ${plan.background_analysis}`),
        h('ul', {class: 'measurements', id: 'rollout-background'}, background.slice(-MEASUREMENTS_SHOWN).map(measurementLine))] : null,
      checksTable(plan, measurements), eventList(history));
  }

  // checksTable lists every check of the analyses the plan uses with its
  // last measured value against its threshold.
  function checksTable(plan, measurements) {
    const used = [];
    for (const s of plan.steps) if (s.analysis && !used.includes(s.analysis)) used.push(s.analysis);
    if (plan.background_analysis && !used.includes(plan.background_analysis)) used.push(plan.background_analysis);
    const rows = [];
    for (const name of used) {
      const a = (plan.analyses || {})[name];
      if (!a) continue;
      for (const c of a.checks || []) {
        const label = checkLabel(c);
        let last = null, at = null;
        for (const m of measurements) {
          if (m.analysis !== name) continue;
          const r = (m.checks || []).find((x) => x.check === label);
          if (r) { last = r; at = m.at; }
        }
        rows.push(h('tr', {'data-check': `${name}/${label}`, 'data-result': last ? last.result : 'none'},
          h('td', null, name, name === plan.background_analysis ? h('span', {class: 'muted'}, ' (background)') : null),
          h('td', {class: 'check'}, label),
          h('td', {class: 'num', 'data-col': 'value'}, last ? fmtNum(last.value ?? null) : '—'),
          h('td', {'data-col': 'threshold'}, last && last.threshold ? last.threshold : planThreshold(c)),
          h('td', {class: 'num', 'data-col': 'requests'}, last && last.requests !== undefined && last.requests !== null ? String(last.requests) : '—'),
          h('td', {'data-col': 'result'}, last ? pill(`${RESULT_MARK[last.result] || ''} ${last.result}`, RESULT_KIND[last.result] || 'off') : h('span', {class: 'muted'}, 'not measured yet')),
          h('td', {class: 'muted'}, at ? fmtTime(at) : ''),
          h('td', {class: 'reason-cell'}, last && last.message ? last.message : '')));
      }
    }
    if (!rows.length) return null;
    return [h('h3', null, 'Analysis checks'), h('table', {class: 'trace', id: 'rollout-checks'},
      h('thead', null, h('tr', null, ['Analysis', 'Check', 'Last value', 'Threshold', 'Requests', 'Result', 'At', 'Note'].map((t) =>
        h('th', {class: t === 'Last value' || t === 'Requests' ? 'num' : null}, t)))),
      h('tbody', null, rows))];
  }

  // eventList shows the rollout's events: the versions whose reason is a
  // rollout's, newest first.
  function eventList(history) {
    const events = history.filter((it) => typeof it.reason === 'string' && it.reason.startsWith('rollout')).slice(0, EVENTS_SHOWN);
    return [h('h3', null, 'Events'), events.length
      ? h('ol', {class: 'events', id: 'rollout-events'}, events.map((it) => h('li', {'data-version': String(it.version)},
        h('span', {class: 'muted'}, `${fmtTime(it.at)} `), h('strong', null, `v${it.version}`), ' ',
        h('span', null, `by ${it.by || '—'}: `), h('span', {class: 'reason'}, it.reason))))
      : h('p', {class: 'muted', id: 'rollout-events'}, 'No rollout events yet.')];
  }

  function actionBar(view, rule) {
    const bar = h('div', {class: 'actions', id: 'rollout-actions'});
    const add = (action, text, kind, extra) => bar.appendChild(gate.hold(h('button', {type: 'button', class: ['btn', kind], id: `rollout-${action}${extra && extra.full ? '-full' : ''}`,
      'data-write': '', 'data-focus': FOCUS[action], onclick: () => gate.run(() => act(action, rule, extra || {}))}, text)));
    const active = view.state === 'progressing' || view.state === 'paused';
    if (active) add('promote', 'Promote', 'primary');
    if (active) add('promote', 'Promote fully', '', {full: true});
    if (view.state === 'progressing') add('pause', 'Pause', '');
    if (view.state === 'paused') add('resume', 'Resume', 'primary');
    if (active) add('abort', 'Abort', 'danger');
    if (view.state === 'aborted') add('retry', 'Retry from step 0', 'primary');
    return bar;
  }

  // FOCUS pairs the buttons that take each other's place when an action
  // changes the rollout's state: the keyboard focus goes from the pressed
  // one to the other (writeGate).
  const FOCUS = {pause: 'pause-resume', resume: 'pause-resume', abort: 'abort-retry', retry: 'abort-retry'};

  const ASK = {
    promote: (l, full) => full
      ? {title: `Complete the rollout of ${key}?`, message: `${l} goes to the plan's last percent at once, skipping every step left.`, confirm: `Promote ${key} to the end`}
      : {title: `Promote the rollout of ${key}?`, message: `${l} skips its current step (a pause or an analysis) and goes on to the next.`, confirm: `Promote ${key}`, danger: false},
    pause: (l) => ({title: `Pause the rollout of ${key}?`, message: `${l} holds where it is: gray keeps its current share, a timed pause keeps what it has left, an analysis stops.`, confirm: `Pause ${key}`, danger: false}),
    resume: (l) => ({title: `Resume the rollout of ${key}?`, message: `${l} goes on from where it was paused.`, confirm: `Resume ${key}`, danger: false}),
    abort: (l) => ({title: `Abort the rollout of ${key}?`, message: `${l}: gray_percent goes to 0 and the rollout stops; Retry starts it again from step 0.`, confirm: `Abort ${key}`}),
    retry: (l) => ({title: `Retry the rollout of ${key}?`, message: `${l} starts its plan again from step 0.`, confirm: `Retry ${key}`, danger: false}),
  };

  async function act(action, rule, {full = false}) {
    const label = rule.rule_name ? `${key} (${rule.rule_name})` : key;
    if (!await confirmDialog(ASK[action](label, full))) return;
    try {
      const body = {reason: `console: ${action}${full ? ' full' : ''}`};
      if (full) body.full = true;
      const v = await post(`/api/v1/rules/${enc(key)}/rollout/${action}`, body);
      toast(`Rollout of ${key}: ${v.state} at step ${v.step}, gray ${v.percent}%.`, v.state === 'aborted' ? 'warn' : 'ok');
    } catch (ex) {
      toast(writeFailure(action[0].toUpperCase() + action.slice(1), ex), 'bad');
    }
    await onAction();
  }

  return {el, render};
}
