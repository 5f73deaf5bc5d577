// Records (who a user is, and its mode and note) and set(), against a
// scripted stand-in for the server: which frames give records, when they are
// let go, what a set sends and when its promise settles, and what a server
// that sends malformed records gets: skipped parts and error events, never
// an exception in the app.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, fakeServer, next, record, until } from './helpers.js';

const welcome = { type: 'welcome', uid: 'me', timeout_ms: 30000, protocol: '2.2' };
const soon = Date.now() + 3600000;

// answerPings makes a stand-in answer pings as the server does, in turn.
const answerPings = (ws) => ws.on('frame', (f) => { if (f.type === 'ping') ws.sendJSON({ type: 'pong' }); });

test('records come with the lists, follow updated, and go with their users', async (t) => {
  let sock;
  const url = await fakeServer(t, (ws) => {
    sock = ws;
    answerPings(ws);
    ws.sendJSON({ ...welcome, mode: 'dnd', note: { text: 'Lunch', emoji: '🥪' } });
    ws.on('frame', (f) => {
      if (f.type === 'leave') ws.sendJSON({ type: 'left', channel: f.channel });
      if (f.type === 'join') {
        ws.sendJSON({
          type: 'joined', channel: f.channel, count: 3, members: ['alice', 'bob', 'me'],
          users: { alice: { info: { name: 'Alice' } }, bob: { mode: 'dnd', note: { text: 'busy', until: soon } }, me: { info: { name: 'Me' }, mode: 'dnd', note: { text: 'Lunch', emoji: '🥪' } } },
        });
      }
    });
  });
  const p = client(t, { url, uid: 'me', channels: ['room'] });
  await next(p, 'joined');
  assert.deepEqual(p.record('me'), { info: { name: 'Me' }, mode: 'dnd', note: { text: 'Lunch', emoji: '🥪' } });
  assert.deepEqual(p.record('alice'), { info: { name: 'Alice' } });
  assert.deepEqual(p.record('bob'), { mode: 'dnd', note: { text: 'busy', until: soon } });
  assert.equal(p.record('zed'), undefined, 'never heard of');
  assert.equal(p.record('toString'), undefined);

  // A copy: changing it changes nothing.
  const a = p.record('alice');
  a.info.name = 'Mallory';
  a.mode = 'invisible';
  assert.deepEqual(p.record('alice'), { info: { name: 'Alice' } });

  // A join with its record, a record emptied, one changed.
  sock.sendJSON({
    type: 'presence', channel: 'room', count: 4, joins: ['carol'], leaves: [],
    users: { carol: { info: { name: 'Carol' } } }, updated: { bob: {}, alice: { info: { name: 'Alice' }, mode: 'dnd' } },
  });
  const d = await next(p, 'presence');
  assert.deepEqual(d.users, { carol: { info: { name: 'Carol' } } });
  assert.deepEqual(d.updated, { bob: {}, alice: { info: { name: 'Alice' }, mode: 'dnd' } });
  assert.deepEqual(p.record('bob'), {});
  assert.deepEqual(p.record('alice'), { info: { name: 'Alice' }, mode: 'dnd' });
  assert.deepEqual(p.record('carol'), { info: { name: 'Carol' } });
  // A join with no record has none; a count-only diff carries none.
  sock.sendJSON({ type: 'presence', channel: 'room', count: 5, joins: ['dan'], leaves: [] });
  assert.deepEqual((await next(p, 'presence')).users, { dan: {} });
  assert.deepEqual(p.record('dan'), {});
  sock.sendJSON({ type: 'presence', channel: 'room', count: 5000, users: { zoe: { mode: 'dnd' } }, updated: { dan: { mode: 'dnd' } } });
  const big = await next(p, 'presence');
  assert.deepEqual([big.users, big.updated], [{}, {}]);
  assert.deepEqual(p.record('dan'), {});
  assert.equal(p.record('zoe'), undefined);

  // A member who leaves, and is not watched, is let go.
  sock.sendJSON({ type: 'presence', channel: 'room', count: 4, joins: [], leaves: ['alice'] });
  await next(p, 'presence');
  assert.equal(p.record('alice'), undefined);

  // Watched users: records of those online, last seen of those offline.
  p.watch(['bob', 'dave', 'erin']);
  const w = await until('the watch sent', () => sock.frames.find((f) => f.type === 'watch'));
  assert.deepEqual(w.uids, ['bob', 'dave', 'erin']);
  sock.sendJSON({ type: 'watching', online: ['bob', 'dave'], users: { dave: { note: { emoji: '🎧' } } }, last_seen: { erin: 1764000000000 } });
  const wd = await next(p, 'watching');
  assert.deepEqual(wd, { online: ['bob', 'dave'], away: [], users: { bob: {}, dave: { note: { emoji: '🎧' } } }, last_seen: { erin: 1764000000000 } });
  assert.deepEqual(p.record('dave'), { note: { emoji: '🎧' } });
  assert.deepEqual(p.user('erin'), { state: 'offline', last_seen: 1764000000000 });
  assert.equal(p.record('erin'), undefined, 'offline: no record');

  sock.sendJSON({ type: 'status', online: ['erin'], offline: ['dave'], users: { erin: { mode: 'dnd' } }, last_seen: { dave: 1764000001000 } });
  const s1 = await next(p, 'status');
  assert.deepEqual([s1.users, s1.updated], [{ erin: { mode: 'dnd' } }, {}]);
  assert.equal(p.record('dave'), undefined, 'dave went offline');
  assert.deepEqual(p.record('erin'), { mode: 'dnd' });
  sock.sendJSON({ type: 'status', online: [], offline: [], updated: { erin: {}, dave: { mode: 'dnd' } } });
  const s2 = await next(p, 'status');
  assert.deepEqual(s2.updated, { erin: {} }, 'dave is not online: not his');
  assert.deepEqual(p.record('erin'), {});
  assert.equal(p.record('dave'), undefined);

  // bob, watched and a member: going offline at the watch keeps him while the room lists him.
  sock.sendJSON({ type: 'status', online: [], offline: ['bob'] });
  await next(p, 'status');
  assert.deepEqual(p.record('bob'), {});
  // Leaving the room lets go of its members, the own user excepted.
  await p.leave('room');
  for (const u of ['bob', 'carol', 'dan']) assert.equal(p.record(u), undefined, u);
  assert.deepEqual(p.record('erin'), {}, 'still watched and online');
  assert.deepEqual(p.record('me'), { info: { name: 'Me' }, mode: 'dnd', note: { text: 'Lunch', emoji: '🥪' } });
  // Unwatched, erin goes too.
  p.watch([]);
  assert.equal(p.record('erin'), undefined);
});

