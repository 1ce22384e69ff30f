// gen.js writes cases.json: HTTP/1.1 request byte strings, each with how
// llhttp in strict mode (Node.js's own HTTP parser, the one its http
// server uses) reads it. TestHTTP1AgainstLLHTTP sends each through the
// gateway's real listener and checks that the gateway forwards nothing
// llhttp refuses, and frames whatever it forwards as llhttp does.
//
// Run once, with any Node.js that has process.binding('http_parser'):
//
//	node internal/proxy/testdata/llhttp-diff/gen.js > internal/proxy/testdata/llhttp-diff/cases.json
//
// The output depends only on the seed below, the vector files it starts
// from, and the llhttp version (recorded in the file). CI does not run it.
//
// The cases are mutations of the transcribed vectors in ../http1 (the
// request bytes only; no parser code) and of a few plain requests: a byte
// inserted, replaced or deleted, a framing header line added, a chunk size
// line rewritten, a line duplicated, a version or method changed; a
// quarter of them have a second request after the first, pipelined. Each
// is given to llhttp in one execute call, as the gateway's test writes it
// in one write, then finish(). Kept are the ones llhttp either refuses or reads to the end
// as whole messages; ones it leaves mid-message (a server would wait for
// more), ones with an upgrade or CONNECT (what follows is a tunnel, not
// requests) and duplicates are not.
'use strict';
const fs = require('fs');
const path = require('path');
const { HTTPParser, methods } = process.binding('http_parser');

// The committed file uses these defaults; GEN_SEED, GEN_REFUSED and
// GEN_ACCEPTED override them for a larger local search (whose cases are
// not committed: copy one in place of cases.json to run the test on it).
const SEED = Number(process.env.GEN_SEED || 20261206);
const WANT_REFUSED = Number(process.env.GEN_REFUSED || 1250);
const WANT_ACCEPTED = Number(process.env.GEN_ACCEPTED || 750);
const MAX_LEN = 4096;
const MAX_HEADER = 16384; // the gateway's proxy.max_header_bytes default

// mulberry32: a small deterministic PRNG.
let state = SEED >>> 0;
function rand() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const below = (n) => Math.floor(rand() * n);

// Seeds: every vector of ../http1 without a repeat, and some plain requests.
const seeds = [];
const vdir = path.join(__dirname, '..', 'http1');
for (const f of fs.readdirSync(vdir).filter((n) => n.endsWith('.json')).sort()) {
  const v = JSON.parse(fs.readFileSync(path.join(vdir, f), 'latin1'));
  for (const c of v.cases) {
    if (!c.repeat) seeds.push({ from: `${f}: ${c.name}`, raw: Buffer.from(c.raw, 'latin1') });
  }
}
const plain = [
  'GET /a?b=c HTTP/1.1\r\nHost: a\r\nX-User-Id: 42\r\nAccept: */*\r\n\r\n',
  'POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello',
  'POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  'POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n',
  'GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n',
  'POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.1\r\nHost: a\r\n\r\n',
  'GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n',
  'PUT /u HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi',
  'HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n',
  'OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n',
];
for (const [i, r] of plain.entries()) seeds.push({ from: `plain ${i}`, raw: Buffer.from(r, 'latin1') });

const BYTES = [0x00, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0x22, 0x23, 0x25, 0x2b, 0x2c, 0x2d, 0x2f,
  0x30, 0x31, 0x3a, 0x3b, 0x3d, 0x3f, 0x5c, 0x5f, 0x61, 0x66, 0x78, 0x7f, 0x80, 0xff];
const LINES = [
  'Transfer-Encoding: chunked', 'Transfer-Encoding : chunked', 'Transfer-Encoding:\tchunked',
  'Transfer-Encoding: chunked, chunked', 'Transfer-Encoding: identity', 'Transfer-Encoding: xchunked',
  'transfer-encoding: CHUNKED', 'Transfer-Encoding: gzip, chunked', 'Transfer_Encoding: chunked',
  'Content-Length: 0', 'Content-Length: 3', 'Content-Length: 03', 'Content-Length: +3',
  'Content-Length: 3, 3', 'Content-Length: 3 3', 'Content-Length:3', 'Content-Length: 1e1',
  'Content-Length: -1', 'Content_Length: 3', 'Host: b', 'Host: a:80', 'Host:', 'Expect: 100-continue',
  'Expect: 100-continuee', 'Connection: close', 'Connection: keep-alive', 'Connection: TE, close',
  ' X-Fold: 1', '\tX-Fold: 1', 'X-A: 1\r\n continued', 'X-Empty:', ': no-name', 'X-Space : 1',
];
const CHUNK_SIZES = ['3', '03', '0x3', '3 ', ' 3', '3;e', '3;e=1', '3;e="q"', '3 ;e', '3\t', '-3', '+3',
  '3;', '3;e=', '3;e="a\\"b"', '0003', '3\n', '3\r', 'G'];

