// Records and set() against a real server: what one client sets, another
// sees in the next diff; what the server refuses rejects; invisible looks
// like leaving to others and like nothing to the user's own client; mode and
// note outlive a reconnect; a note clears by itself; info comes from the
// token.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, client, env, next, sign, uniq, until, wsURL } from './helpers.js';

const base = env('PRESENCED_URL');
const url = wsURL(base);
const jwtBase = env('PRESENCED_JWT_URL');
const secret = env('PRESENCED_JWT_SECRET');

// pair makes two users in one fresh channel, each with its snapshot.
async function pair(t, ch) {
  const a = client(t, { url, uid: uniq('ann'), channels: [ch] });
  const b = client(t, { url, uid: uniq('ben'), channels: [ch] });
  await Promise.all([next(a, 'joined'), next(b, 'joined')]);
  await until('both see both', () => a.channel(ch).members.has(b.uid) && b.channel(ch).members.has(a.uid));
  return [a, b];
}

test('a set reaches the others in the next diff, and the own record at once', async (t) => {
  const ch = uniq('rec');
  const [a, b] = await pair(t, ch);
  assert.deepEqual(a.record(b.uid), {}, 'heard of, no parts');
  assert.deepEqual(b.record(b.uid), {});

  const seen = next(a, 'presence', (d) => d.updated[b.uid] !== undefined);
  assert.deepEqual(await b.set({ mode: 'dnd' }), { mode: 'dnd' });
  assert.deepEqual(b.record(b.uid), { mode: 'dnd' }, 'resolved: the own record has it');
  assert.deepEqual((await seen).updated, { [b.uid]: { mode: 'dnd' } });
  assert.deepEqual(a.record(b.uid), { mode: 'dnd' });
  assert.equal((await api(base, `/api/presence/${b.uid}`)).mode, 'dnd');

  const note = { text: 'In a meeting', emoji: '📅', until: Date.now() + 3600000 };
  const noted = next(a, 'presence', (d) => d.updated[b.uid]?.note !== undefined);
  assert.deepEqual(await b.set({ note }), { mode: 'dnd', note });
  assert.deepEqual((await noted).updated[b.uid], { mode: 'dnd', note }, 'the whole record');
  // Back to online, no note: {} to the others.
  const emptied = next(a, 'presence', (d) => d.updated[b.uid] !== undefined && Object.keys(d.updated[b.uid]).length === 0);
  assert.deepEqual(await b.set({ mode: 'online', note: null }), {});
  await emptied;
  assert.deepEqual(a.record(b.uid), {});
  const got = await api(base, `/api/presence/${b.uid}`);
  assert.equal(got.mode, undefined, 'online is never written');
  assert.equal(got.note, undefined);
});

// The one meaning of set, the Go client's too: a part left out is kept.
test('a set keeps what it leaves out: the mode alone keeps the note, note: null keeps the mode', async (t) => {
  const ch = uniq('keep');
  const [a, b] = await pair(t, ch);
  const note = { text: 'In a meeting', emoji: '📅', until: Date.now() + 3600000 };
  assert.deepEqual(await b.set({ mode: 'invisible', note }), { mode: 'invisible', note });
  assert.deepEqual(await b.set({ mode: 'online' }), { note }, 'online again, the note kept');
  await until('a sees the note kept', () => a.record(b.uid)?.note?.text === note.text && a.record(b.uid)?.mode === undefined);
  assert.deepEqual(await b.set({ mode: 'dnd' }), { mode: 'dnd', note });
  await until('a sees dnd with the note', () => a.record(b.uid)?.mode === 'dnd' && a.record(b.uid)?.note?.text === note.text);
  assert.deepEqual(await b.set({ note: null }), { mode: 'dnd' }, 'the note cleared, the mode kept');
  await until('a sees dnd without a note', () => a.record(b.uid)?.mode === 'dnd' && a.record(b.uid)?.note === undefined);
  const at = await api(base, `/api/presence/${b.uid}`);
  assert.equal(at.mode, 'dnd');
  assert.equal(at.note, undefined);
  await assert.rejects(b.set({}), TypeError, 'neither part: refused before sending');
});

test('a set the server refuses rejects with its words, and changes nothing', async (t) => {
  const p = client(t, { url, uid: uniq('late') });
  await next(p, 'state', (s) => s.state === 'live');
  await p.set({ mode: 'dnd' });
  const errors = [];
  p.addEventListener('error', (e) => errors.push(e.detail.error));
  for (const until of [Date.now() - 1000, Date.now() + 8 * 24 * 3600000]) {
    await assert.rejects(p.set({ mode: 'invisible', note: { text: 'x', until } }), /^Error: presenced: set: "note\.until" must be in the future and at most 7 days ahead/);
  }
  assert.equal(errors.length, 2, 'each is an error event too');
  assert.deepEqual(p.record(p.uid), { mode: 'dnd' });
  const at = await api(base, `/api/presence/${p.uid}`);
  assert.equal(at.mode, 'dnd', 'applied whole or not at all');
  assert.equal(at.note, undefined);
  // The connection is fine: the next set goes through.
  assert.deepEqual(await p.set({ note: { emoji: '🎧' } }), { mode: 'dnd', note: { emoji: '🎧' } });
});

