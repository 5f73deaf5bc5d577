// The server's webhook POSTs, checked by the standardwebhooks package (the
// Standard Webhooks reference library for JavaScript), not by code of ours.
// Run through `go test ./webhook -run TestStandardWebhooksLibraryVerifies`:
// the Go test serves a control endpoint that starts a real webhook Sender
// POSTing to the endpoint served here. Without it these tests skip.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createHmac, randomBytes } from 'node:crypto';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { until } from './helpers.js';

const CONTROL = process.env.PRESENCED_WEBHOOK_CONTROL;
const skip = CONTROL ? false : 'needs PRESENCED_WEBHOOK_CONTROL: run through go test ./webhook -run TestStandardWebhooksLibraryVerifies';

/** secret returns a fresh secret in the whsec_<base64> form. */
const secret = () => 'whsec_' + randomBytes(24).toString('base64');

/**
 * endpoint serves a backend's webhook URL on loopback, keeping every POST
 * as it arrived: {headers, body (the raw text), status}. answer(i) gives the
 * status of the i-th POST (from 0).
 */
async function endpoint(t, answer = () => 200) {
  const posts = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const post = { headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      post.status = answer(posts.length);
      posts.push(post);
      res.writeHead(post.status).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }));
  return { url: `http://127.0.0.1:${server.address().port}/hook`, posts };
}

/** sender has the Go test start a webhook Sender that POSTs events to url. */
async function sender(url, secret, events, maxBatch = 0) {
  const res = await fetch(CONTROL + '/senders', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ url, secret, events, max_batch: maxBatch }),
  });
  assert.equal(res.status, 204, await res.text());
}

/** delivered returns the events of the POSTs answered 2xx, in order of arrival. */
const delivered = (posts) => posts.filter((p) => p.status < 300).flatMap((p) => JSON.parse(p.body).events);

const withoutID = ({ id, ...rest }) => rest;

const edges = [
  { type: 'online', uid: 'zoë', at: 1764000000000 },
  { type: 'join', channel: 'lobby', uid: 'zoë', at: 1764000000001 },
  { type: 'online', uid: 'bob<&>', at: 1764000000002 },
  { type: 'join', channel: 'room "7"', uid: 'bob<&>', at: 1764000000003 },
  { type: 'away', uid: 'zoë', at: 1764000000004 },
  { type: 'leave', channel: 'lobby', uid: 'zoë', at: 1764000000005 },
  { type: 'offline', uid: 'zoë', at: 1764000000006 },
];

test('every POST of a real Sender verifies with the library, and a retried batch keeps its webhook-id and event ids', { skip }, async (t) => {
  const key = secret();
  const hook = await endpoint(t, (i) => (i === 0 ? 503 : 200)); // the first batch is refused once
  await sender(hook.url, key, edges, 3);
  await until('7 events delivered', () => delivered(hook.posts).length >= edges.length);

  const wh = new Webhook(key);
  for (const [i, p] of hook.posts.entries()) {
    // Both forms a receiver may hold the raw body in.
    assert.deepEqual(wh.verify(p.body, p.headers), JSON.parse(p.body), `POST ${i}`);
    assert.deepEqual(wh.verify(Buffer.from(p.body, 'utf8'), p.headers), JSON.parse(p.body), `POST ${i} as a Buffer`);
    assert.match(p.headers['webhook-id'], /^msg_[a-z2-7]{26}_\d+$/, `POST ${i}`);
    assert.match(p.headers['webhook-timestamp'], /^\d+$/, `POST ${i}`);
    // The deprecated header: keyed with the secret as given, whsec_ and all.
    const legacy = 'sha256=' + createHmac('sha256', key).update(p.body, 'utf8').digest('hex');
    assert.equal(p.headers['x-presenced-signature'], legacy, `POST ${i}: X-Presenced-Signature`);
  }

  const [first, retry] = hook.posts;
  assert.equal(first.status, 503);
  assert.equal(retry.headers['webhook-id'], first.headers['webhook-id'], 'the retry keeps the webhook-id');
  assert.equal(retry.body, first.body, 'the retry keeps the body, event ids included');

  // A backend that drops repeats by webhook-id gets each edge once, in order.
  const seen = new Set();
  const got = [];
  for (const p of hook.posts.filter((p) => p.status < 300)) {
    if (seen.has(p.headers['webhook-id'])) continue;
    seen.add(p.headers['webhook-id']);
    got.push(...JSON.parse(p.body).events);
  }
  assert.deepEqual(got.map(withoutID), edges);
  const ids = got.map((e) => e.id);
  assert.equal(new Set(ids).size, ids.length, `event ids not unique: ${ids}`);
  for (const id of ids) assert.match(id, /^evt_[a-z2-7]{26}_\d+_\d+$/);
});

test('a POST replayed past the 5-minute tolerance is refused by the library, as is one tampered with', { skip }, async (t) => {
  const key = secret();
  const hook = await endpoint(t);
  await sender(hook.url, key, edges.slice(0, 2));
  await until('the POST', () => hook.posts.length >= 1);
  const [p] = hook.posts;
  const wh = new Webhook(key);
  assert.deepEqual(wh.verify(p.body, p.headers).events.map(withoutID), edges.slice(0, 2));

  // The same bytes again, later: by the receiver's clock, which is all it has.
  const sent = Number(p.headers['webhook-timestamp']) * 1000;
  const later = (ms) => t.mock.method(Date, 'now', () => sent + ms);
  let clock = later(4 * 60 * 1000);
  assert.doesNotThrow(() => wh.verify(p.body, p.headers), 'within the tolerance a replay verifies: drop it by webhook-id');
  clock.mock.restore();
  clock = later(6 * 60 * 1000);
  assert.throws(() => wh.verify(p.body, p.headers), (err) => err instanceof WebhookVerificationError && /too old/.test(err.message),
    'replayed 6 minutes later');
  clock.mock.restore();

  // A replay restamped with the time of its replay: the signature covers the timestamp.
  const restamped = { ...p.headers, 'webhook-timestamp': String(Math.floor(Date.now() / 1000) + 1) };
  assert.throws(() => wh.verify(p.body, restamped), /No matching signature/, 'restamped');
  // Another batch's id, the body changed, another secret.
  assert.throws(() => wh.verify(p.body, { ...p.headers, 'webhook-id': p.headers['webhook-id'] + '0' }), /No matching signature/, 'another id');
  assert.throws(() => wh.verify(p.body.replace('zoë', 'eve'), p.headers), /No matching signature/, 'body changed');
  assert.throws(() => new Webhook(secret()).verify(p.body, p.headers), /No matching signature/, 'another secret');
});

test('a raw secret (not whsec_) verifies with the library in its raw format', { skip }, async (t) => {
  const raw = 'a raw shared secret, not base64';
  const hook = await endpoint(t);
  await sender(hook.url, raw, edges.slice(0, 1));
  await until('the POST', () => hook.posts.length >= 1);
  const [p] = hook.posts;
  assert.deepEqual(new Webhook(raw, { format: 'raw' }).verify(p.body, p.headers).events.map(withoutID), edges.slice(0, 1));
  const legacy = 'sha256=' + createHmac('sha256', raw).update(p.body, 'utf8').digest('hex');
  assert.equal(p.headers['x-presenced-signature'], legacy, 'X-Presenced-Signature');
});