test('the own record: welcome, joined, updated; invisible said apart from the list', async (t) => {
  let sock;
  const url = await fakeServer(t, (ws) => {
    sock = ws;
    ws.sendJSON({ ...welcome, mode: 'invisible' });
    ws.on('frame', (f) => {
      if (f.type === 'join') ws.sendJSON({ type: 'joined', channel: f.channel, count: 200, members: ['a'], mode: 'invisible' });
    });
  });
  const p = client(t, { url, uid: 'me', channels: ['big'] });
  await next(p, 'state', (s) => s.state === 'live');
  assert.deepEqual(p.record('me'), { mode: 'invisible' });
  await next(p, 'joined');
  assert.deepEqual(p.record('me'), { mode: 'invisible' }, 'not listed, yet invisible');
  sock.sendJSON({ type: 'presence', channel: 'big', count: 200, joins: [], leaves: [], updated: { me: { note: { text: 'back' } } } });
  await next(p, 'presence');
  assert.deepEqual(p.record('me'), { note: { text: 'back' } }, 'its own update, from another of its connections');
});

test('set sends what it is given, queued until live, and resolves when the server took it', async (t) => {
  let sock;
  const url = await fakeServer(t, (ws) => {
    sock = ws;
    answerPings(ws);
    ws.sendJSON(welcome);
  });
  const p = client(t, { url, uid: 'me' });
  const first = p.set({ mode: 'dnd' }); // before live
  assert.equal(p.state, 'connecting');
  assert.deepEqual(await first, { mode: 'dnd' });
  assert.deepEqual(sock.frames.slice(0, 2), [{ type: 'set', mode: 'dnd' }, { type: 'ping' }]);
  assert.deepEqual(p.record('me'), { mode: 'dnd' });

  sock.frames.length = 0;
  assert.deepEqual(await p.set({ note: { text: 'In a meeting', emoji: '📅', until: soon } }), { mode: 'dnd', note: { text: 'In a meeting', emoji: '📅', until: soon } });
  assert.deepEqual(await p.set({ note: null }), { mode: 'dnd' });
  assert.deepEqual(await p.set({ mode: 'online', note: { emoji: '🌴' } }), { note: { emoji: '🌴' } });
  assert.deepEqual(sock.frames.filter((f) => f.type === 'set'), [
    { type: 'set', note: { text: 'In a meeting', emoji: '📅', until: soon } },
    { type: 'set', note: null },
    { type: 'set', mode: 'online', note: { emoji: '🌴' } },
  ], 'only the keys given');

  // Calls the server would refuse fail at once, naming the field, and send nothing.
  sock.frames.length = 0;
  const refused = [
    [{}, /set needs "mode" or "note"/],
    [{ mode: 'busy' }, /"mode" must be "online", "dnd" or "invisible"/],
    [{ note: 'hi' }, /"note" must be an object/],
    [{ note: {} }, /"note.text" or "note.emoji" must be set/],
    [{ note: { until: soon } }, /"note.text" or "note.emoji" must be set/],
    [{ note: { text: 7 } }, /"note.text" must be a string/],
    [{ note: { text: 'x'.repeat(129) } }, /"note.text" is too long: at most 128 characters/],
    [{ note: { emoji: '🙂'.repeat(17) } }, /"note.emoji" is too long: at most 16 characters/],
    [{ note: { text: 'x', until: 1.5 } }, /"note.until"/],
    [null, /set takes/],
  ];
  for (const [change, re] of refused) await assert.rejects(p.set(change), (err) => err instanceof TypeError && re.test(err.message), JSON.stringify(change));
  // Lengths are code points: 128 characters and 16 emoji of two UTF-16 units each pass.
  await p.set({ note: { text: '€'.repeat(128), emoji: '🙂'.repeat(16) } });
  assert.deepEqual(sock.frames.filter((f) => f.type === 'set').length, 1);
});