test('invisible: the others see a leave and keep no record; the own client sees itself as before', async (t) => {
  const ch = uniq('ghost');
  const [a, b] = await pair(t, ch);
  a.watch([b.uid]);
  await until('b watched online', () => a.user(b.uid).state === 'active');
  const left = next(a, 'presence', (d) => d.leaves.includes(b.uid));
  const offline = next(a, 'status', (d) => d.offline.includes(b.uid));
  await b.set({ mode: 'invisible' });
  await Promise.all([left, offline]);
  assert.equal(a.channel(ch).members.has(b.uid), false);
  assert.equal(a.record(b.uid), undefined, 'not present: no record');
  assert.equal(a.user(b.uid).state, 'offline');
  assert.equal(typeof a.user(b.uid).last_seen, 'number', 'with a last seen, as going offline');
  await until('its own record says invisible', () => b.record(b.uid)?.mode === 'invisible');
  assert.ok(b.channel(ch).members.has(b.uid), 'its own channel still lists it');
  assert.equal((await api(base, `/api/presence/${b.uid}`)).online, false, 'offline to the API without a key');

  // A new connection of the invisible user: its snapshot lists itself, its welcome and joined say invisible.
  const b2 = client(t, { url, uid: b.uid, channels: [ch] });
  await next(b2, 'joined');
  assert.equal(b2.record(b.uid).mode, 'invisible');
  assert.ok(b2.channel(ch).members.has(b.uid));

  const back = next(a, 'presence', (d) => d.joins.includes(b.uid));
  await b.set({ mode: 'online' });
  assert.deepEqual((await back).users, { [b.uid]: {} });
  assert.deepEqual(a.record(b.uid), {});
  await until('watched online again', () => a.user(b.uid).state === 'active');
});

test('mode and note outlive a reconnect: the welcome says them', async (t) => {
  const uid = uniq('keeper');
  const p = client(t, { url, uid });
  await next(p, 'state', (s) => s.state === 'live');
  await p.set({ mode: 'dnd', note: { text: 'back at 3' } });
  p.close();
  await until('offline', async () => !(await api(base, `/api/presence/${uid}`)).online);
  const again = client(t, { url, uid });
  assert.equal(again.record(uid), undefined, 'nothing known before the welcome');
  await next(again, 'state', (s) => s.state === 'live');
  assert.deepEqual(again.record(uid), { mode: 'dnd', note: { text: 'back at 3' } });
});

test('a note with an until is cleared by the server, and the others hear of it', async (t) => {
  const ch = uniq('brb');
  const [a, b] = await pair(t, ch);
  const untilAt = Date.now() + 1500;
  const noted = next(a, 'presence', (d) => d.updated[b.uid]?.note !== undefined);
  await b.set({ note: { text: 'brb', until: untilAt } });
  await noted;
  const cleared = await next(a, 'presence', (d) => d.updated[b.uid] !== undefined && d.updated[b.uid].note === undefined);
  assert.ok(Date.now() >= untilAt, 'not before its until');
  assert.deepEqual(cleared.updated[b.uid], {});
  assert.deepEqual(a.record(b.uid), {});
  await until('its own record too', () => b.record(b.uid)?.note === undefined);
});

test('info from the token: the others see it in the snapshot and the diffs', async (t) => {
  const ch = uniq('named');
  const url = wsURL(jwtBase);
  const ann = uniq('ann');
  const ben = uniq('ben');
  const a = client(t, { url, token: sign(secret, ann, 3600, { info: { name: 'Ann' } }), channels: [ch] });
  await next(a, 'joined');
  const joined = next(a, 'presence', (d) => d.joins.includes(ben));
  const b = client(t, { url, token: sign(secret, ben, 3600, { info: { name: 'Ben', avatar: '/b.png' } }), channels: [ch] });
  await next(b, 'joined');
  assert.deepEqual((await joined).users, { [ben]: { info: { name: 'Ben', avatar: '/b.png' } } });
  assert.deepEqual(a.record(ben), { info: { name: 'Ben', avatar: '/b.png' } });
  assert.deepEqual(b.record(ann), { info: { name: 'Ann' } }, 'from the snapshot');
  assert.deepEqual(b.record(ben), { info: { name: 'Ben', avatar: '/b.png' } }, 'its own, from the snapshot');
  // A set keeps the info: the record is whole.
  const updated = next(a, 'presence', (d) => d.updated[ben] !== undefined);
  assert.deepEqual(await b.set({ mode: 'dnd' }), { info: { name: 'Ben', avatar: '/b.png' }, mode: 'dnd' });
  assert.deepEqual((await updated).updated[ben], { info: { name: 'Ben', avatar: '/b.png' }, mode: 'dnd' });
});
