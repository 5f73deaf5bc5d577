// Servers written to misbehave, each started by its test: the client
// bounds what it reads, checks each frame before it changes any state,
// gives up on a connection that never welcomes it, and backs off from one
// that keeps dying young. Each test reports what it measured (ℹ lines).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { Presenced } from '../presenced.js';
import { client, fakeServer as serve, next, record, until } from './helpers.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const MiB = 1024 * 1024;
const welcome = { type: 'welcome', uid: 'me', timeout_ms: 30000 };
const ids = (n, from = 0) => Array.from({ length: n }, (_, i) => `m${String(from + i).padStart(3, '0')}`);

// A WebSocket as a browser has it: no options, no terminate, every message
// read whole before the page sees it; here the ws package behind it.
class BrowserLike {
  constructor(url) {
    const ws = new WebSocket(url);
    this.inner = ws;
    this.closes = 0;
    ws.onmessage = (e) => this.onmessage?.({ data: e.data });
    ws.onclose = (e) => this.onclose?.({ code: e.code, reason: e.reason });
    ws.onerror = () => this.onerror?.({});
  }
  get readyState() { return this.inner.readyState; }
  send(d) { this.inner.send(d); }
  close(code, reason) { this.closes++; this.inner.close(code, reason); }
}

test('paging stops with an error when next does not move past after', async (t) => {
  const ch = 'big';
  const afters = [];
  // Every page it serves is the second one, whatever it was asked: the same next.
  const url = await serve(t, (ws) => {
    ws.sendJSON(welcome);
    ws.on('frame', (f) => {
      if (f.type === 'join') ws.sendJSON({ type: 'joined', channel: f.channel, count: 300, members: ids(100) });
      if (f.type === 'members') {
        afters.push(f.after);
        ws.sendJSON({ type: 'members', channel: f.channel, count: 300, members: ids(100, 100), next: 'm199' });
      }
    });
  });
  const p = client(t, { url, uid: 'me', channels: [ch] });
  const errors = record(p, 'error');
  await next(p, 'joined');
  const start = Date.now();
  await assert.rejects(p.loadMembers(ch), /big: bad members page: next "m199" does not move past after "m199"/);
  // Nothing asks again by itself.
  await sleep(1000);
  const asked = afters.length;
  const took = Date.now() - start;
  assert.deepEqual(afters, ['m099', 'm199'], 'one good page, one that does not move on, then nothing');
  assert.equal(p.state, 'live', 'the connection stays');
  const c = p.channel(ch);
  assert.equal(c.members.size, 200, 'the good page applied, the bad one not');
  assert.equal(c.count, 300);
  assert.equal(c.complete, false);
  assert.deepEqual(errors.map((e) => e.channel), [ch]);
  assert.match(errors[0].error, /^bad frame from the server: members: next "m199" does not move past after "m199"/);
  // A new call tries once more, from where the list stands.
  await assert.rejects(p.loadPage(ch), /does not move past/);
  assert.deepEqual(afters, ['m099', 'm199', 'm199']);
  t.diagnostic(`same next: ${asked} page requests in ${took} ms (${(asked / (took / 1000)).toFixed(1)}/s), then one more for a new explicit call`);
});

