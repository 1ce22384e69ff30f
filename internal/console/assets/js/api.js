// The admin API client. The token is kept in sessionStorage (gone when the
// tab closes) and sent only as an Authorization header: never in a cookie,
// so no other site can make the browser use it, and never in a URL.

const TOKEN_KEY = 'graygate.token';

export function getToken() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) { sessionStorage.setItem(TOKEN_KEY, t); }
export function clearToken() { sessionStorage.removeItem(TOKEN_KEY); }

// APIError is a non-2xx answer: status, the server's message and the
// per-field details ({path, message}) of a 400.
export class APIError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
    this.details = (body && Array.isArray(body.details)) ? body.details : [];
  }
}

let onUnauthorized = () => {};
// setUnauthorizedHandler is called when the server refuses the token.
export function setUnauthorizedHandler(f) { onUnauthorized = f; }

let onForbidden = () => {};
// setForbiddenHandler is called when the server refuses a change (403):
// the token's role may have been lowered by a config reload since login.
export function setForbiddenHandler(f) { onForbidden = f; }

// request calls the admin API and returns {status, data, headers}; a
// non-2xx answer throws an APIError.
export async function request(method, path, {body, headers = {}, quiet401 = false} = {}) {
  const h = {Accept: 'application/json', Authorization: 'Bearer ' + getToken(), ...headers};
  const init = {method, headers: h, credentials: 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer'};
  if (body !== undefined) {
    h['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  let data = null;
  const text = await resp.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = {error: text.trim()}; }
  }
  if (resp.status === 401 && !quiet401) onUnauthorized(data && data.error);
  if (resp.status === 403 && method !== 'GET') onForbidden(data && data.error);
  if (!resp.ok) throw new APIError(resp.status, data);
  return {status: resp.status, data, headers: resp.headers};
}

export async function get(path) { return (await request('GET', path)).data; }
export async function post(path, body) { return (await request('POST', path, {body: body || {}})).data; }

// probe asks whether an optional API exists: it resolves to the JSON of a
// 200, or null when the endpoint is not there (this gateway predates it)
// or has nothing for this subject. Any other failure also resolves null,
// so a missing feature never shows as a broken screen.
export async function probe(path) {
  try {
    return await get(path);
  } catch {
    return null;
  }
}

// look asks for an optional API of one subject and says what came back:
// {state: 'ok', data} for a 2xx, {state: 'absent'} for a 404 (this
// gateway has no such API, or it has nothing for this subject: a rule
// without a rollout or a mirror), and {state: 'error', message} for
// anything else, so that a screen can hide what is absent and say what
// failed without breaking.
export async function look(path) {
  try {
    return {state: 'ok', data: await get(path)};
  } catch (ex) {
    if (ex instanceof APIError && ex.status === 404) return {state: 'absent'};
    return {state: 'error', message: ex.message};
  }
}

export function enc(key) { return encodeURIComponent(key); }