const VERSIONS = ['HTTP/1.0', 'HTTP/1.1', 'HTTP/1.2', 'HTTP/2.0', 'HTTP/0.9', 'http/1.1', 'HTTP/1.1 ', 'HTTP/11'];
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'TRACE', 'QUERY', 'PROPFIND', 'get', 'GE T'];

// mutate applies one random change to b and says what it did.
function mutate(b) {
  const k = below(9);
  const at = below(b.length + 1);
  switch (k) {
    case 0: { // insert a byte
      const x = pick(BYTES);
      return [Buffer.concat([b.subarray(0, at), Buffer.from([x]), b.subarray(at)]), `insert 0x${x.toString(16)} at ${at}`];
    }
    case 1: { // replace a byte
      if (b.length === 0) return [b, 'none'];
      const i = Math.min(at, b.length - 1);
      const x = pick(BYTES);
      const c = Buffer.from(b);
      c[i] = x;
      return [c, `replace byte ${i} with 0x${x.toString(16)}`];
    }
    case 2: { // delete a byte
      if (b.length === 0) return [b, 'none'];
      const i = Math.min(at, b.length - 1);
      return [Buffer.concat([b.subarray(0, i), b.subarray(i + 1)]), `delete byte ${i}`];
    }
    case 3: case 4: { // add a header line after a line of the first head
      const headEnd = b.indexOf('\r\n\r\n');
      const end = headEnd < 0 ? b.length : headEnd;
      const ends = [];
      for (let i = b.indexOf('\r\n'); i >= 0 && i <= end; i = b.indexOf('\r\n', i + 1)) ends.push(i);
      if (ends.length === 0) return [b, 'none'];
      const i = pick(ends);
      const line = pick(LINES);
      return [Buffer.concat([b.subarray(0, i + 2), Buffer.from(line + '\r\n', 'latin1'), b.subarray(i + 2)]), `add line ${JSON.stringify(line)} after byte ${i}`];
    }
    case 5: { // rewrite a chunk size line "N\r\n" after the head
      const headEnd = b.indexOf('\r\n\r\n');
      if (headEnd < 0) return [b, 'none'];
      const m = /\r\n([0-9a-fA-F]+)\r\n/g;
      const s = b.toString('latin1');
      m.lastIndex = headEnd + 2;
      const found = [];
      let r;
      while ((r = m.exec(s)) !== null) { found.push(r); m.lastIndex = r.index + 2; }
      if (found.length === 0) return [b, 'none'];
      const f = pick(found);
      const size = pick(CHUNK_SIZES);
      const start = f.index + 2;
      return [Buffer.concat([b.subarray(0, start), Buffer.from(size, 'latin1'), b.subarray(start + f[1].length)]), `chunk size ${JSON.stringify(f[1])} at ${start} becomes ${JSON.stringify(size)}`];
    }
    case 7: { // change the version of a request line
      const s = b.toString('latin1');
      const re = /HTTP\/[0-9.]+\r\n/g;
      const found = [...s.matchAll(re)];
      if (found.length === 0) return [b, 'none'];
      const f = pick(found);
      const v = pick(VERSIONS);
      return [Buffer.from(s.slice(0, f.index) + v + '\r\n' + s.slice(f.index + f[0].length), 'latin1'), `version at ${f.index} becomes ${JSON.stringify(v)}`];
    }
    case 8: { // change the method of the first request line
      const s = b.toString('latin1');
      const sp = s.indexOf(' ');
      if (sp <= 0) return [b, 'none'];
      const m = pick(METHODS);
      return [Buffer.from(m + s.slice(sp), 'latin1'), `method becomes ${JSON.stringify(m)}`];
    }
    default: { // duplicate a line
      const lines = [];
      for (let i = 0, j = b.indexOf('\r\n'); j >= 0; i = j + 2, j = b.indexOf('\r\n', i)) lines.push([i, j + 2]);
      if (lines.length === 0) return [b, 'none'];
      const [i, j] = pick(lines);
      return [Buffer.concat([b.subarray(0, j), b.subarray(i, j), b.subarray(j)]), `duplicate the line at ${i}`];
    }
  }
}

