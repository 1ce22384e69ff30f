// DOM helpers. Every string becomes a text node or an attribute value:
// nothing here (or anywhere in the console) parses a string as HTML, and
// the Content-Security-Policy's Trusted Types rule makes sure of it.

const SVG_NS = 'http://www.w3.org/2000/svg';

// append adds children (nodes, strings, arrays of them; null is skipped)
// to el.
export function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.className = Array.isArray(v) ? v.filter(Boolean).join(' ') : v;
    } else if (k === 'value') {
      el.value = v;
    } else if (k === 'checked') {
      el.checked = !!v;
    } else if (k === 'href') {
      // Only the console's own routes are linked.
      el.setAttribute('href', String(v).startsWith('#/') ? v : '#/');
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
}

// h builds an HTML element: h('td', {class: 'num'}, 'text', child, ...).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

// s builds an SVG element.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  append(el, children);
  return el;
}

// replace swaps el's children for the given ones.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// place makes nodes el's children, in order, moving only the ones out of
// place: a node that stays where it was is never detached, so a pointer
// on it keeps its click.
export function place(el, nodes) {
  nodes.forEach((n, i) => {
    if (el.children[i] !== n) el.insertBefore(n, el.children[i] || null);
  });
  while (el.children.length > nodes.length) el.lastElementChild.remove();
}

export function fmtRate(rps) {
  if (rps === 0) return '0/s';
  if (rps < 0.1) return rps.toFixed(3) + '/s';
  if (rps < 10) return rps.toFixed(2) + '/s';
  return Math.round(rps).toLocaleString('en') + '/s';
}

export function fmtPercent(fraction) {
  return (fraction * 100).toFixed(fraction > 0 && fraction < 0.001 ? 2 : 1) + '%';
}

// fmtNum shows a measured value with four significant digits, as the CLI
// does ("0.1028", "5.12", "3.627e-05"); null is a dash.
export function fmtNum(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '—';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a < 1e-4 || a >= 1e9) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

// fmtLift shows a relative change with its sign: +17.92%.
export function fmtLift(fraction) {
  if (fraction === null || fraction === undefined || !Number.isFinite(fraction)) return '—';
  const t = (fraction * 100).toFixed(2) + '%';
  return fraction >= 0 ? '+' + t : t;
}

export function fmtMs(ms) {
  if (ms < 1) return ms.toFixed(3) + ' ms';
  if (ms < 100) return ms.toFixed(1) + ' ms';
  if (ms < 1000) return Math.round(ms) + ' ms';
  return (ms / 1000).toFixed(2) + ' s';
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (isNaN(d.getTime()) || d.getUTCFullYear() < 2) return '—';
  return d.toISOString().replace('T', ' ').slice(0, 19) + 'Z';
}

export function fmtDuration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  const d = Math.floor(seconds / 86400), hr = Math.floor(seconds / 3600) % 24;
  const m = Math.floor(seconds / 60) % 60, sec = seconds % 60;
  const pad = (n) => String(n).padStart(2, '0');
  if (d > 0) return `${d}d ${hr}h ${pad(m)}m`;
  if (hr > 0) return `${hr}h ${pad(m)}m ${pad(sec)}s`;
  if (m > 0) return `${m}m ${pad(sec)}s`;
  return `${sec}s`;
}

// json renders a value compactly for display.
export function json(v) {
  return JSON.stringify(v);
}

// sparkline draws counts as a small line chart.
export function sparkline(counts, {width = 96, height = 22} = {}) {
  const svg = s('svg', {width, height, viewBox: `0 0 ${width} ${height}`, class: 'spark', 'aria-hidden': 'true'});
  if (!counts || counts.length < 2) return svg;
  const top = Math.max(1, ...counts);
  const step = width / (counts.length - 1);
  const pts = counts.map((c, i) => `${(i * step).toFixed(1)},${(height - 1 - (c / top) * (height - 3)).toFixed(1)}`);
  svg.appendChild(s('polyline', {points: pts.join(' '), fill: 'none', 'stroke-width': 1.5, class: 'spark-line'}));
  return svg;
}

// pill is a small colored label.
export function pill(text, kind) {
  return h('span', {class: ['pill', kind]}, text);
}

// confirmDialog asks before a dangerous action. It resolves true only when
// the operator presses the confirm button; Escape or Cancel resolve false.
export function confirmDialog({title, message, confirm, danger = true}) {
  return new Promise((resolve) => {
    const ok = h('button', {type: 'button', class: ['btn', danger ? 'danger' : 'primary'], 'data-confirm': ''}, confirm);
    const cancel = h('button', {type: 'button', class: 'btn', 'data-cancel': ''}, 'Cancel');
    // The title names the dialog and the message describes it, so a
    // screen reader reads both when it opens on Cancel.
    const dlg = h('dialog', {class: 'confirm', 'aria-labelledby': 'confirm-title', 'aria-describedby': 'confirm-message'},
      h('h2', {id: 'confirm-title'}, title),
      h('p', {class: 'confirm-message', id: 'confirm-message'}, message),
      h('div', {class: 'actions'}, cancel, ok));
    let answered = false;
    const done = (v) => {
      if (answered) return;
      answered = true;
      dlg.close();
      dlg.remove();
      resolve(v);
    };
    ok.addEventListener('click', () => done(true));
    cancel.addEventListener('click', () => done(false));
    dlg.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
    document.body.appendChild(dlg);
    dlg.showModal();
    cancel.focus();
  });
}