test('set: an error frame rejects the set it answers, and only that one', async (t) => {
  let sock;
  const url = await fakeServer(t, (ws) => {
    sock = ws;
    ws.sendJSON(welcome);
    ws.on('frame', (f) => {
      if (f.type === 'set' && f.note && f.note.until && f.note.until < Date.now()) {
        ws.sendJSON({ type: 'error', error: '"note.until" must be in the future and at most 7 days ahead, in Unix milliseconds' });
      }
      if (f.type === 'ping') ws.sendJSON({ type: 'pong' });
    });
  });
  const p = client(t, { url, uid: 'me' });
  const errors = record(p, 'error');
  await next(p, 'state', (s) => s.state === 'live');
  // A ping of the app's own, in flight before the sets: its pong confirms neither.
  p.send({ type: 'ping' });
  const bad = p.set({ note: { text: 'late', until: 1000 } });
  const good = p.set({ mode: 'dnd' });
  await assert.rejects(bad, /presenced: set: "note.until" must be in the future/);
  assert.deepEqual(await good, { mode: 'dnd' });
  assert.deepEqual(errors, [{ type: 'error', error: '"note.until" must be in the future and at most 7 days ahead, in Unix milliseconds' }], 'told as an error event too');
  assert.deepEqual(p.record('me'), { mode: 'dnd' }, 'the refused set changed nothing');
  assert.equal(sock.frames.filter((f) => f.type === 'ping').length, 3);
});

