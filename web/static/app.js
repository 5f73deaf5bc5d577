// The demo page: one connection of its own, simulated clients, the ring, the
// users online, an event log and a chat. Everything comes from this server:
// the WebSocket at /ws and GET /api/ring.

import { Client } from './conn.js';
import { RingView } from './ring.js';
import { fmtDur, fmtClock, randomTag, validUid } from './format.js';

const $ = (id) => document.getElementById(id);

const MAX_SIMS = 100;
const MAX_LOG = 300;
const MAX_CHAT = 200;
const MAX_USERS_SHOWN = 150;
const MAX_CHAT_BYTES = 4000; // under the server's default 4096-byte frame limit, with room for the JSON around it

const params = new URLSearchParams(location.search);
const token = params.get('token') || '';
const simTag = randomTag();
let simSeq = 0;

const ui = {
  pill: $('me-pill'),
  me: $('me'),
  meUid: $('me-uid'),
  meState: $('me-state'),
  meKeepalive: $('me-keepalive'),
  meRecv: $('me-recv'),
  meClose: $('me-close'),
  meToggle: $('me-toggle'),
  ringStatus: $('ring-status'),
  ringWords: $('ring-words'),
  sims: $('sims'),
  simsEmpty: $('sims-empty'),
  simsCount: $('sims-count'),
  spawnN: $('spawn-n'),
  users: $('users'),
  usersCount: $('users-count'),
  chat: $('chat'),
  chatEmpty: $('chat-empty'),
  chatText: $('chat-text'),
  log: $('log'),
};

const ring = new RingView($('ring'));
let ringInfo = null; // last reading of /api/ring

// users: who the server says is online, and when this page last heard from
// each (0: not known, e.g. a user that never chatted).
const users = new Map();
const sims = []; // {client, idleLogged}

// syncChildren makes nodes the children of parent, touching the DOM only when
// they differ, so hover and tooltips survive the 5 Hz redraw.
function syncChildren(parent, nodes) {
  const kids = parent.children;
  if (kids.length === nodes.length && nodes.every((n, i) => kids[i] === n)) return;
  parent.replaceChildren(...nodes);
}

// ---- event log ----

function logEvent(kind, uid, text, at = Date.now()) {
  const li = document.createElement('li');
  li.dataset.kind = kind;
  if (uid) li.dataset.uid = uid;
  const time = document.createElement('time');
  time.dateTime = new Date(at).toISOString();
  time.textContent = fmtClock(at);
  const badge = document.createElement('span');
  badge.className = 'badge';
  badge.textContent = kind;
  const body = document.createElement('span');
  body.className = 'what';
  if (uid) {
    const who = document.createElement('code');
    who.textContent = uid;
    body.append(who, ' ');
  }
  body.append(text);
  li.append(time, badge, body);
  ui.log.prepend(li);
  while (ui.log.childElementCount > MAX_LOG) ui.log.lastElementChild.remove();
}

// ---- timing ----

// timeoutMs is the server's idle timeout: the welcome says it; the ring
// implies it before the welcome arrives.
function timeoutMs() {
  if (me.timeoutMs) return me.timeoutMs;
  if (ringInfo) return (ringInfo.slots - 1) * ringInfo.tick_ms;
  return 0;
}

function tickMs() { return ringInfo ? ringInfo.tick_ms : 0; }

function closeText(c) {
  if (!c) return '';
  const reason = c.reason ? ` ${c.reason}` : c.code === 1006 ? ' (no close frame: connection lost)' : '';
  return `${c.code}${reason}`;
}

// ---- this page's own connection ----

let uid = params.get('uid') || '';
if (uid && !validUid(uid)) {
  logEvent('error', '', `?uid= is not a valid user ID (1–64 letters, digits or _.-@); using a guest ID instead`);
  uid = '';
}
if (!uid) uid = guestUid();

function guestUid() {
  // Per tab, so two windows are two users, but a reload keeps the name.
  try {
    const saved = sessionStorage.getItem('presenced.uid');
    if (saved && validUid(saved)) return saved;
    const fresh = `guest-${randomTag()}`;
    sessionStorage.setItem('presenced.uid', fresh);
    return fresh;
  } catch {
    return `guest-${randomTag()}`;
  }
}

const me = new Client({ uid, token, reconnect: true });