test('a page outside the one asked for is not applied', async (t) => {
  const bad = [
    [{ members: ['m050'] }, /members: "m050" does not come after "m099"/], // before after
    [{ members: ids(101, 100), next: 'm200' }, /101 members, over the limit of 100/],
    [{ members: ['m100', 'm101'], next: 'm300' }, /next "m300" is not the page's last member/],
    [{ members: ['m101', 'm100'] }, /members: "m100" does not come after "m101"/],
    [{ members: ['m100', 'not an id'] }, /members: "not an id" is not a user ID/],
    [{ count: -1, members: [] }, /count -1 is not a whole number/],
  ];
  let i = 0;
  const url = await serve(t, (ws) => {
    ws.sendJSON(welcome);
    ws.on('frame', (f) => {
      if (f.type === 'join') ws.sendJSON({ type: 'joined', channel: f.channel, count: 300, members: ids(100) });
      if (f.type === 'members') ws.sendJSON({ type: 'members', channel: f.channel, count: 300, ...bad[i][0] });
    });
  });
  const p = client(t, { url, uid: 'me', channels: ['big'] });
  await next(p, 'joined');
  for (; i < bad.length; i++) {
    await assert.rejects(p.loadPage('big'), bad[i][1]);
    assert.deepEqual(p.channel('big').members, new Set(ids(100)), `case ${i}: not applied`);
  }
  assert.equal(p.state, 'live');
});

test('a message over maxMessageBytes ends the connection, unread (64 MB in a process of its own)', async (t) => {
  const big = Buffer.concat([Buffer.from('{"type":"message","data":"'), Buffer.alloc(64 * MiB, 'x'), Buffer.from('"}')]);
  const url = await serve(t, (ws) => {
    ws.sendJSON(welcome);
    ws.send(big, { binary: false });
  });
  const script = fileURLToPath(new URL('./bigframe-client.js', import.meta.url));
  const run = (...args) => new Promise((resolve, reject) => {
    execFile(process.execPath, ['--expose-gc', script, url, ...args], { timeout: 60000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${err.message}\n${stderr}`));
      else resolve(JSON.parse(stdout));
    });
  });
  const limited = await run(); // the default, 4 MiB
  assert.equal(limited.state, 'closed');
  assert.equal(limited.code, 1009);
  assert.match(limited.reason, /over maxMessageBytes \(4194304\)/);
  assert.equal(limited.message, undefined, 'never delivered');
  const grew = (r) => (r.peak - r.before) / MiB;
  assert.ok(grew(limited) < 24, `RSS grew ${grew(limited).toFixed(1)} MiB`);
  // What the same frame costs a client that lets it in: the measure measures.
  const open = await run(String(128 * MiB));
  assert.equal(open.message, 64 * MiB);
  assert.ok(grew(open) > 64, `RSS grew ${grew(open).toFixed(1)} MiB letting it in`);
  t.diagnostic(`64 MiB frame: RSS ${(limited.before / MiB).toFixed(0)} -> ${(limited.peak / MiB).toFixed(0)} MiB (+${grew(limited).toFixed(1)}) with the default limit; ` +
    `${(open.before / MiB).toFixed(0)} -> ${(open.peak / MiB).toFixed(0)} MiB (+${grew(open).toFixed(1)}) with a limit of 128 MiB`);
});

test('maxMessageBytes with the ws package and with a browser-like socket: a message at the limit passes, one byte more does not', async (t) => {
  const limit = MiB;
  const frame = (bytes, ch = 'x') => JSON.stringify({ type: 'message', data: ch.repeat((bytes - 28) / Buffer.byteLength(ch)) });
  assert.equal(Buffer.byteLength(frame(limit)), limit);
  const sizes = [];
  const url = await serve(t, (ws, n) => {
    ws.sendJSON(welcome);
    ws.send(sizes[n]);
  });
  for (const [name, WS] of [['ws', WebSocket], ['browser-like', BrowserLike]]) {
    for (const [body, ok] of [[frame(limit), true], [frame(limit + 1), false], [frame(limit + 2, 'é'), false]]) {
      sizes.push(body);
      const sockets = [];
      const Spy = class extends WS { constructor(...a) { super(...a); sockets.push(this); } };
      const p = client(t, { url, uid: 'me', WebSocket: Spy, maxMessageBytes: limit, reconnect: false });
      const events = record(p, 'message', 'state');
      const end = await until('a message or the close', () => events.find((e) => e.type === 'message' || e.state === 'closed'));
      const got = end.type === 'message' ? 'message' : `closed ${end.code}`;
      const what = `${name}, ${Buffer.byteLength(body)} bytes${body.includes('é') ? ` in ${body.length} chars` : ''}`;
      assert.equal(got, ok ? 'message' : 'closed 1009', what);
      if (!ok && name === 'browser-like') assert.equal(sockets[0].closes, 1, `${what}: closed by the client`);
      p.close();
    }
  }
});

test('no welcome: an attempt is dropped after connectTimeoutMs and retried with backoff', async (t) => {
  const d = new Presenced({ url: 'ws://127.0.0.1:9/ws', WebSocket });
  d.close(); // before it connects
  assert.equal(d.connectTimeoutMs, 10000, 'the default');
  // A listener that never answers the handshake...
  const accepted = [];
  const sockets = new Set();
  const silent = net.createServer((c) => {
    accepted.push(Date.now());
    sockets.add(c);
    c.on('error', () => {});
    c.on('close', () => sockets.delete(c));
  });
  silent.listen(0, '127.0.0.1');
  await once(silent, 'listening');
  t.after(() => {
    for (const c of sockets) c.destroy();
    silent.close();
  });
  // ...and a server that upgrades and never welcomes.
  const upgraded = [];
  const mute = await serve(t, () => upgraded.push(Date.now()));

  const timeout = 400;
  const figures = [];
  for (const [name, url, conns] of [
    ['never answers', `ws://127.0.0.1:${silent.address().port}/ws`, accepted],
    ['upgrades, never welcomes', mute, upgraded],
  ]) {
    const p = client(t, { url, uid: 'me', connectTimeoutMs: timeout });
    // Each attempt starts at a 'connecting' state, as it opens its socket.
    const at = [];
    p.addEventListener('state', (e) => at.push({ ...e.detail, t: Date.now() }));
    await until(`${name}: three attempts, at the server too`, () => at.filter((s) => s.state === 'connecting').length >= 3 && conns.length >= 3);
    const { reason } = p.lastClose;
    p.close();
    const opens = at.filter((s) => s.state === 'connecting').map((s) => s.t);
    const waits = at.filter((s) => s.state === 'waiting');
    assert.deepEqual(waits.slice(0, 2).map((s) => s.code), [1006, 1006], name);
    assert.equal(reason, `no welcome within ${timeout} ms`, name);
    assert.ok(waits[0].t - opens[0] >= timeout - 2, `${name}: dropped after ${waits[0].t - opens[0]} ms`);
    // The timeout, then the backoff: 0.25 to 0.5 s, then 0.5 to 1 s.
    const first = opens[1] - opens[0];
    const second = opens[2] - opens[1];
    assert.ok(first >= timeout + 250 - 2, `${name}: retried after ${first} ms`);
    assert.ok(second >= timeout + 500 - 2, `${name}: the backoff grows: ${second} ms`);
    figures.push(`${name}: first retry ${first} ms after the first attempt, the next ${second} ms later`);
  }
  t.diagnostic(`connectTimeoutMs ${timeout}: ${figures.join('; ')}`);
});

test('a second welcome on a connection is ignored: no rejoin, no loop', async (t) => {
  const joins = [];
  // It welcomes once more for every join, and once more mid-stream.
  const url = await serve(t, (ws) => {
    ws.sendJSON(welcome);
    ws.on('frame', (f) => {
      if (f.type !== 'join') return;
      joins.push(f.channel);
      ws.sendJSON(welcome);
      ws.sendJSON({ type: 'joined', channel: f.channel, count: 1, members: ['me'] });
      ws.sendJSON({ ...welcome, uid: 'someone-else', timeout_ms: 1 });
    });
  });
  const p = client(t, { url, uid: 'me', channels: ['a', 'b'] });
  const errors = record(p, 'error');
  const states = record(p, 'state');
  await until('both joined', () => p.channel('a').count === 1 && p.channel('b').count === 1);
  await sleep(1000);
  assert.deepEqual(joins.sort(), ['a', 'b'], 'each channel joined once');
  assert.equal(errors.length, 1, JSON.stringify(errors));
  assert.match(errors[0].error, /a second welcome on the connection/);
  assert.deepEqual(states.map((s) => s.state), ['connecting', 'live']);
  assert.equal(p.uid, 'me');
  assert.equal(p.timeoutMs, 30000, 'the first welcome holds');
  t.diagnostic(`welcome per join: ${joins.length} joins, ${errors.length} error event in 1 s`);
});

test('bad snapshots and diffs are not applied: the connection ends (1002) and the next one rebuilds', async (t) => {
  const ch = 'room';
  const script = [
    // 0: a frame before the welcome, frames of channels not joined, then a diff with a negative count.
    (ws) => {
      ws.sendJSON({ type: 'joined', channel: ch, count: 1, members: ['early'] });
      ws.sendJSON(welcome);
      ws.once('frame', () => {
        ws.sendJSON({ type: 'joined', channel: ch, count: 2, members: ['a', 'b'] });
        ws.sendJSON({ type: 'joined', channel: 'other', count: 1, members: ['x'] });
        ws.sendJSON({ type: 'presence', channel: 'other', count: 2, joins: ['y'], leaves: [] });
        ws.sendJSON({ type: 'typing', channel: 'other', users: ['x'] });
        ws.sendJSON({ type: 'left', channel: 'other' });
        ws.sendJSON({ type: 'presence', channel: ch, count: -7, joins: ['c'], leaves: ['a'] });
      });
    },
    // 1: a snapshot listing more members than its count.
    (ws) => {
      ws.sendJSON(welcome);
      ws.once('frame', () => ws.sendJSON({ type: 'joined', channel: ch, count: 1, members: ['a', 'b'] }));
    },
    // 2: a snapshot out of order.
    (ws) => {
      ws.sendJSON(welcome);
      ws.once('frame', () => ws.sendJSON({ type: 'joined', channel: ch, count: 2, members: ['b', 'a'] }));
    },
    // 3: a good one.
    (ws) => {
      ws.sendJSON(welcome);
      ws.once('frame', () => ws.sendJSON({ type: 'joined', channel: ch, count: 3, members: ['a', 'b', 'd'] }));
    },
  ];
  const url = await serve(t, (ws, n) => script[Math.min(n, 3)](ws));
  const p = client(t, { url, uid: 'me', channels: [ch] });
  const seen = [];
  p.addEventListener('error', (e) => seen.push({ error: e.detail.error, channel: e.detail.channel, count: p.channel(ch).count, members: [...p.channel(ch).members] }));
  const states = record(p, 'state');
  await until('the good snapshot', () => p.channel(ch).count === 3);
  assert.deepEqual([...p.channel(ch).members], ['a', 'b', 'd']);
  assert.deepEqual(p.channel('other'), { count: 0, members: new Set(), away: new Set(), typing: [], complete: false });
  assert.deepEqual(seen.map((s) => s.error), [
    'bad frame from the server: presence: count -7 is not a whole number',
    'bad frame from the server: joined: 2 members listed, count 1',
    'bad frame from the server: joined: members: "a" does not come after "b"',
  ]);
  assert.deepEqual(seen[0], { error: seen[0].error, channel: ch, count: 2, members: ['a', 'b'] }, 'the diff was not applied');
  assert.deepEqual(states.filter((s) => s.state === 'waiting').map((s) => s.code), [1002, 1002, 1002]);
  assert.equal(p.lastClose.reason, 'bad frame: joined: members: "a" does not come after "b"');
});

test('instant closes: the backoff keeps growing while connections die young', async (t) => {
  const conns = [];
  // It welcomes each connection and drops it at once.
  const url = await serve(t, (ws) => {
    conns.push(Date.now());
    ws.sendJSON(welcome);
    ws.close(1011, 'dying young');
  });
  const window = 4000;
  const p = client(t, { url, uid: 'me' });
  const lives = record(p, 'state');
  await until('three connections welcomed and dropped', () => p.attempt >= 3 && lives.filter((s) => s.state === 'live').length >= 3);
  await until('the window', () => Date.now() >= conns[0] + window);
  const inWindow = conns.filter((c) => c < conns[0] + window).length;
  // Attempt n waits at least half of min(15 s, 0.5 s * 2^n): 0, 0.25, 0.75, 1.75, 3.75 s...
  let allowed = 0;
  for (let at = 0; at < window; at += 250 * 2 ** (allowed - 1)) allowed++;
  assert.ok(inWindow <= allowed, `${inWindow} connections in ${window} ms, the backoff allows ${allowed}`);
  for (let k = 1; k < conns.length; k++) {
    assert.ok(conns[k] - conns[k - 1] >= 250 * 2 ** (k - 1) - 2, `gap ${k}: ${conns[k] - conns[k - 1]} ms`);
  }
  t.diagnostic(`instant closes: ${inWindow} connections in ${window} ms (the backoff allows at most ${allowed}; gaps ${conns.slice(1).map((c, k) => c - conns[k]).join(', ')} ms)`);
});
