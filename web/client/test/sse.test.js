// Server-Sent Events: the fallback where a WebSocket does not open (through
// nginx with a plain proxy_pass, which drops the upgrade), the transport
// option and property, the protocol over a stream, its close event, and
// the POSTs (batched, in order; a 404 ends the session).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import WebSocket from 'ws';
import { Presenced } from '../presenced.js';
import { api, client, env, next, post, raw, record, uniq, until, wsURL } from './helpers.js';

const base = env('PRESENCED_URL');
const shortBase = env('PRESENCED_SHORT_URL');
const nginx = process.env.PRESENCED_NGINX_URL || ''; // empty without nginx
const noNginx = nginx ? false : 'no nginx here (PRESENCED_NGINX_URL is empty)';

const live = (p) => until(`${p.uid} live`, () => p.state === 'live');

test('the transport option: auto by default, websocket or sse pinned, anything else refused', async (t) => {
  assert.throws(() => new Presenced({ url: wsURL(base), uid: 'x', WebSocket, transport: 'poll' }), TypeError);
  assert.throws(() => new Presenced({ url: wsURL(base), uid: 'x', transport: 'websocket', WebSocket: null }), /no WebSocket implementation/);
  for (const [transport, want] of [[undefined, 'websocket'], ['auto', 'websocket'], ['websocket', 'websocket'], ['sse', 'sse']]) {
    const p = client(t, { url: wsURL(base), uid: uniq('pin'), transport });
    assert.equal(p.transport, want, `${transport}: before it connects`);
    await live(p);
    assert.equal(p.transport, want, `${transport}: live`);
    assert.equal((await api(base, `/api/presence/${p.uid}`)).online, true);
    p.close();
  }
  // No WebSocket implementation (Node 20 has none of its own): streams only.
  const p = client(t, { url: wsURL(base), uid: uniq('nows'), WebSocket: null });
  assert.equal(p.transport, 'sse');
  await live(p);
});

test('through nginx, which drops the upgrade, the client falls back to SSE by itself', { skip: noNginx }, async (t) => {
  const ch = uniq('behind-nginx');
  const me = uniq('proxied');
  const started = Date.now();
  const p = client(t, { url: wsURL(nginx), uid: me, channels: [ch] });
  const transports = [];
  p.addEventListener('state', (e) => transports.push(`${e.detail.state}:${p.transport}`));
  await next(p, 'joined', (d) => d.channel === ch);
  const ms = Date.now() - started;
  assert.equal(p.transport, 'sse');
  assert.deepEqual(transports, ['connecting:websocket', 'live:sse'], 'one attempt: the WebSocket, then the stream at once');
  assert.ok(p.lastClose === null || p.lastClose.code === 1006, JSON.stringify(p.lastClose));

  // A WebSocket user on the server itself, and the proxied one: presence and chat both ways.
  const friend = uniq('direct');
  const ws = await raw(t, base, friend, [ch]);
  await until('the friend in the channel', () => p.channel(ch).members.has(friend));
  assert.deepEqual([...p.channel(ch).members].sort(), [friend, me].sort());
  ws.sendJSON({ type: 'chat', channel: ch, text: 'to the stream' });
  assert.deepEqual(await next(p, 'chat'), { channel: ch, from: friend, text: 'to the stream' });
  p.chat(ch, 'from the stream');
  await until('the chat at the WebSocket', () => ws.frames.some((f) => f.type === 'chat' && f.from === me && f.text === 'from the stream'));
  t.diagnostic(`through nginx: joined over SSE ${ms} ms after the client was made`);
});

test('pinned to websocket, it never falls back: through nginx it keeps retrying the WebSocket', { skip: noNginx }, async (t) => {
  const p = client(t, { url: wsURL(nginx), uid: uniq('stubborn'), transport: 'websocket' });
  const states = record(p, 'state');
  await until('two attempts', () => states.filter((s) => s.state === 'waiting').length >= 2);
  assert.equal(p.transport, 'websocket');
  assert.ok(!states.some((s) => s.state === 'live'), JSON.stringify(states));
  assert.equal((await api(base, `/api/presence/${p.uid}`)).online, false);
});