test('set: a connection lost before the answer rejects; one made while away goes out on the next', async (t) => {
  const conns = [];
  const url = await fakeServer(t, (ws, n) => {
    conns.push(ws);
    ws.sendJSON(welcome);
    // The first connection never answers, then drops; the next one answers.
    if (n > 0) answerPings(ws);
  });
  const p = client(t, { url, uid: 'me' });
  await next(p, 'state', (s) => s.state === 'live');
  const lost = p.set({ mode: 'dnd' });
  await until('the set at the server', () => conns[0].frames.some((f) => f.type === 'set'));
  conns[0].terminate();
  await assert.rejects(lost, /the connection ended \(1006\) before the server answered; the change may not have been made/);
  assert.equal(p.state, 'waiting');
  const later = p.set({ mode: 'invisible' });
  assert.deepEqual(await later, { mode: 'invisible' });
  assert.deepEqual(conns[1].frames.filter((f) => f.type === 'set'), [{ type: 'set', mode: 'invisible' }], 'the lost one is not sent again');
  // Closing rejects what waits, and later calls.
  conns[1].removeAllListeners('frame');
  const pending = p.set({ mode: 'online' });
  p.close();
  await assert.rejects(pending, /closed/);
  await assert.rejects(p.set({ mode: 'online' }), /closed/);
});

test('set: a frame dropped by the rate limit rejects the sets in flight', async (t) => {
  const url = await fakeServer(t, (ws) => {
    ws.sendJSON(welcome);
    ws.on('frame', (f) => {
      if (f.type === 'set') ws.sendJSON({ type: 'error', error: 'too many messages: slow down, this one was dropped' });
    });
  });
  const p = client(t, { url, uid: 'me' });
  await next(p, 'state', (s) => s.state === 'live');
  await assert.rejects(p.set({ mode: 'dnd' }), /dropped a frame \(too many messages.*\); the change may not have been made/);
});

test('a server that sends malformed records breaks nothing: parts skipped, errors told, the connection kept where it can be', async (t) => {
  let sock;
  const url = await fakeServer(t, (ws, n) => {
    sock = ws;
    answerPings(ws);
    ws.sendJSON(welcome);
    ws.on('frame', (f) => {
      if (f.type !== 'join') return;
      // The first connection's snapshot has users of the wrong type: not applied, the connection ends.
      if (n === 0) return ws.sendJSON({ type: 'joined', channel: f.channel, count: 1, members: ['me'], users: ['me'] });
      // Then good lists with bad entries, and names that are Object.prototype's.
      ws.send(`{"type":"joined","channel":"${f.channel}","count":6,"members":["__proto__","alice","bob","carol","constructor","me"],` +
        '"users":{"alice":5,"bob":{"info":[1],"mode":7,"note":{"text":9,"until":"soon"}},"carol":{"info":{"name":"Carol"},"mode":"online","note":{"emoji":"🎧","until":-4}},' +
        '"constructor":{"mode":"dnd"},"mallory":{"mode":"dnd"}}}');
    });
  });
  const p = client(t, { url, uid: 'me', channels: ['room'] });
  const errors = record(p, 'error');
  const states = record(p, 'state');
  const snapshots = record(p, 'joined');
  await until('the second snapshot', () => snapshots.length === 1);
  assert.deepEqual(states.filter((s) => s.state === 'waiting').map((s) => s.code), [1002]);
  assert.equal(errors[0].error, 'bad frame from the server: joined: users is not an object');
  assert.deepEqual(errors[1], { type: 'error', error: 'bad frame from the server: joined room: the users entry of "alice" is not a record', channel: 'room' });
  assert.deepEqual(p.record('__proto__'), {}, 'not Object.prototype');
  assert.deepEqual(p.record('alice'), {}, 'listed, its record unreadable');
  assert.deepEqual(p.record('bob'), {}, 'every part of the wrong type');
  assert.deepEqual(p.record('carol'), { info: { name: 'Carol' }, note: { emoji: '🎧' } });
  assert.deepEqual(p.record('constructor'), { mode: 'dnd' });
  assert.equal(p.record('mallory'), undefined, 'not listed: not present');

  // Diffs: a map of the wrong type ends the connection like a list of the wrong type.
  sock.sendJSON({ type: 'presence', channel: 'room', count: 6, joins: [], leaves: [], updated: 'everyone' });
  await until('the connection ended', () => states.filter((s) => s.state === 'waiting').length === 2);
  assert.match(errors.at(-1).error, /^bad frame from the server: presence: updated is not an object$/);
  // The old state stays until the new snapshot: wait for that one.
  await until('the third snapshot', () => snapshots.length === 2);
  // Bad entries of a good map are skipped, the rest applied; a __proto__ key is a user like any.
  const before = errors.length;
  sock.send('{"type":"presence","channel":"room","count":7,"joins":["dan"],"leaves":[],"users":{"dan":[]},' +
    '"updated":{"alice":"x","bob":{"mode":"dnd"},"__proto__":{"note":{"text":"hi"}},"zed":{"mode":"dnd"},"not an id":{}}}');
  const d = await next(p, 'presence');
  assert.deepEqual(d.updated, { bob: { mode: 'dnd' }, ['__proto__']: { note: { text: 'hi' } } });
  assert.equal(Object.getPrototypeOf(d.updated), Object.prototype, 'an own key, not a prototype');
  assert.deepEqual(d.users, {});
  assert.deepEqual(p.record('__proto__'), { note: { text: 'hi' } });
  assert.deepEqual(p.record('bob'), { mode: 'dnd' });
  assert.deepEqual(p.record('dan'), {});
  assert.equal(p.record('zed'), undefined);
  assert.deepEqual(errors.slice(before).map((e) => e.error), [
    'bad frame from the server: presence room: the users entry of "dan" is not a record',
    'bad frame from the server: presence room: the updated entry of "alice" is not a record',
  ]);

  // Watching and status: a bad map is skipped and told; the rest holds, and so does the connection.
  p.watch(['erin', 'fay']);
  await until('the watch sent', () => sock.frames.some((f) => f.type === 'watch'));
  sock.sendJSON({ type: 'watching', online: ['erin', 'fay'], users: [1, 2], last_seen: 'yesterday' });
  const w = await next(p, 'watching');
  assert.deepEqual([w.users, w.last_seen], [{ erin: {}, fay: {} }, {}]);
  assert.equal(p.user('erin').state, 'active');
  sock.sendJSON({ type: 'status', online: [], offline: ['fay'], users: 'x', updated: 3, last_seen: { fay: 'noon' } });
  const s = await next(p, 'status');
  assert.deepEqual([s.offline, s.users, s.updated, s.last_seen], [['fay'], {}, {}, {}]);
  assert.deepEqual(p.user('fay'), { state: 'offline', last_seen: null });
  assert.equal(p.record('fay'), undefined);
  assert.deepEqual(errors.slice(-4).map((e) => e.error), [
    'bad frame from the server: watching: last_seen is not an object',
    'bad frame from the server: watching: users is not an object',
    'bad frame from the server: status: users is not an object',
    'bad frame from the server: status: updated is not an object',
  ]);
  // A welcome with a mode and note of the wrong type on the next connection.
  assert.equal(p.state, 'live');
  assert.equal(states.filter((s) => s.state === 'waiting').length, 2, 'no more reconnects');
});

