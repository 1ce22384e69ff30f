// The admin API client. The token is kept in sessionStorage (gone when the
// tab closes) and sent only as an Authorization header: never in a cookie,
// so no other site can make the browser use it, and never in a URL.

const TOKEN_KEY = 'graygate.token';

export function getToken() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) { sessionStorage.setItem(TOKEN_KEY, t); }
export function clearToken() { sessionStorage.removeItem(TOKEN_KEY); }

// TIMEOUT_MS bounds every request: one without a complete answer by then
// (an admin API that accepts the request and never answers, or stops
// half way) is given up, so that no screen waits for ever and no button
// stays disabled. README "Operator console" names it.
export const TIMEOUT_MS = 10000;

// APIError is a non-2xx answer: status, the server's message and the
// per-field details ({path, message}) of a 400. An answer that is not the
// admin API's JSON (a load balancer's HTML error page, say) has a null
// body; its message names the request, the status and the gist of what
// came back instead.
export class APIError extends Error {
  constructor(status, body, message) {
    super(message || (body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
    this.details = (body && Array.isArray(body.details)) ? body.details : [];
  }
}

// NoAnswer is a request that got no complete answer: it timed out, the
// connection failed, or it closed before the answer was complete. For a
// change this means the gateway may or may not have applied it.
export class NoAnswer extends Error {
  constructor(message, timedOut) {
    super(message);
    this.timedOut = timedOut;
  }
}

// uncertain says whether a failed change may still have been applied: no
// complete answer came, or a 5xx did (which a proxy in front of the
// gateway may send after the gateway applied it).
export function uncertain(ex) {
  return !(ex instanceof APIError) || ex.status >= 500;
}

// writeFailure is what a screen says when a change failed: the API's
// answer, and, when that answer leaves it open, that the change may or
// may not have been applied.
export function writeFailure(what, ex) {
  const msg = `${what} failed: ${ex.message}`;
  return uncertain(ex) ? `${msg}. The change may or may not have been applied: reload to check.` : msg;
}

// gist is the readable text of an answer that is not JSON, short: an
// HTML error page's words without its tags.
function gist(text) {
  const t = text.replace(/<(script|style)[^>]*>[\s\S]*?<\/\1>/gi, ' ').replace(/<!--[\s\S]*?-->/g, ' ')
    .replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim();
  return t.length > 120 ? t.slice(0, 119) + '…' : t;
}

let onUnauthorized = () => {};
// setUnauthorizedHandler is called when the server refuses the token.
export function setUnauthorizedHandler(f) { onUnauthorized = f; }

let onForbidden = () => {};
// setForbiddenHandler is called when the server refuses a request (403):
// the token's role may have been lowered by a config reload since login,
// to a viewer (which may not change rules) or to events (which may not
// read them either).
export function setForbiddenHandler(f) { onForbidden = f; }

// request calls the admin API and returns {status, data, headers}; a
// non-2xx answer, or a 2xx that is not JSON, throws an APIError, and no
// complete answer within TIMEOUT_MS (or a failed connection) a NoAnswer.
// quiet is for a caller that handles a refused token (401, 403) itself.
export async function request(method, path, {body, headers = {}, quiet = false} = {}) {
  const h = {Accept: 'application/json', Authorization: 'Bearer ' + getToken(), ...headers};
  const ctl = new AbortController();
  const init = {method, headers: h, credentials: 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer', signal: ctl.signal};
  if (body !== undefined) {
    h['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const what = `${method} ${path.split('?')[0]}`;
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  let resp, text;
  try {
    resp = await fetch(path, init);
    text = await resp.text();
  } catch (ex) {
    if (ctl.signal.aborted) throw new NoAnswer(`${what}: no answer within ${TIMEOUT_MS / 1000} s`, true);
    throw new NoAnswer(`${what}: the connection failed or closed before a complete answer (${ex.message})`, false);
  } finally {
    clearTimeout(timer);
  }
  let data = null, raw = false;
  if (text) {
    try { data = JSON.parse(text); } catch { raw = true; }
  }
  const status = `HTTP ${resp.status}${resp.statusText ? ' ' + resp.statusText : ''}`;
  if (resp.status === 401 && !quiet) onUnauthorized(data && data.error);
  if (resp.status === 403 && !quiet) onForbidden(data && data.error);
  if (raw) {
    throw new APIError(resp.status, null, `${what}: ${status}, not JSON from the admin API${text.trim() ? `: “${gist(text)}”` : ''}`);
  }
  if (!resp.ok) {
    // The API's own message is enough for a refusal (4xx); a 5xx also
    // names the request that failed.
    const msg = (data && data.error) || status;
    throw new APIError(resp.status, data, resp.status >= 500 ? `${what}: ${status}: ${msg}` : msg);
  }
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
