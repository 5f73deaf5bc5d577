// Big channels: a snapshot cut short at the server's -member-list (100),
// the rest paged with loadMembers while diffs arrive, and the convergence
// target: a follower that reconnects while others come and go ends with
// exactly the server's members.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { client, env, members, next, post, raw, sorted, uniq, until, wsURL } from './helpers.js';

const base = env('PRESENCED_URL');
const proxied = env('PRESENCED_PROXY_URL'); // the same server, through a proxy /test/cut drops

// fill connects n bare users to ch, a few dozen at a time.
async function fill(t, prefix, n, ch) {
  const out = [];
  for (let i = 0; i < n; i += 50) {
    out.push(...await Promise.all(Array.from({ length: Math.min(50, n - i) }, (_, j) =>
      raw(t, base, `${prefix}-${String(i + j).padStart(3, '0')}`, [ch]))));
  }
  return out;
}

const exact = async (p, ch) => {
  const c = p.channel(ch);
  if (!c.complete) return false;
  const want = await members(base, ch);
  return c.count === want.length && JSON.stringify(sorted(c.members)) === JSON.stringify(want);
};

test('loadMembers pages to the exact member set while members come and go', async (t) => {
  const ch = uniq('big');
  const crowd = await fill(t, ch + '-m', 250, ch);
  const p = client(t, { url: wsURL(base), uid: uniq('pager'), channels: [ch] });
  await next(p, 'joined');
  let c = p.channel(ch);
  assert.equal(c.count, 251);
  assert.equal(c.members.size, 100, 'the snapshot lists the first 100');
  assert.equal(c.complete, false);
  // Diffs on both sides of the snapshot's last member, before and while paging.
  crowd[10].close();
  crowd[200].close();
  await raw(t, base, `${ch}-m-000a`, [ch]);
  const late = await raw(t, base, `${ch}-m-zzz`, [ch]);
  const loading = p.loadMembers(ch);
  crowd[150].close();
  await raw(t, base, `${ch}-m-150a`, [ch]);
  await loading;
  await until('exactly the server\'s members', () => exact(p, ch));
  c = p.channel(ch);
  assert.ok(c.members.has(`${ch}-m-000a`) && c.members.has(`${ch}-m-zzz`));
  assert.equal(c.members.has(`${ch}-m-010`), false);
  // Complete, it follows every diff.
  late.close();
  await until('the leave applied', () => !p.channel(ch).members.has(`${ch}-m-zzz`));
  assert.equal(p.channel(ch).complete, true);
  await until('still exact', () => exact(p, ch));
});

test('a follower of 300 members reconnects three times while 200 others come and go, and ends exact', async (t) => {
  const ch = uniq('conv');
  await fill(t, ch + '-m', 300, ch);
  const p = client(t, { url: wsURL(proxied), uid: uniq('follower'), channels: [ch] });
  await next(p, 'joined');
  assert.equal(p.channel(ch).complete, false);
  await p.loadMembers(ch);
  assert.equal(p.channel(ch).complete, true);
  let lives = 0;
  p.addEventListener('state', (e) => { if (e.detail.state === 'live') lives++; });

  const churn = [];
  for (let round = 0; round < 4; round++) {
    // A network failure between the follower and the server (three times):
    // while it waits and reconnects, 50 join and some of them and of the
    // earlier ones leave, spread over the sorted list.
    if (round < 3) await post(base, '/test/cut');
    churn.push(...await fill(t, `${ch}-c${round}`, 50, ch));
    for (let i = round; i < churn.length; i += 3) churn[i].close();
    if (round < 3) await until(`reconnect ${round + 1}`, () => lives === round + 1);
  }
  await until('the follower exact again', () => exact(p, ch));
  assert.equal(lives, 3);
  const c = p.channel(ch);
  assert.ok(c.count > 300, `${c.count} members`);
  assert.ok(c.members.size > 300);
});
