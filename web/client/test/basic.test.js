// The client against a real server in demo mode: connecting, joining and
// leaving, diffs, away, typing, watched users and last seen, messages.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, client, env, next, raw, record, sorted, uniq, until, wsURL } from './helpers.js';

const base = env('PRESENCED_URL');
const url = wsURL(base);

test('connects by uid and joins its channels', async (t) => {
  const uid = uniq('alice');
  const ch = uniq('lobby');
  const p = client(t, { url, uid, channels: [ch] });
  const states = record(p, 'state');
  await next(p, 'joined', (d) => d.channel === ch);
  assert.equal(p.state, 'live');
  assert.equal(p.uid, uid);
  assert.deepEqual(states.map((s) => s.state), ['connecting', 'live'], 'a listener added after the constructor hears connecting');
  const c = p.channel(ch);
  assert.deepEqual(sorted(c.members), [uid]);
  assert.equal(c.count, 1);
  assert.equal(c.complete, true);
  assert.deepEqual(c.typing, []);
  assert.equal((await api(base, `/api/presence/${uid}`)).online, true);
});

test('join and leave resolve at their answers; a refused join rejects', async (t) => {
  const uid = uniq('jo');
  const p = client(t, { url, uid });
  const room = uniq('room');
  // Called before live: queued.
  const joined = p.join(room);
  assert.equal(p.state, 'connecting');
  await joined;
  assert.deepEqual(sorted(p.channel(room).members), [uid]);
  assert.deepEqual(await api(base, `/api/channels/${room}`), { channel: room, count: 1, members: [uid] });
  await p.leave(room);
  assert.deepEqual(p.channel(room), { count: 0, members: new Set(), away: new Set(), typing: [], complete: false }, 'not joined: empty');
  assert.equal((await api(base, `/api/channels/${room}`)).count, 0);
  await assert.rejects(p.join('no spaces'), /join "no spaces"/);
  assert.equal(p.channel('no spaces').count, 0);
  // Live now: a join goes out at once.
  await p.join(room);
  assert.equal(p.channel(room).count, 1);
});

test('presence diffs are applied before the event', async (t) => {
  const ch = uniq('diffs');
  const p = client(t, { url, uid: uniq('watcher'), channels: [ch] });
  await next(p, 'joined');
  const seen = [];
  p.addEventListener('presence', (e) => seen.push({ ...e.detail, members: sorted(p.channel(ch).members) }));
  const bob = await raw(t, base, 'bob-' + ch, [ch]);
  await until('bob listed', () => p.channel(ch).members.has('bob-' + ch));
  const d = seen.find((s) => s.joins.includes('bob-' + ch));
  assert.ok(d.members.includes('bob-' + ch), 'the state had changed when the event came');
  assert.equal(d.count, 2);
  assert.deepEqual(d.leaves, []);
  bob.close();
  await until('bob gone', () => !p.channel(ch).members.has('bob-' + ch));
  assert.equal(p.channel(ch).count, 1);
  assert.ok(seen.some((s) => s.leaves.includes('bob-' + ch) && s.count === 1));
});

test('away and active, of others and of this client', async (t) => {
  const ch = uniq('away');
  const uid = uniq('me');
  const p = client(t, { url, uid, channels: [ch] });
  await next(p, 'joined');
  const carol = await raw(t, base, 'carol-' + ch, [ch]);
  await until('carol listed', () => p.channel(ch).members.has('carol-' + ch));
  carol.sendJSON({ type: 'activity', state: 'away' });
  const d = await next(p, 'presence', (x) => x.away.includes('carol-' + ch));
  assert.deepEqual(d.active, []);
  assert.ok(p.channel(ch).away.has('carol-' + ch));
  carol.sendJSON({ type: 'activity', state: 'active' });
  await next(p, 'presence', (x) => x.active.includes('carol-' + ch));
  assert.equal(p.channel(ch).away.has('carol-' + ch), false);

  p.setActivity('away');
  await until('away at the server', async () => (await api(base, `/api/presence/${uid}`)).state === 'away');
  await until('away in its own channel', () => p.channel(ch).away.has(uid));
  p.setActivity('active');
  await until('active at the server', async () => (await api(base, `/api/presence/${uid}`)).state === 'active');
  assert.throws(() => p.setActivity('asleep'), TypeError);
});

