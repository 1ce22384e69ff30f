// The console's shell: login, the header, and a hash router over the
// screens. Routes: #/ (overview), #/rules/{key}, #/explain, #/status.
import {h, replace} from './dom.js';
import {APIError, clearToken, getToken, request, setForbiddenHandler, setToken, setUnauthorizedHandler} from './api.js';
import {overview} from './overview.js';
import {rulePage} from './rule.js';
import {explain} from './explain.js';
import {status} from './status.js';

const app = document.getElementById('app');
let session = null; // {name, role, canWrite}
let current = null; // the mounted screen: {dispose}
let loginNotice = '';
let roleNotice = ''; // why the write controls went away while logged in

function route() {
  const hash = location.hash || '#/';
  const m = hash.match(/^#\/rules\/(.+)$/);
  if (m) {
    let key = m[1];
    try { key = decodeURIComponent(key); } catch { /* keep it as it is */ }
    return {name: 'rule', key};
  }
  if (hash === '#/explain') return {name: 'explain'};
  if (hash === '#/status') return {name: 'status'};
  return {name: 'overview'};
}

function unmount() {
  if (current && current.dispose) current.dispose();
  current = null;
}

function logout(notice) {
  unmount();
  clearToken();
  session = null;
  roleNotice = '';
  loginNotice = notice || '';
  showLogin();
}

function showLogin() {
  const input = h('input', {type: 'password', id: 'token', name: 'token', autocomplete: 'off', required: true, spellcheck: 'false'});
  const err = h('p', {class: 'error', id: 'login-error', role: 'alert'}, loginNotice);
  const button = h('button', {type: 'submit', class: ['btn', 'primary'], id: 'login-submit'}, 'Log in');
  const form = h('form', {class: 'login', id: 'login-form', autocomplete: 'off'},
    h('h1', null, 'graygate'),
    h('p', {class: 'muted'}, 'Operator console. Log in with an admin API token: an admin token may change rules, a viewer token only looks.'),
    h('label', {for: 'token'}, 'Admin API token'),
    input, err, button);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const tok = input.value.trim();
    if (!tok) return;
    button.disabled = true;
    setToken(tok);
    try {
      await whoami();
      loginNotice = '';
      render();
    } catch (ex) {
      clearToken();
      err.textContent = refusal(ex);
      button.disabled = false;
      input.select();
    }
  });
  replace(app, h('main', {class: 'login-wrap'}, form));
  input.focus();
}

// refusal says why a login failed, with the API's own reason: a token it
// does not know, a gateway started without any admin token, or a token
// whose role may not read the API (an events token).
function refusal(ex) {
  if (!(ex instanceof APIError)) return `Could not reach the admin API: ${ex.message}`;
  const why = ex.body && ex.body.error ? `: ${ex.body.error}` : '';
  if (ex.status === 401) return `That token was refused (HTTP 401${why}). Check it and try again.`;
  if (ex.status === 403) return `That token may not use the console (HTTP 403${why}). Log in with an admin or a viewer token.`;
  return `The admin API could not answer: ${ex.message}.`;
}

async function whoami() {
  const {data} = await request('GET', '/api/v1/whoami', {quiet: true});
  session = {name: data.name, role: data.role, canWrite: data.role === 'admin'};
}

function header(r) {
  const link = (href, text, active) => h('a', {href, class: active ? 'active' : null}, text);
  const logoutBtn = h('button', {type: 'button', class: ['btn', 'ghost'], id: 'logout'}, 'Log out');
  logoutBtn.addEventListener('click', () => logout(''));
  return h('header', {class: 'top'},
    h('a', {href: '#/', class: 'brand'}, 'graygate'),
    h('nav', null,
      link('#/', 'Overview', r.name === 'overview' || r.name === 'rule'),
      link('#/explain', 'Explain', r.name === 'explain'),
      link('#/status', 'Status', r.name === 'status')),
    h('div', {class: 'who'},
      h('span', {id: 'whoami', 'data-role': session.role}, `${session.name} · ${session.role}`),
      logoutBtn));
}

// roleChanged asks the API again who the token is, after it refused a
// request: a config reload may have lowered the token's role since login,
// to a viewer (the console then shows the screen again without the write
// controls, and says why, instead of offering buttons the API refuses),
// or to one that may not read the API at all (events: back to the login,
// with the reason, and the token is forgotten). Several refusals at once
// ask once.
let asking = false;
async function roleChanged() {
  if (!session || asking) return;
  const before = session.role;
  asking = true;
  try {
    await whoami();
  } catch (ex) {
    if (ex instanceof APIError && (ex.status === 401 || ex.status === 403)) logout(refusal(ex));
    return;
  } finally {
    asking = false;
  }
  if (!session) return;
  if (session.role === before) return;
  roleNotice = session.canWrite ? '' :
    `Your token's role is now ${session.role} (it was ${before}): the gateway no longer lets it change rules, so the console shows them read-only.`;
  render();
}

async function render() {
  unmount();
  if (!getToken()) { showLogin(); return; }
  if (!session) {
    replace(app, h('main', {class: 'page'}, h('p', {class: 'muted', id: 'connecting'}, 'Connecting to the admin API…')));
    try {
      await whoami();
    } catch (ex) {
      if (ex instanceof APIError && (ex.status === 401 || ex.status === 403)) { logout(refusal(ex)); return; }
      // Not a verdict on the token: the API did not answer. Offer to try
      // again, or to log in with another token.
      const again = h('button', {type: 'button', class: ['btn', 'primary'], id: 'connect-retry', onclick: render}, 'Try again');
      const out = h('button', {type: 'button', class: 'btn', id: 'connect-logout', onclick: () => logout('')}, 'Log out');
      replace(app, h('main', {class: 'page'},
        h('p', {class: 'error', id: 'connect-error', role: 'alert'}, `Could not reach the admin API: ${ex.message}.`),
        h('div', {class: 'actions'}, again, out)));
      return;
    }
  }
  const r = route();
  // main can take the keyboard focus (not Tab's): a page drawn anew
  // takes the focused link or button away with the old one.
  const main = h('main', {class: 'page', id: 'main', tabindex: '-1'});
  replace(app, header(r), h('p', {class: ['error', 'role-notice'], id: 'role-notice', role: 'alert'}, roleNotice), main);
  const ctx = {session, main};
  switch (r.name) {
    case 'rule': current = rulePage(ctx, r.key); break;
    case 'explain': current = explain(ctx); break;
    case 'status': current = status(ctx); break;
    default: current = overview(ctx);
  }
  // A page that gave the focus to nothing of its own (explain gives it to
  // its first field) has it on main, so the next Tab goes to the page's
  // first control, not to the top of the document.
  if (!document.activeElement || document.activeElement === document.body) main.focus({preventScroll: true});
}

setUnauthorizedHandler(() => { if (session) logout('Your token was refused; log in again.'); });
setForbiddenHandler(roleChanged);
window.addEventListener('hashchange', render);
render();