test('after an SSE session ends, the reconnect tries the WebSocket first again', { skip: noNginx }, async (t) => {
  const p = client(t, { url: wsURL(nginx), uid: uniq('idler') });
  await until('live over SSE', () => p.state === 'live' && p.transport === 'sse');
  const seen = [];
  p.addEventListener('state', (e) => seen.push({ ...e.detail, transport: p.transport }));
  assert.equal(p.silence(), true); // idles out: 4408, then a reconnect
  await until('live again', () => seen.some((s) => s.state === 'live'), 30000);
  assert.deepEqual(seen, [
    { state: 'waiting', code: 4408, transport: 'sse' },
    { state: 'connecting', transport: 'websocket' },
    { state: 'live', transport: 'sse' },
  ]);
  assert.equal(p.lastClose.code, 1006, 'the refused WebSocket of the new attempt');
});

test('over SSE: presence, typing, away and chat between two streams and a WebSocket', async (t) => {
  const ch = uniq('sse-room');
  const a = client(t, { url: wsURL(base), uid: uniq('sa'), channels: [ch], transport: 'sse' });
  const b = client(t, { url: wsURL(base), uid: uniq('sb'), channels: [ch], transport: 'sse' });
  const c = client(t, { url: wsURL(base), uid: uniq('wc'), channels: [ch] });
  await until('all three in the channel', () => [a, b, c].every((p) => p.channel(ch).count === 3));
  assert.deepEqual([a.transport, b.transport, c.transport], ['sse', 'sse', 'websocket']);
  assert.deepEqual((await api(base, `/api/channels/${ch}`)).members, [a.uid, b.uid, c.uid].sort());

  b.typing(ch);
  await until('b types, at a', () => a.channel(ch).typing.includes(b.uid));
  b.setActivity('away');
  await until('b away, at c', () => c.channel(ch).away.has(b.uid));
  // Frames sent in one turn go in one POST, in order.
  for (const text of ['one', 'two', 'three']) a.chat(ch, text);
  const got = [];
  c.addEventListener('chat', (e) => got.push(e.detail.text));
  await until('three chats at c', () => got.length >= 3);
  assert.deepEqual(got, ['one', 'two', 'three']);
  c.chat(ch, 'back');
  assert.deepEqual(await next(b, 'chat', (d) => d.text === 'back'), { channel: ch, from: c.uid, text: 'back' });

  a.watch([b.uid]);
  await until('b watched', () => a.user(b.uid).state === 'away');
  await b.leave(ch);
  await until('b left, at a and c', () => !a.channel(ch).members.has(b.uid) && !c.channel(ch).members.has(b.uid));
  b.close();
  await until('b offline, at a', () => a.user(b.uid).state === 'offline');
});

test('over SSE the close event is the close: 4403 is final, 4408 is retried', async (t) => {
  const uid = uniq('sse-kicked');
  const p = client(t, { url: wsURL(base), uid, transport: 'sse' });
  await live(p);
  const states = record(p, 'state');
  const frames = record(p, 'frame');
  await post(base, `/test/disconnect?uid=${uid}`);
  await until('closed', () => p.state === 'closed');
  await new Promise((r) => setTimeout(r, 1500)); // a retry would show by now
  assert.deepEqual(states, [{ type: 'state', state: 'closed', code: 4403 }]);
  assert.deepEqual(p.lastClose && [p.lastClose.code, p.lastClose.reason], [4403, 'disconnected']);
  assert.ok(!frames.some((f) => f.type === 'close'), 'the close event is no frame to the app');

  const q = client(t, { url: wsURL(shortBase), uid: uniq('sse-quiet'), transport: 'sse' });
  await live(q);
  const qs = record(q, 'state');
  assert.equal(q.silence(), true);
  await until('back live', () => qs.some((s) => s.state === 'live'));
  assert.deepEqual(qs.map((s) => s.code ?? s.state), [4408, 'connecting', 'live']);
  assert.equal(q.lastClose.reason, 'idle timeout');
});