test('a page of members brings its records; a bad users map fails the page, not the connection', async (t) => {
  let sock;
  const url = await fakeServer(t, (ws) => {
    sock = ws;
    ws.sendJSON({ ...welcome, mode: 42, note: { text: ['x'] } });
    ws.on('frame', (f) => {
      if (f.type === 'join') ws.sendJSON({ type: 'joined', channel: f.channel, count: 4, members: ['a', 'b'] });
      if (f.type === 'members' && f.after === 'b') ws.sendJSON({ type: 'members', channel: f.channel, count: 4, members: ['c', 'd'], users: { c: { mode: 'dnd' } } });
    });
  });
  const p = client(t, { url, uid: 'me', channels: ['room'] });
  await next(p, 'joined');
  assert.deepEqual(p.record('me'), {}, 'a welcome with parts of the wrong type');
  assert.equal(p.record('c'), undefined);
  assert.equal(await p.loadPage('room'), true);
  assert.deepEqual([p.record('c'), p.record('d')], [{ mode: 'dnd' }, {}]);
  sock.removeAllListeners('frame');
  sock.on('frame', (f) => { if (f.type === 'join') sock.sendJSON({ type: 'joined', channel: f.channel, count: 4, members: ['a', 'b'] }); });
  sock.on('frame', (f) => { if (f.type === 'members') sock.sendJSON({ type: 'members', channel: f.channel, count: 4, members: ['c', 'd'], users: 'x' }); });
  await p.join('room'); // a new snapshot: a partial list again
  assert.equal(p.record('c'), undefined, 'past the new snapshot: let go');
  await assert.rejects(p.loadPage('room'), /bad members page: users is not an object/);
  assert.equal(p.state, 'live');
});