me.addEventListener('frame', (ev) => {
  const f = ev.detail;
  const now = Date.now();
  switch (f.type) {
    case 'welcome': {
      const before = new Map(users);
      users.clear();
      for (const u of Array.isArray(f.online) ? f.online : []) {
        if (typeof u === 'string') users.set(u, { heardAt: before.get(u)?.heardAt || 0 });
      }
      // Welcomed means online, whether or not the list was built before this connection counted.
      if (!users.has(me.uid)) users.set(me.uid, { heardAt: 0 });
      const n = users.size;
      logEvent('conn', me.uid, `connected · ${n} user${n === 1 ? '' : 's'} online · timeout ${fmtDur(me.timeoutMs)}`);
      break;
    }
    case 'presence': {
      if (typeof f.uid !== 'string') break;
      if (f.online) {
        if (!users.has(f.uid)) users.set(f.uid, { heardAt: 0 });
        logEvent('online', f.uid, 'is online');
      } else {
        users.delete(f.uid);
        logEvent('offline', f.uid, 'is offline');
      }
      break;
    }
    case 'chat': {
      if (typeof f.from !== 'string' || typeof f.text !== 'string') break;
      // A chat frame is a keepalive of its sender's connection.
      const u = users.get(f.from);
      if (u) u.heardAt = now;
      addChat(f.from, f.text, now);
      break;
    }
    case 'error':
      logEvent('error', '', `server: ${f.error}`);
      break;
  }
});

me.addEventListener('closed', (ev) => {
  const c = ev.detail;
  const then = me.reconnect && me.wanted ? ' · reconnecting with backoff' : '';
  logEvent('conn', me.uid, `connection closed: ${closeText(c)}${then}`);
});

function renderMe(now) {
  const s = me.state;
  ui.me.dataset.state = s;
  ui.pill.dataset.state = s;
  ui.meUid.textContent = me.uid;
  let pill;
  let state;
  switch (s) {
    case 'connecting':
    case 'new':
      pill = 'connecting…';
      state = me.attempt ? `reconnecting (try ${me.attempt})…` : 'connecting…';
      break;
    case 'open':
      pill = 'connecting…';
      state = 'socket open, waiting for the welcome';
      break;
    case 'live':
      pill = `online as ${me.uid}`;
      state = `connected for ${fmtDur(now - me.liveSince)}`;
      break;
    case 'waiting': {
      const left = Math.max(0, me.retryAt - now);
      pill = `reconnecting in ${fmtDur(left)}`;
      state = `reconnect try ${me.attempt} in ${fmtDur(left)}`;
      break;
    }
    default:
      pill = 'disconnected';
      state = 'disconnected by you';
  }
  ui.pill.lastElementChild.textContent = pill;
  ui.meState.textContent = state;
  ui.meToggle.textContent = me.wanted ? 'Disconnect' : 'Connect';
  if (me.lastSent) ui.meKeepalive.textContent = `${fmtDur(now - me.lastSent)} ago`;
  if (me.lastRecv) ui.meRecv.textContent = `${fmtDur(now - me.lastRecv)} ago`;
  if (me.lastClose) ui.meClose.textContent = `${closeText(me.lastClose)} at ${fmtClock(me.lastClose.at)}`;
}

ui.meToggle.addEventListener('click', () => {
  if (me.wanted) me.close('disconnected by the user');
  else me.connect();
});

// A tab that comes back, or a network that returns, need not wait out the backoff.
document.addEventListener('visibilitychange', () => {
  if (!document.hidden && me.state === 'waiting') me.connect();
});
window.addEventListener('online', () => { if (me.state === 'waiting') me.connect(); });

// ---- simulated clients ----

function spawn(n) {
  if (token) {
    logEvent('error', '', 'simulated clients have no token: they need a server in demo mode (no -jwt-secret)');
    return;
  }
  const room = MAX_SIMS - sims.length;
  if (room <= 0) {
    logEvent('error', '', `at most ${MAX_SIMS} simulated clients per page`);
    return;
  }
  n = Math.max(1, Math.min(n | 0 || 1, 50, room));
  for (let i = 0; i < n; i++) {
    // Pings at a spread of delays, so the clients land in different slots.
    const client = new Client({ uid: `sim-${simTag}-${++simSeq}`, pingAt: [0.2, 0.4] });
    const sim = { client, idleLogged: false };
    client.addEventListener('closed', (ev) => {
      logEvent('closed', client.uid, `connection closed: ${closeText(ev.detail)}`);
    });
    client.addEventListener('frame', (ev) => {
      if (ev.detail.type === 'error') logEvent('error', client.uid, `server: ${ev.detail.error}`);
    });
    client.addEventListener('change', renderSoon);
    sims.push(sim);
    client.connect();
  }
}

function silence(sim) {
  if (sim.client.silence()) {
    sim.idleLogged = false;
    logEvent('silenced', sim.client.uid, 'stops sending; the server will ignore its pongs');
  }
}

function bringBack(sim) {
  sim.idleLogged = false;
  logEvent('back', sim.client.uid, sim.client.ws ? 'sends a ping again' : 'reconnects');
  sim.client.bringBack();
}

function removeSim(sim) {
  sim.client.close('removed from the page');
  sims.splice(sims.indexOf(sim), 1);
}

