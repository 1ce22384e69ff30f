// The experiment results of an ab rule's page, from GET
// /api/v1/experiments/{key}/results: the groups and their units, a table
// per metric of each group's units and mean with its lift over the
// control group, the lift's 95% interval, the p-value and whether the
// difference is significant; and a health card for the split (sample
// ratio mismatch).
import {fmtLift, fmtNum, fmtPercent, h, pill, replace} from './dom.js';
import {enc, look} from './api.js';

// ALPHA is the significance level of the 95% intervals the API reports.
const ALPHA = 0.05;

export function loadResults(key) {
  return look(`/api/v1/experiments/${enc(key)}/results`);
}

// metricNames lists the metrics in the order the API compares them, then
// any only the groups carry.
function metricNames(res) {
  const names = [];
  for (const c of res.comparisons || []) if (!names.includes(c.metric)) names.push(c.metric);
  for (const g of res.groups || []) for (const m of Object.keys(g.metrics || {})) if (!names.includes(m)) names.push(m);
  return names;
}

// significance marks one comparison: significant up or down when its
// p-value is below ALPHA, else not significant; without a p-value it
// says why.
function significance(c) {
  if (!c || c.p_value === null || c.p_value === undefined) {
    return h('span', {class: 'muted', 'data-significant': 'unknown'}, c && c.reason ? c.reason : 'not enough data');
  }
  if (c.p_value < ALPHA) {
    const up = (c.lift ?? c.abs_diff ?? 0) >= 0;
    const p = pill(up ? 'significant ↑' : 'significant ↓', up ? 'ok' : 'bad');
    p.setAttribute('data-significant', 'yes');
    return p;
  }
  return h('span', {class: 'muted', 'data-significant': 'no'}, 'not significant');
}

function metricTable(res, name) {
  const rows = (res.groups || []).map((g) => {
    const m = (g.metrics || {})[name];
    const c = (res.comparisons || []).find((x) => x.group === g.name && x.metric === name);
    const control = g.name === res.control;
    return h('tr', {'data-group': g.name, class: control ? 'control' : null},
      h('td', {class: 'group'}, g.name, control ? h('span', {class: 'muted'}, ' (control)') : null),
      h('td', {class: 'num', 'data-col': 'units'}, String(m ? m.units : g.units)),
      h('td', {class: 'num', 'data-col': 'mean'}, m ? fmtNum(m.mean) : '—'),
      h('td', {class: 'num', 'data-col': 'lift'}, control ? h('span', {class: 'muted'}, 'baseline') : fmtLift(c ? c.lift : null)),
      h('td', {class: 'num', 'data-col': 'ci'}, !control && c && c.ci95 ? `[${fmtLift(c.ci95[0])}, ${fmtLift(c.ci95[1])}]` : ''),
      h('td', {class: 'num', 'data-col': 'p'}, !control && c ? fmtNum(c.p_value) : ''),
      h('td', {'data-col': 'significance'}, control ? '' : significance(c)));
  });
  const type = ((res.groups || []).map((g) => (g.metrics || {})[name]).find(Boolean) || {}).type;
  return h('div', {class: 'metric'},
    h('h3', null, name, type ? h('span', {class: 'muted'}, ` · ${type}`) : null),
    h('table', {class: ['trace', 'exp-metric'], 'data-metric': name},
      h('thead', null, h('tr', null, h('th', null, 'Group'), ['Units', 'Mean', 'Lift', '95% CI', 'p-value'].map((t) => h('th', {class: 'num'}, t)), h('th'))),
      h('tbody', null, rows)));
}

// srmCard says whether the split is healthy: the units of each group
// against its weight, and the chi-square test's p-value once every group
// has enough units to judge it.
function srmCard(res) {
  const srm = res.srm || {};
  const groups = res.groups || [];
  const total = groups.reduce((n, g) => n + (g.units || 0), 0);
  const state = !srm.judged ? 'unjudged' : srm.ok ? 'ok' : 'mismatch';
  const head = {
    unjudged: [pill('not judged yet', 'off'), ` ${srm.reason || 'too few units in some group to judge the split'}`],
    ok: [pill('✓ split healthy', 'ok'), ` p = ${fmtNum(srm.p_value)} ≥ ${srm.threshold}`],
    mismatch: [pill('✖ sample ratio mismatch', 'bad'), ` p = ${fmtNum(srm.p_value)} < ${srm.threshold}: the groups did not get the shares their weights ask for, so the results cannot be trusted`],
  }[state];
  const chi = srm.judged && srm.chi2 !== null && srm.chi2 !== undefined ? h('span', {class: 'muted'}, ` (χ² = ${fmtNum(srm.chi2)}, df ${srm.df}; sequential p = ${fmtNum(srm.sequential_p_value)})`) : null;
  return h('div', {class: ['srm', state], id: 'srm', 'data-srm': state},
    h('h3', null, 'Sample ratio'),
    h('p', {id: 'srm-verdict'}, head, chi),
    h('ul', {class: 'srm-groups', id: 'srm-groups'}, groups.map((g) => h('li', {'data-group': g.name},
      h('strong', null, g.name), ` ${g.units} unit(s)`,
      h('span', {class: 'muted'}, ` · ${total ? fmtPercent(g.units / total) : '—'} of units, weight ${g.weight}%`)))));
}

// experimentPanel renders an ab rule's results.
export function experimentPanel() {
  const content = h('div');
  const el = h('section', {class: ['card', 'experiment'], id: 'experiment'}, content);
  function render(res) {
    replace(content, draw(res));
  }
  function draw(res) {
    const metrics = metricNames(res);
    const about = `experiment ${res.experiment} · rule version ${res.rule_version} · control ${res.control} · ` +
      `${res.sequential ? 'always-valid (sequential) intervals' : 'fixed-horizon Welch t-tests'} · store ${res.store} · conversion window ${res.conversion_window}`;
    return [
      h('h2', null, 'Experiment results'),
      h('p', {class: 'muted', id: 'experiment-about'}, about),
      res.rolled_back ? h('p', {class: 'error'}, 'The rule is rolled back (or frozen): nobody new is exposed, everyone goes to control.') : null,
      srmCard(res),
      metrics.length ? metrics.map((m) => metricTable(res, m))
        : h('p', {class: 'muted', id: 'experiment-no-metrics'}, 'This rule declares no metrics: add "metrics" to it to measure conversions.')];
  }
  return {el, render};
}