// methodName is the name of llhttp's method number m: its METHODS enum
// (src/llhttp/constants.ts), of which Node.js's methods list has only
// part. Node's list is checked against it where they overlap.
const LLHTTP_METHODS = ['DELETE', 'GET', 'HEAD', 'POST', 'PUT', 'CONNECT', 'OPTIONS', 'TRACE', 'COPY',
  'LOCK', 'MKCOL', 'MOVE', 'PROPFIND', 'PROPPATCH', 'SEARCH', 'UNLOCK', 'BIND', 'REBIND', 'UNBIND', 'ACL',
  'REPORT', 'MKACTIVITY', 'CHECKOUT', 'MERGE', 'M-SEARCH', 'NOTIFY', 'SUBSCRIBE', 'UNSUBSCRIBE', 'PATCH',
  'PURGE', 'MKCALENDAR', 'LINK', 'UNLINK', 'SOURCE', 'PRI', 'DESCRIBE', 'ANNOUNCE', 'SETUP', 'PLAY',
  'PAUSE', 'TEARDOWN', 'GET_PARAMETER', 'SET_PARAMETER', 'REDIRECT', 'RECORD', 'FLUSH', 'QUERY'];
for (let i = 0; i <= 33; i++) {
  if (methods[i] !== LLHTTP_METHODS[i]) throw new Error(`method ${i}: Node.js says ${methods[i]}, the enum ${LLHTTP_METHODS[i]}`);
}
function methodName(m) {
  if (LLHTTP_METHODS[m] === undefined) throw new Error(`llhttp method number ${m} has no name here`);
  return LLHTTP_METHODS[m];
}

// parse reads raw as llhttp does: the whole messages it completes, and the
// error that stopped it, or "incomplete" when it ends mid-message.
function parse(raw) {
  const p = new HTTPParser();
  const msgs = [];
  let cur = null;
  p[HTTPParser.kOnHeaders] = () => {};
  p[HTTPParser.kOnHeadersComplete] = (vmaj, vmin, headers, method, url, code, msg, upgrade) => {
    cur = { method: methodName(method), url, version: `${vmaj}.${vmin}`, upgrade: !!upgrade, body: [] };
    return 0;
  };
  p[HTTPParser.kOnBody] = (b) => { cur.body.push(Buffer.from(b)); };
  p[HTTPParser.kOnMessageComplete] = () => {
    msgs.push({ method: cur.method, url: cur.url, version: cur.version, upgrade: cur.upgrade,
      body: Buffer.concat(cur.body).toString('latin1') });
    cur = null;
  };
  p[HTTPParser.kOnExecute] = () => {};
  p.initialize(HTTPParser.REQUEST, {}, MAX_HEADER, 0);
  let r = p.execute(raw);
  let error = '';
  if (r instanceof Error) {
    error = r.code;
  } else {
    const f = p.finish();
    if (f instanceof Error) error = 'incomplete';
    else if (cur !== null) error = 'incomplete';
  }
  p.close();
  return { messages: msgs, error };
}

const seen = new Set();
const refused = [];
const accepted = [];
let tries = 0;
while ((refused.length < WANT_REFUSED || accepted.length < WANT_ACCEPTED) && tries < 2000000) {
  tries++;
  const s = pick(seeds);
  let b = s.raw;
  const steps = [];
  if (rand() < 0.25) {
    // Pipelined: another request right after this one, in the same write.
    const t = pick(seeds);
    b = Buffer.concat([b, t.raw]);
    steps.push(`then ${t.from}`);
  }
  const n = 1 + below(2);
  for (let i = 0; i < n; i++) {
    const [nb, what] = mutate(b);
    b = nb;
    steps.push(what);
  }
  if (b.length === 0 || b.length > MAX_LEN) continue;
  const key = b.toString('latin1');
  if (seen.has(key)) continue;
  seen.add(key);
  const v = parse(b);
  if (v.error === 'incomplete') continue;
  if (v.messages.some((m) => m.upgrade || m.method === 'CONNECT')) continue;
  if (v.error === 'HPE_PAUSED_UPGRADE' || v.error === 'HPE_PAUSED_H2_UPGRADE') continue;
  const c = { raw: key, from: s.from, mutation: steps.join('; '), llhttp: v };
  if (v.error !== '') {
    if (refused.length < WANT_REFUSED) refused.push(c);
  } else if (accepted.length < WANT_ACCEPTED) {
    accepted.push(c);
  }
}

const out = {
  source: {
    parser: `llhttp ${process.versions.llhttp} (Node.js ${process.version}), strict: no lenient flags`,
    generator: 'internal/proxy/testdata/llhttp-diff/gen.js',
    seed: SEED,
    seeds: 'the requests of ../http1/*.json (without a repeat) and ten plain requests',
  },
  cases: refused.concat(accepted).map((c) => ({
    raw: c.raw,
    from: c.from,
    mutation: c.mutation,
    llhttp: { error: c.llhttp.error, messages: c.llhttp.messages.map(({ method, url, version, body }) => ({ method, url, version, body })) },
  })),
};
process.stdout.write(JSON.stringify(out, null, 1) + '\n');
