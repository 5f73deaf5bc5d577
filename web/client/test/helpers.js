// Helpers of the client's tests: the servers the Go test started, clients
// that close when their test ends, and waits on conditions (never on time).
import { createHmac } from 'node:crypto';
import { once } from 'node:events';
import WebSocket, { WebSocketServer } from 'ws';
import { Presenced } from '../presenced.js';

export const WAIT = 20000; // generous: a busy machine, a server under -race

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through go test ./web -run TestJSClient`);
  return v;
}

export const wsURL = (base) => base.replace(/^http/, 'ws') + '/ws';

let seq = 0;
/** uniq returns a user or channel name not used by another test. */
export const uniq = (prefix) => `${prefix}-${process.pid}-${++seq}`;

/** client makes a Presenced with the ws package that closes when the test ends. */
export function client(t, opts) {
  const p = new Presenced({ WebSocket, ...opts });
  t.after(() => p.close());
  return p;
}

/** until polls cond until it is true, failing after WAIT with what was awaited. */
export async function until(what, cond, timeout = WAIT) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** next resolves with the detail of the next event of type on p that satisfies pred. */
export function next(p, type, pred = () => true, timeout = WAIT) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { p.removeEventListener(type, on); reject(new Error(`no ${type} event in ${timeout} ms`)); }, timeout);
    function on(e) {
      if (!pred(e.detail)) return;
      clearTimeout(timer);
      p.removeEventListener(type, on);
      resolve(e.detail);
    }
    p.addEventListener(type, on);
  });
}

/** record keeps every event of the given types on p, in order: [{type, ...detail}]. */
export function record(p, ...types) {
  const got = [];
  for (const type of types) p.addEventListener(type, (e) => got.push({ type, ...e.detail }));
  return got;
}

/**
 * raw connects a bare WebSocket user (the ws package answers the server's
 * pings, which keeps it online) and resolves once welcomed; it closes when
 * the test ends.
 */
export function raw(t, base, uid, channels = []) {
  const u = new URL(wsURL(base));
  u.searchParams.set('uid', uid);
  if (channels.length) u.searchParams.set('channels', channels.join(','));
  const ws = new WebSocket(u);
  ws.frames = [];
  ws.on('message', (d) => ws.frames.push(JSON.parse(String(d))));
  ws.on('error', () => {});
  t.after(() => ws.terminate());
  ws.sendJSON = (f) => ws.send(JSON.stringify(f));
  ws.closed = new Promise((r) => ws.on('close', r));
  return new Promise((resolve, reject) => {
    ws.on('message', function first() { ws.off('message', first); resolve(ws); });
    ws.on('close', (code) => reject(new Error(`${uid}: closed ${code} before the welcome`)));
  });
}

/** api GETs a path of the server API, as JSON. */
export async function api(base, path, key = '') {
  const res = await fetch(base + path, { headers: key ? { Authorization: `apikey ${key}` } : {} });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** members pages through GET /api/channels/{ch}: the server's member set, sorted. */
export async function members(base, ch, key = '') {
  const out = [];
  let after = '';
  for (;;) {
    const page = await api(base, `/api/channels/${encodeURIComponent(ch)}?limit=1000&after=${encodeURIComponent(after)}`, key);
    out.push(...page.members);
    if (!page.next) return out;
    after = page.next;
  }
}

export const post = (base, path) => fetch(base + path, { method: 'POST' }).then((r) => {
  if (!r.ok) throw new Error(`POST ${path}: ${r.status}`);
});

export const sorted = (set) => [...set].sort();

/** sign makes an HS256 JWT for sub that expires in expIn seconds. */
export function sign(secret, sub, expIn, extra = {}) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, exp: Math.floor(Date.now() / 1000) + expIn, ...extra })}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}

/**
 * fakeServer starts a WebSocket server on loopback, a stand-in for presenced
 * that a test scripts: each connection (with sendJSON, the frames it got in
 * frames, and a 'frame' event per frame) goes to onConnection with its
 * number. It resolves to the /ws address and closes when the test ends.
 */
export async function fakeServer(t, onConnection) {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(wss, 'listening');
  let n = 0;
  wss.on('connection', (ws) => {
    ws.on('error', () => {});
    ws.frames = [];
    ws.sendJSON = (f) => { if (ws.readyState === 1) ws.send(JSON.stringify(f)); };
    ws.on('message', (d) => {
      const f = JSON.parse(String(d));
      ws.frames.push(f);
      ws.emit('frame', f);
    });
    onConnection(ws, n++);
  });
  t.after(() => {
    for (const c of wss.clients) c.terminate();
    wss.close();
  });
  return `ws://127.0.0.1:${wss.address().port}/ws`;
}