// toast shows a short message at the bottom of the screen. A 'bad' one
// (a change that failed, or may not have been applied) stays until it is
// dismissed, and is an alert, which a screen reader reads out at once:
// it says something the operator must not miss. The others are read when
// the reader is idle. Both live regions are in the page from its start
// (index.html), as a region must be for what is added to it to be read.
export function toast(text, kind = 'ok') {
  const bad = kind === 'bad';
  const id = bad ? 'toasts-alert' : 'toasts-status';
  let box = document.getElementById(id);
  if (!box) {
    let outer = document.getElementById('toasts');
    if (!outer) {
      outer = h('div', {id: 'toasts'});
      document.body.appendChild(outer);
    }
    box = h('div', bad ? {id, role: 'alert'} : {id, role: 'status', 'aria-live': 'polite'});
    outer.appendChild(box);
  }
  const t = h('div', {class: ['toast', kind]}, text);
  if (bad) {
    t.appendChild(h('button', {type: 'button', class: ['btn', 'small', 'ghost', 'dismiss'], title: 'dismiss', 'aria-label': 'dismiss', onclick: () => t.remove()}, '×'));
  } else {
    setTimeout(() => t.remove(), 6000);
  }
  box.appendChild(t);
}

// serial wraps an async refresh so that one runs at a time: a call while
// one runs makes it run once more when it ends (what is shown is then
// never older than the call), instead of a second request beside one the
// API has not answered (hung requests would take the browser's few
// connections to the admin API from the operator's next change). The
// refresh handles its own errors.
export function serial(refresh) {
  let running = null, again = false;
  return () => {
    if (running) { again = true; return running; }
    running = (async () => {
      try {
        do { again = false; await refresh(); } while (again);
      } finally {
        running = null;
      }
    })();
    return running;
  };
}

// focusMark notes which element under scope has the keyboard focus, so
// that restore can give it back after the page was drawn again around it
// (or after disabling it took the focus away). restore gives the focus,
// unless something else has it by then, to the same element if it is
// still in the page and enabled, else to the element standing for it: the
// one with the same id, or else the same data-focus (a pair of buttons
// that take each other's place, such as Rollback and Resume, share one).
// give(el) gives the focus to el instead, on the same terms.
export function focusMark(scope) {
  const was = document.activeElement;
  if (!was || was === document.body || !scope.contains(was)) return {restore() {}, give() {}};
  const key = was.dataset.focus || '';
  const id = was.id;
  const lost = () => !document.activeElement || document.activeElement === document.body;
  return {
    restore() {
      if (!lost()) return;
      const usable = (el) => el && scope.contains(el) && !el.disabled;
      let next = was.isConnected ? was : null;
      if (!usable(next) && id) next = document.getElementById(id);
      if (!usable(next) && key) next = scope.querySelector(`[data-focus="${CSS.escape(key)}"]`);
      if (usable(next)) next.focus({preventScroll: true});
    },
    give(el) {
      if (lost() && el.isConnected && !el.disabled) el.focus({preventScroll: true});
    },
  };
}

// writeGate lets one change of a screen run at a time, so that a second
// press of a button (or of another write button) while a change is out
// sends nothing. While one runs, the write buttons under scope are
// disabled and aria-busy; a write button drawn meanwhile should be passed
// to hold. When the change ends, however it ends, they work again, and
// the keyboard focus goes back to the pressed button or the one that now
// stands in its place (focusMark): fn should draw what the change altered
// before it resolves.
export function writeGate(scope) {
  let busy = false;
  const hold = (btn) => {
    if (!busy || !btn || btn.disabled) return btn;
    btn.disabled = true;
    btn.setAttribute('aria-busy', 'true');
    btn.dataset.held = '';
    return btn;
  };
  return {
    get busy() { return busy; },
    hold,
    // run calls fn (an async function) unless a change is out already.
    async run(fn) {
      if (busy) return;
      busy = true;
      const mark = focusMark(scope);
      for (const btn of scope.querySelectorAll('button[data-write]')) hold(btn);
      try {
        await fn();
      } finally {
        busy = false;
        for (const btn of scope.querySelectorAll('button[data-held]')) {
          btn.disabled = false;
          btn.removeAttribute('aria-busy');
          delete btn.dataset.held;
        }
        mark.restore();
      }
    },
  };
}