// simView describes a simulated client now: its state for CSS and tests, a
// sentence, and how much of the timeout is left since its last keepalive.
function simView(sim, now) {
  const c = sim.client;
  const t = timeoutMs();
  if (c.state === 'closed' || c.state === 'waiting') {
    return { state: 'closed', text: `closed ${closeText(c.lastClose)}`, life: 0 };
  }
  if (c.state !== 'live') return { state: 'connecting', text: 'connecting…', life: 1 };
  const age = now - c.lastSent;
  const life = t ? Math.max(0, 1 - age / t) : 1;
  if (!c.silenced) return { state: 'live', text: `live · keepalive ${fmtDur(age)} ago`, life };
  if (!t || age < t / 2) {
    return { state: 'silenced', text: `silenced ${fmtDur(age)} ago · idle at ${fmtDur(t / 2)}`, life };
  }
  const left = t + tickMs() - age;
  const drop = left > 0 ? `closed within ${fmtDur(left)}` : 'due now';
  return { state: 'idle', text: `idle ${fmtDur(age)} · pinged, pongs ignored · ${drop}`, life };
}

function renderSims(now) {
  const rows = new Map();
  for (const li of ui.sims.children) rows.set(li.dataset.uid, li);
  const t = timeoutMs();
  const order = [];
  let live = 0;
  for (const sim of sims) {
    const c = sim.client;
    const v = simView(sim, now);
    if (v.state !== 'closed') live++;
    if (v.state === 'idle' && !sim.idleLogged) {
      sim.idleLogged = true;
      logEvent('idle', c.uid, `silent for ${fmtDur(t / 2)}, half the timeout: the server pings it now (idle by this page's clock)`);
    }
    let li = rows.get(c.uid);
    if (!li) li = simRow(c.uid);
    rows.delete(c.uid);
    li.dataset.state = v.state;
    li.querySelector('.status').textContent = v.text;
    li.querySelector('.life').style.setProperty('--life', v.life.toFixed(3));
    const canSilence = v.state === 'live';
    const silenceBtn = li.querySelector('[data-act="silence"]');
    silenceBtn.hidden = !canSilence;
    li.querySelector('[data-act="back"]').hidden = canSilence || v.state === 'connecting';
    order.push(li);
  }
  syncChildren(ui.sims, order);
  ui.simsEmpty.hidden = sims.length > 0;
  ui.simsCount.textContent = sims.length ? `${live} connected of ${sims.length}` : '';
}

function simRow(simUid) {
  const li = document.createElement('li');
  li.className = 'sim';
  li.dataset.uid = simUid;
  li.innerHTML = '<span class="state-dot"></span><div class="main"><code class="uid"></code><span class="status"></span>' +
    '<span class="life"><span></span></span></div><div class="btns">' +
    '<button type="button" class="small-btn" data-act="silence">Silence</button>' +
    '<button type="button" class="small-btn" data-act="back">Bring back</button>' +
    '<button type="button" class="small-btn icon" data-act="remove" aria-label="Remove" title="Remove">×</button></div>';
  li.querySelector('.uid').textContent = simUid;
  return li;
}

ui.sims.addEventListener('click', (ev) => {
  const btn = ev.target.closest('button[data-act]');
  if (!btn) return;
  const sim = sims.find((s) => s.client.uid === btn.closest('li').dataset.uid);
  if (!sim) return;
  if (btn.dataset.act === 'silence') silence(sim);
  else if (btn.dataset.act === 'back') bringBack(sim);
  else removeSim(sim);
  render();
});

$('spawn-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  spawn(Number(ui.spawnN.value));
  render();
});

$('silence-one').addEventListener('click', () => {
  const sim = sims.find((s) => s.client.live && !s.client.silenced);
  if (sim) silence(sim);
  else logEvent('error', '', 'no live simulated client to silence: spawn some first');
  render();
});

$('close-sims').addEventListener('click', () => {
  for (const sim of [...sims]) removeSim(sim);
  render();
});

// ---- users online ----

// lastHeard is when this page last knew of a keepalive from uid, or 0.
function lastHeard(u, info) {
  if (u === me.uid && me.live) return me.lastSent;
  const sim = sims.find((s) => s.client.uid === u);
  if (sim && sim.client.live) return sim.client.lastSent;
  return info.heardAt;
}

