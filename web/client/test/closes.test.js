// Close codes and tokens: what is retried and what is not, refreshing a
// token before its exp and after a 4401.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, client, env, next, post, raw, record, sign, uniq, until, wsURL } from './helpers.js';

const base = env('PRESENCED_URL');
const shortBase = env('PRESENCED_SHORT_URL');
const jwtBase = env('PRESENCED_JWT_URL');
const secret = env('PRESENCED_JWT_SECRET');
const key = env('PRESENCED_API_KEY');

// quiet waits for a full backoff's worth of time after a final close: a
// client that were to retry would show a connecting state by then.
const quiet = () => new Promise((r) => setTimeout(r, 1500));

test('connects by token as its sub', async (t) => {
  const sub = uniq('tok');
  const ch = uniq('secret-room');
  const p = client(t, { url: wsURL(jwtBase), token: sign(secret, sub, 3600), channels: [ch] });
  await next(p, 'joined');
  assert.equal(p.uid, sub);
  assert.deepEqual([...p.channel(ch).members], [sub]);
  assert.deepEqual((await api(jwtBase, `/api/channels/${ch}`, key)).members, [sub]);
});

test('4403 from the server side is not retried', async (t) => {
  const uid = uniq('kicked');
  const p = client(t, { url: wsURL(base), uid });
  await next(p, 'state', (s) => s.state === 'live');
  const states = record(p, 'state');
  await post(base, `/test/disconnect?uid=${uid}`);
  await until('closed', () => p.state === 'closed');
  await quiet();
  assert.deepEqual(states, [{ type: 'state', state: 'closed', code: 4403 }]);
  assert.equal((await api(base, `/api/presence/${uid}`)).online, false);
});

test('4401 without refreshToken is not retried', async (t) => {
  const p = client(t, { url: wsURL(jwtBase), token: sign(secret, uniq('brief'), 2) });
  await next(p, 'state', (s) => s.state === 'live');
  const states = record(p, 'state');
  await until('closed', () => p.state === 'closed');
  await quiet();
  assert.deepEqual(states, [{ type: 'state', state: 'closed', code: 4401 }]);
});

test('4408 is retried: a silenced connection idles out and comes back', async (t) => {
  const uid = uniq('quiet');
  const ch = uniq('idle-room');
  const p = client(t, { url: wsURL(shortBase), uid, channels: [ch] });
  const friend = uniq('friend');
  const ws = await raw(t, shortBase, friend);
  p.watch([friend]);
  // The snapshot may have come already: wait for the state, not an event.
  await until('joined', () => p.state === 'live' && p.channel(ch).members.has(uid));
  await until('the friend online', () => p.user(friend).state === 'active');
  p.setActivity('away');
  const states = record(p, 'state');
  assert.equal(p.silence(), true);
  await next(p, 'state', (s) => s.state === 'waiting');
  await next(p, 'joined', (d) => d.channel === ch);
  assert.deepEqual(states.slice(0, 3).map((s) => [s.state, s.code]), [['waiting', 4408], ['connecting', undefined], ['live', undefined]]);
  assert.deepEqual([...p.channel(ch).members], [uid], 're-joined');
  // The new connection said it is away, and watches again.
  await until('away again', () => p.channel(ch).away.has(uid));
  ws.close();
  await until('the friend offline, from a status frame of the new connection', () => p.user(friend).state === 'offline' && p.user(friend).last_seen);
});

test('the token is refreshed before its exp', async (t) => {
  const sub = uniq('fresh');
  const first = sign(secret, sub, 3);
  const exp = JSON.parse(Buffer.from(first.split('.')[1], 'base64url')).exp * 1000;
  let calls = 0;
  const p = client(t, {
    url: wsURL(jwtBase), token: first, refreshToken: async () => { calls++; return sign(secret, sub, 3600); },
  });
  await next(p, 'state', (s) => s.state === 'live');
  const states = record(p, 'state');
  await until('past the first exp', () => Date.now() > exp + 1000);
  assert.equal(calls, 1);
  assert.deepEqual(states, [], 'the connection outlived its first token');
  assert.equal((await api(jwtBase, `/api/presence/${sub}`, key)).connections, 1);
});

test('after a 4401 the client tries refreshToken and reconnects with its token', async (t) => {
  const sub = uniq('late');
  let calls = 0;
  // Calls while live fail, so the server closes with 4401; the call after it saves the day.
  const p = client(t, {
    url: wsURL(jwtBase), token: sign(secret, sub, 2),
    refreshToken: async () => { calls++; return p.state === 'live' ? null : sign(secret, sub, 3600); },
  });
  await next(p, 'state', (s) => s.state === 'live');
  const states = record(p, 'state');
  await next(p, 'state', (s) => s.state === 'live');
  assert.ok(calls >= 2, `${calls} calls`);
  assert.deepEqual(states.map((s) => [s.state, s.code]), [['waiting', 4401], ['connecting', undefined], ['live', undefined]]);

  // A refreshToken that gives nothing after a 4401 ends it.
  const q = client(t, { url: wsURL(jwtBase), token: sign(secret, uniq('later'), 2), refreshToken: async () => null });
  await next(q, 'state', (s) => s.state === 'live');
  await next(q, 'state', (s) => s.state === 'closed');
  assert.equal(q.lastClose.code, 4401);
});

test('app pings keep a connection whose socket answers no server pings', async (t) => {
  const { default: WebSocket } = await import('ws');
  const pings = [];
  // A socket that leaves the server's pings unanswered: only the client's own pings keep it.
  class Deaf extends WebSocket {
    constructor(u) { super(u, { autoPong: false }); }
    send(d) { if (JSON.parse(d).type === 'ping') pings.push(Date.now()); super.send(d); }
  }
  const p = client(t, { url: wsURL(base), uid: uniq('pinger'), WebSocket: Deaf });
  await next(p, 'state', (s) => s.state === 'live');
  const states = record(p, 'state');
  // Three pings come within the server's timeout (5 s) and then some.
  await until('three app pings', () => pings.length >= 3);
  assert.equal(p.timeoutMs, 5000);
  assert.deepEqual(states, [], 'the first connection lived on');
});