test('over SSE keepalive pings keep a quiet client online past the timeout', async (t) => {
  const p = client(t, { url: wsURL(shortBase), uid: uniq('sse-pinger'), transport: 'sse' });
  await live(p);
  const states = record(p, 'state');
  const timeout = p.timeoutMs;
  assert.ok(timeout > 0 && timeout < 5000, `the short server's timeout: ${timeout}`);
  const frames = record(p, 'frame');
  await new Promise((r) => setTimeout(r, timeout * 3));
  assert.deepEqual(states, [], 'no close');
  assert.ok(frames.filter((f) => f.type === 'pong').length >= 3, `pongs: ${JSON.stringify(frames)}`);
});

// sseServer is a scripted stand-in for presenced's streams: handle gets
// each request, numbered per path kind, and answers it.
async function sseServer(t, handle) {
  const streams = [];
  const server = http.createServer((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      streams.push(res);
    }
    handle(req, res);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    for (const s of streams) s.destroy();
    server.closeAllConnections();
    server.close();
  });
  return `ws://127.0.0.1:${server.address().port}/ws`;
}

const readBody = async (req) => {
  let b = '';
  for await (const c of req) b += c;
  return b;
};

test('POSTs: one per turn, frames in order; a 404 ends the session and the client reconnects', async (t) => {
  const gets = [];
  const bodies = [];
  const url = await sseServer(t, async (req, res) => {
    if (req.method === 'GET') {
      gets.push(req.url);
      const n = gets.length;
      // CRLF line ends, a comment and a field that is not data, as a stream may have.
      res.write(`: hello\r\nid: 1\r\ndata: {"type":"welcome","uid":"me","timeout_ms":30000,"session":"s${n}"}\r\n\r\n`);
      return;
    }
    bodies.push({ url: req.url, body: await readBody(req), type: req.headers['content-type'] });
    if (req.url === '/sse/s1' && bodies.length === 1) {
      res.writeHead(204).end();
    } else if (req.url === '/sse/s1') {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":"no such session: s1"}');
    } else {
      res.writeHead(204).end();
    }
  });
  const p = client(t, { url: `${url}?channels=x`, uid: 'me', channels: ['a', 'b'], transport: 'sse' });
  p.watch(['w']);
  await until('the first POST', () => bodies.length >= 1);
  assert.deepEqual(gets[0], '/sse?channels=x&uid=me');
  assert.deepEqual(bodies[0], {
    url: '/sse/s1',
    body: '{"type":"join","channel":"a"}\n{"type":"join","channel":"b"}\n{"type":"watch","uids":["w"]}',
    type: 'text/plain',
  });
  const states = record(p, 'state');
  p.send({ type: 'ping' });
  await until('a second stream', () => gets.length >= 2 && bodies.some((b) => b.url === '/sse/s2'));
  assert.deepEqual(states.map((s) => s.state), ['waiting', 'connecting', 'live']);
  assert.deepEqual(p.lastClose && [p.lastClose.code, p.lastClose.reason], [1006, 'the session ended (HTTP 404)']);
});

test('over SSE a message over maxMessageBytes ends the connection (1009), and a close event names its code', async (t) => {
  let n = 0;
  const url = await sseServer(t, (req, res) => {
    if (req.method !== 'GET') return res.writeHead(204).end();
    n++;
    res.write('data: {"type":"welcome","uid":"me","timeout_ms":30000,"session":"s"}\n\n');
    if (n === 1) res.write(`data: {"type":"message","data":"${'x'.repeat(200)}"}\n\n`);
    else res.write('data: {"type":"close","code":4401,"reason":"token expired"}\n\n');
  });
  const p = client(t, { url, uid: 'me', transport: 'sse', maxMessageBytes: 100 });
  const states = record(p, 'state');
  await until('closed', () => p.state === 'closed', 30000);
  assert.deepEqual(states.map((s) => s.code ?? s.state), ['connecting', 'live', 1009, 'connecting', 'live', 4401]);
  assert.equal(p.lastClose.reason, 'token expired');
});
