// The shadow-traffic diff of a rule with a mirror, from GET
// /api/v1/rules/{key}/diff: how many copies went to the candidate, how
// many of its answers were compared with the primary's, and every field
// that differed with its raw rate (candidate vs primary), its noise rate
// (a second stable instance vs primary) and whether that is a regression;
// examples are shown as text.
import {fmtPercent, h, pill, replace} from './dom.js';
import {enc, look} from './api.js';

export function loadDiff(key) {
  return look(`/api/v1/rules/${enc(key)}/diff`);
}

export function mirrorPanel() {
  const content = h('div');
  const el = h('section', {class: ['card', 'mirror'], id: 'mirror-diff'}, content);
  function render(d) {
    replace(content, draw(d));
  }
  function draw(d) {
    const counts = [
      ['requests', 'requests', d.requests], ['compared', 'compared', d.compared], ['status_mismatch', 'status mismatches', d.status_mismatch],
      ['failed', 'failed', d.failed], ['dropped', 'dropped', d.dropped]];
    if (d.secondary) counts.push(['noise_compared', 'noise compared', d.noise_compared], ['secondary_failed', 'secondary failed', d.secondary_failed]);
    if (d.untracked_differences) counts.push(['untracked_differences', 'untracked differences', d.untracked_differences]);
    const th = d.thresholds || {};
    const fields = d.fields || [];
    return [
      h('h2', null, 'Shadow traffic diff'),
      h('p', {class: 'muted', id: 'mirror-about'}, `mirrors to ${d.target}` + (d.secondary ? `, noise from ${d.secondary}` : ', no secondary (noise is 0)') +
        (d.ignore && d.ignore.length ? ` · ignoring ${d.ignore.join(', ')}` : '')),
      h('dl', {class: 'counts', id: 'mirror-counts'}, counts.map(([k, label, v]) => h('div', {'data-count': k},
        h('dt', null, label), h('dd', null, String(v ?? 0))))),
      !d.diff ? h('p', {class: 'muted'}, 'Answers are not compared: the mirror has no "diff".')
        : [h('p', {class: 'muted small'}, `A field is a regression when raw − noise > ${fmtPercent(th.absolute ?? 0)} and (raw − noise)/(raw + noise) > ${fmtPercent(th.relative ?? 0)}, after ${th.min_compared ?? 0} compared answers.`),
          fields.length ? h('table', {class: 'trace', id: 'mirror-fields'},
            h('thead', null, h('tr', null, ['Path', 'Raw', 'Noise', 'Regression', 'Examples'].map((t) => h('th', {class: t === 'Raw' || t === 'Noise' ? 'num' : null}, t)))),
            h('tbody', null, fields.map((f) => h('tr', {'data-path': f.path, 'data-regression': String(!!f.regression), class: f.regression ? 'regression' : null},
              h('td', {class: 'path'}, f.path),
              h('td', {class: 'num', 'data-col': 'raw'}, `${fmtPercent(f.raw_rate)} (${f.raw})`),
              h('td', {class: 'num', 'data-col': 'noise'}, `${fmtPercent(f.noise_rate)} (${f.noise})`),
              h('td', {'data-col': 'regression'}, f.regression ? pill('regression', 'bad') : h('span', {class: 'muted'}, 'no')),
              h('td', {'data-col': 'examples'}, h('ul', {class: 'examples'}, (f.examples || []).map((x) =>
                h('li', null, h('span', {class: 'muted'}, `${x.request}: `), `${x.primary} → ${x.candidate}`))))))))
            : h('p', {class: 'muted', id: 'mirror-fields'}, d.compared ? 'No field differed.' : 'No answer compared yet.')],
    ];
  }
  return {el, render};
}
