// Calls made before the connection is live: their order, a join left before
// its answer, and tokens the server would refuse at the handshake.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, client, env, next, record, sign, uniq, until, wsURL } from './helpers.js';

const base = env('PRESENCED_URL');
const jwtBase = env('PRESENCED_JWT_URL');
const secret = env('PRESENCED_JWT_SECRET');
const key = env('PRESENCED_API_KEY');

const quiet = () => new Promise((r) => setTimeout(r, 1500));

// sync resolves once the server has handled every frame sent before it.
async function sync(p) {
  const pong = next(p, 'frame', (f) => f.type === 'pong');
  p.send({ type: 'ping' });
  await pong;
}

// The server hands a typing frame over off the connection's reader, and
// what came after it follows: once the typing is seen, no earlier frame can
// change the state any more.
test('calls queued before live go out in the order they were made', async (t) => {
  const awayLast = uniq('al');
  const ch = uniq('order-room');
  const a = client(t, { url: wsURL(base), uid: awayLast, channels: [ch] });
  const aTyped = next(a, 'typing', (d) => d.users.includes(awayLast));
  a.typing(ch);
  a.setActivity('away'); // made after the typing: the user ends away
  await aTyped;
  await until('away, after the typing', async () => (await api(base, `/api/presence/${awayLast}`)).state === 'away');
  assert.equal(a.away, true);

  const activeLast = uniq('tl');
  const b = client(t, { url: wsURL(base), uid: activeLast, channels: [ch] });
  const bTyped = next(b, 'typing', (d) => d.users.includes(activeLast));
  b.setActivity('away');
  b.typing(ch); // made after: typing makes the connection active
  await bTyped;
  await sync(b);
  assert.equal((await api(base, `/api/presence/${activeLast}`)).state, 'active');
  assert.equal(b.away, false);
});

test('a join left before its answer resolves, and the channel is not joined', async (t) => {
  const uid = uniq('fickle');
  const ch = uniq('gone-room');
  const p = client(t, { url: wsURL(base), uid });
  const joined = p.join(ch);
  assert.equal(p.state, 'connecting');
  await p.leave(ch);
  await joined;
  await until('live', () => p.state === 'live');
  await sync(p);
  assert.equal((await api(base, `/api/channels/${ch}`)).count, 0);
  assert.equal(p.channel(ch).count, 0);
});

test('an expired token without refreshToken ends at once with 4401', async (t) => {
  const p = client(t, { url: wsURL(jwtBase), token: sign(secret, uniq('late'), -60) });
  const states = record(p, 'state');
  await until('closed', () => p.state === 'closed');
  await quiet();
  assert.deepEqual(states, [{ type: 'state', state: 'connecting' }, { type: 'state', state: 'closed', code: 4401 }]);
});

test('a token the server refuses (HTTP 401) is not retried without refreshToken', async (t) => {
  const p = client(t, { url: wsURL(jwtBase), token: sign('not-the-secret', uniq('forged'), 3600) });
  const states = record(p, 'state');
  await until('closed', () => p.state === 'closed');
  await quiet();
  assert.deepEqual(states, [{ type: 'state', state: 'connecting' }, { type: 'state', state: 'closed', code: 4401 }]);
  assert.equal(p.lastClose.reason, 'HTTP 401');
});

test('a token the server refuses is refreshed, then the client connects', async (t) => {
  const sub = uniq('renewed');
  let calls = 0;
  const p = client(t, {
    url: wsURL(jwtBase), token: sign('not-the-secret', sub, 3600),
    refreshToken: async () => { calls++; return sign(secret, sub, 3600); },
  });
  await until('live', () => p.state === 'live');
  assert.equal(calls, 1);
  assert.equal((await api(jwtBase, `/api/presence/${sub}`, key)).online, true);
});