function renderUsers(now) {
  const t = timeoutMs();
  const mine = new Map(sims.map((s, i) => [s.client.uid, i]));
  const list = [...users.keys()].sort((a, b) => {
    const ra = a === me.uid ? -1 : mine.has(a) ? mine.get(a) : MAX_SIMS;
    const rb = b === me.uid ? -1 : mine.has(b) ? mine.get(b) : MAX_SIMS;
    return ra - rb || (a < b ? -1 : a > b ? 1 : 0);
  });
  const rows = new Map();
  for (const li of ui.users.children) if (li.dataset.uid) rows.set(li.dataset.uid, li);
  const shown = list.slice(0, MAX_USERS_SHOWN);
  const frag = [];
  for (const u of shown) {
    let li = rows.get(u);
    if (!li) {
      li = document.createElement('li');
      li.dataset.uid = u;
      li.innerHTML = '<span class="dot"></span><code class="uid"></code><span class="tag"></span><span class="seen"></span>';
      li.querySelector('.uid').textContent = u;
    }
    rows.delete(u);
    const heard = lastHeard(u, users.get(u));
    const age = now - heard;
    const known = heard > 0 && t > 0 && age < t;
    li.classList.toggle('known', known);
    li.querySelector('.dot').style.setProperty('--life', known ? (1 - age / t).toFixed(3) : '0');
    li.querySelector('.tag').textContent = u === me.uid ? 'you' : mine.has(u) ? 'simulated' : '';
    li.querySelector('.seen').textContent = heard > 0 ? `heard ${fmtDur(age)} ago` : '';
    li.title = known
      ? `last keepalive this page knows of: ${fmtDur(age)} ago; offline ${fmtDur(t)} to ${fmtDur(t + tickMs())} after the last one`
      : 'online; its keepalives are not visible from this page';
    frag.push(li);
  }
  if (list.length > shown.length) {
    let more = ui.users.querySelector('.more');
    if (!more) {
      more = document.createElement('li');
      more.className = 'more';
    }
    more.textContent = `and ${list.length - shown.length} more`;
    frag.push(more);
  }
  syncChildren(ui.users, frag);
  ui.usersCount.textContent = String(users.size);
  ui.users.closest('.card').classList.toggle('stale', !me.live);
}

// ---- chat ----

function addChat(from, text, at) {
  const li = document.createElement('li');
  li.dataset.from = from;
  if (from === me.uid) li.className = 'mine';
  const head = document.createElement('div');
  head.className = 'head';
  const who = document.createElement('code');
  who.textContent = from;
  const time = document.createElement('time');
  time.textContent = fmtClock(at);
  head.append(who, time);
  const body = document.createElement('p');
  body.textContent = text;
  li.append(head, body);
  const stick = ui.chat.scrollHeight - ui.chat.scrollTop - ui.chat.clientHeight < 40;
  ui.chat.appendChild(li);
  while (ui.chat.childElementCount > MAX_CHAT) ui.chat.firstElementChild.remove();
  if (stick) ui.chat.scrollTop = ui.chat.scrollHeight;
  ui.chatEmpty.hidden = true;
}

$('chat-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = ui.chatText.value.trim();
  if (!text) return;
  if (new TextEncoder().encode(text).length > MAX_CHAT_BYTES) {
    logEvent('error', '', `message too long: at most ${MAX_CHAT_BYTES} bytes`);
    return;
  }
  if (!me.send({ type: 'chat', text })) {
    logEvent('error', '', 'not connected: the message was not sent');
    return;
  }
  ui.chatText.value = '';
});

// ---- the ring ----

async function pollRing() {
  let next = 2000;
  try {
    const res = await fetch('/api/ring', { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const r = await res.json();
    if (!(r.slots >= 2 && r.tick_ms > 0)) throw new Error('unexpected reply');
    ringInfo = r;
    ring.update(r);
    ui.ringWords.textContent = ringWords(r);
    ui.ringStatus.textContent = '';
    // Twice a tick keeps the hand in step without flooding the server.
    next = Math.min(500, Math.max(100, r.tick_ms / 2));
  } catch (err) {
    ui.ringStatus.textContent = `ring unavailable (${err.message}); retrying`;
  }
  setTimeout(pollRing, next);
}

function ringWords(r) {
  const t = (r.slots - 1) * r.tick_ms;
  return `A connection silent for ${fmtDur(t)} is dropped within one more step (by ${fmtDur(t + r.tick_ms)}): ` +
    `the cursor moves one slot every ${fmtDur(r.tick_ms)} around ${r.slots} slots, and the server pings anything silent for ${fmtDur(t / 2)}.`;
}

// ---- render loop ----

function render() {
  const now = Date.now();
  renderMe(now);
  renderSims(now);
  renderUsers(now);
}

function loop() {
  render();
  setTimeout(loop, 200);
}

// Events redraw at once (in a microtask, so a burst draws once); the loop
// above only keeps the ages and fading dots current.
let renderQueued = false;
function renderSoon() {
  if (renderQueued) return;
  renderQueued = true;
  queueMicrotask(() => {
    renderQueued = false;
    render();
  });
}

me.addEventListener('change', renderSoon);
me.connect();
pollRing();
loop();