test('typing: who types, from the frames', async (t) => {
  const ch = uniq('typing');
  const uid = uniq('typist');
  const p = client(t, { url, uid, channels: [ch] });
  await next(p, 'joined');
  const dan = await raw(t, base, 'dan-' + ch, [ch]);
  await until('dan listed', () => p.channel(ch).members.has('dan-' + ch));
  dan.sendJSON({ type: 'typing', channel: ch });
  assert.deepEqual(await next(p, 'typing', (x) => x.users.length > 0), { channel: ch, users: ['dan-' + ch] });
  assert.deepEqual(p.channel(ch).typing, ['dan-' + ch]);
  p.typing(ch);
  await next(p, 'typing', (x) => x.users.includes(uid));
  assert.deepEqual(p.channel(ch).typing, ['dan-' + ch, uid].sort());
  // A chat ends the sender's typing at once; the server's TTL ends dan's.
  p.chat(ch, 'done');
  assert.deepEqual(await next(p, 'chat'), { channel: ch, from: uid, text: 'done' });
  await until('nobody typing', () => p.channel(ch).typing.length === 0);
});

test('watched users: status, away and last seen', async (t) => {
  const p = client(t, { url, uid: uniq('fan') });
  const erin = uniq('erin');
  p.watch([erin]);
  assert.deepEqual(p.user(erin), { state: 'unknown', last_seen: null });
  await until('erin offline', () => p.user(erin).state === 'offline');
  // Listen before erin connects: its status can come before raw() returns.
  const online = next(p, 'status', (s) => s.online.includes(erin));
  const ws = await raw(t, base, erin);
  const on = await online;
  assert.deepEqual(on.offline, []);
  assert.deepEqual(p.user(erin), { state: 'active', last_seen: null });
  ws.sendJSON({ type: 'activity', state: 'away' });
  await next(p, 'status', (s) => s.away.includes(erin));
  assert.equal(p.user(erin).state, 'away');
  ws.close();
  const off = await next(p, 'status', (s) => s.offline.includes(erin));
  const at = (await api(base, `/api/presence/${erin}`)).last_seen;
  assert.equal(typeof at, 'number');
  assert.equal(off.last_seen[erin], at);
  assert.deepEqual(p.user(erin), { state: 'offline', last_seen: at });
  assert.deepEqual(p.user('never-watched'), { state: 'unknown', last_seen: null });
});

test('publish and message from the server side', async (t) => {
  const ch = uniq('news');
  const uid = uniq('reader');
  const p = client(t, { url, uid, channels: [ch] });
  await next(p, 'joined');
  const pub = next(p, 'publish');
  await fetch(`${base}/api/publish`, { method: 'POST', body: JSON.stringify({ channel: ch, data: { n: 1 } }) });
  assert.deepEqual(await pub, { channel: ch, data: { n: 1 } });
  const msg = next(p, 'message');
  await fetch(`${base}/api/send`, { method: 'POST', body: JSON.stringify({ uid, data: { unread: 3 } }) });
  assert.deepEqual(await msg, { data: { unread: 3 } });
});

test('close ends it: pending calls reject, no reconnect', async (t) => {
  const uid = uniq('closer');
  const p = client(t, { url, uid });
  await next(p, 'state', (s) => s.state === 'live');
  p.close();
  assert.equal(p.state, 'closed');
  await assert.rejects(p.join('x'), /closed/);
  await until('offline at the server', async () => !(await api(base, `/api/presence/${uid}`)).online);
});
