// The demo page: one connection of its own, simulated clients, the ring, the
// rooms this connection joined with their members (away ones dimmed, big
// rooms paged), the users it watches with their last seen, an event log and
// a chat per room with who is typing. Everything comes from this server: the
// WebSocket at /ws, GET /api/ring, one POST /api/heartbeat with no identity
// at load, which tells whether the server needs a token, and in demo mode
// GET /api/presence/{uid} for the last seen of a watched user. Every
// connection, the page's own and the simulated ones, is a Presenced client
// (/presenced.js): it keeps the channels' members, away and typing and
// re-joins after a reconnect; this page draws what it knows.

import { FINAL_CLOSES, Presenced } from './presenced.js';
import { RingView } from './ring.js';
import { WatchList } from './rooms.js';
import { Throttle, fmtAgo, fmtDur, fmtClock, randomTag, socketURL, typingText, validChannel, validUid } from './format.js';

const $ = (id) => document.getElementById(id);

// Enough to fill a room past the server's default snapshot of 100 members,
// under Chromium's cap of 255 WebSockets.
const MAX_SIMS = 200;
const MAX_SPAWN = 100; // per click
const MAX_LOG = 300;
const MAX_CHAT = 200;
const MAX_USERS_SHOWN = 1000;
const MAX_WATCHED = 50;
const MAX_ROOMS = 20;
const MAX_EDGES_LOGGED = 10; // per diff; a big diff is summed up after these
const LOBBY = 'lobby';
const MAX_CHAT_BYTES = 4000; // under the server's default 4096-byte frame limit, with room for the JSON around it
// The server holds a typing mark for seconds after each typing frame: one
// every 2 s while keys are pressed keeps it up without a frame per key.
const TYPING_EVERY_MS = 2000;

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
  meAway: $('me-away'),
  meActivity: $('me-activity'),
  ringStatus: $('ring-status'),
  ringWords: $('ring-words'),
  sims: $('sims'),
  simsEmpty: $('sims-empty'),
  simsCount: $('sims-count'),
  spawnN: $('spawn-n'),
  spawnForm: $('spawn-form'),
  simsOff: $('sims-off'),
  simsAbout: $('sims-about'),
  notice: $('notice'),
  roomsCard: $('rooms-card'),
  roomTabs: $('room-tabs'),
  roomCount: $('room-count'),
  roomNote: $('room-note'),
  roomLeave: $('room-leave'),
  roomMore: $('room-more'),
  joinName: $('join-name'),
  members: $('members'),
  watched: $('watched'),
  watchedEmpty: $('watched-empty'),
  watchUid: $('watch-uid'),
  chatRoom: $('chat-room'),
  chat: $('chat'),
  chatEmpty: $('chat-empty'),
  chatText: $('chat-text'),
  typing: $('typing'),
  log: $('log'),
};

/**
 * newRoom is the page's side of a channel: state is joining (asked, no
 * snapshot on this connection yet), joined or leaving; countOnly says a diff
 * carried the count alone since the last snapshot (the list cannot follow);
 * paging, that a page is asked for.
 */
function newRoom(name) {
  return { name, state: 'joining', unread: 0, paging: false, countOnly: false, typingCount: 0 };
}

const ring = new RingView($('ring'));
let ringInfo = null; // last reading of /api/ring

// rooms: the channels this connection has joined or asked to join, in the
// order it asked, with what the page adds to the client's channel state;
// selected is the one the member list and the chat show.
const rooms = new Map([[LOBBY, newRoom(LOBBY)]]);
let selected = LOBBY;
const watch = new WatchList();
// heard: when this page last saw a frame from a user it does not run (a chat).
const heard = new Map();
const sims = []; // {client, idleLogged}
const typingPace = new Throttle(TYPING_EVERY_MS);

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

// me is the page's connection, made once the page knows it may connect;
// until then a stand-in says "not yet".
let me = { state: 'new', uid, timeoutMs: 0, away: false, attempt: 0, retryAt: 0, liveSince: 0, lastSent: 0, lastRecv: 0, lastClose: null, channel: () => null };
const live = (c) => c.state === 'live';

// ---- demo mode or tokens ----

// mode is what the page knows of the server: 'demo' (it trusts ?uid=),
// 'token' (it needs a JWT) or 'unknown'. Simulated clients have no token,
// so Spawn is offered in demo mode only.
let mode = 'unknown';
// blocked, when set, says why the page does not connect: the server needs
// a token and the page has none, or refused the one it has.
let blocked = '';

// probeMode asks once, with no side effect: a heartbeat that names no user
// is refused with 400 (not a valid user ID) by a server in demo mode, and
// with 401 by one that needs a token.
async function probeMode() {
  try {
    const res = await fetch('/api/heartbeat', { method: 'POST', cache: 'no-store' });
    if (res.status === 400) return 'demo';
    if (res.status === 401) return 'token';
  } catch {
    // The server is down: the connection's backoff copes, and a welcome
    // without a token says demo mode later.
  }
  return 'unknown';
}

function setMode(m) {
  mode = m;
  document.body.dataset.mode = m;
  ui.spawnForm.hidden = m !== 'demo';
  ui.simsAbout.hidden = m !== 'demo';
  ui.simsOff.hidden = m === 'demo';
  ui.simsOff.textContent = m === 'token'
    ? 'Simulated clients need a server in demo mode (no -jwt-secret): this one needs a token for each user.'
    : 'Simulated clients appear once this page knows the server runs in demo mode.';
  if (m !== 'demo') for (const sim of [...sims]) removeSim(sim);
}

// block stops the page's connection for good and says why on the page.
function block(why) {
  blocked = why;
  ui.notice.textContent = why;
  ui.notice.hidden = false;
  if (me.close) me.close('no usable token');
  render();
}

const TOKEN_HELP = 'open this page with ?token=<JWT>: an HS256 token signed with the server\'s secret, ' +
  'with the user ID in "sub" and an "exp" (the page does not connect without one)';

// checkToken asks the server what it holds against the page's token, after
// an upgrade failed: a browser sees only a 1006 then, never the 401.
let checkingToken = false;
async function checkToken() {
  if (checkingToken || blocked) return;
  checkingToken = true;
  try {
    const res = await fetch(`/api/heartbeat?${new URLSearchParams({ token })}`, { method: 'POST', cache: 'no-store' });
    if (res.status === 401 || res.status === 400) {
      let why = `HTTP ${res.status}`;
      try { why = (await res.json()).error || why; } catch { /* keep the status */ }
      block(`This server refused the token (${why}): ${TOKEN_HELP}.`);
    }
  } catch {
    // The server is down: the backoff goes on.
  } finally {
    checkingToken = false;
  }
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

// logEdges logs the users of one list of a diff, a few by name and the rest as a number.
function logEdges(kind, uids, text) {
  for (const u of uids.slice(0, MAX_EDGES_LOGGED)) logEvent(kind, u, text);
  if (uids.length > MAX_EDGES_LOGGED) logEvent(kind, '', `and ${plural(uids.length - MAX_EDGES_LOGGED, 'more user')}: ${text}`);
}

function dataText(v) {
  const s = JSON.stringify(v === undefined ? null : v);
  return s.length > 300 ? `${s.slice(0, 300)}…` : s;
}

// listen wires the page to its connection's events.
function listen() {
  me.addEventListener('state', (ev) => {
    const st = ev.detail.state;
    if (st === 'live') {
      welcomed = true;
      // Welcomed without a token: the server trusts ?uid=.
      if (mode === 'unknown' && !token) setMode('demo');
      // The client joins each room again; until its snapshot a room shows what the last connection knew, as stale.
      for (const r of rooms.values()) if (r.state === 'joined') r.state = 'joining';
      watch.unknown();
      const names = [...rooms.keys()];
      logEvent('conn', me.uid, `connected · timeout ${fmtDur(me.timeoutMs)}` + (names.length ? ` · joining ${names.join(', ')}` : ''));
    } else if (st === 'waiting' || (st === 'closed' && ev.detail.code !== undefined)) {
      closed(me.lastClose, st === 'waiting');
    }
    renderSoon();
  });
  me.addEventListener('frame', (ev) => {
    // What the client's channel state does not say: a count-only diff, and how many type past the ten named.
    const f = ev.detail;
    const r = rooms.get(f.channel);
    if (!r) return;
    if (f.type === 'joined') r.countOnly = false;
    if (f.type === 'presence' && !Array.isArray(f.joins)) r.countOnly = true;
    if (f.type === 'typing') r.typingCount = Number.isInteger(f.count) ? f.count : 0;
  });
  me.addEventListener('joined', (ev) => {
    const ch = ev.detail.channel;
    let r = rooms.get(ch);
    if (!r) return;
    if (r.state !== 'leaving') r.state = 'joined';
    r.paging = false;
    const c = me.channel(ch);
    const shown = c.complete ? '' : ` (${c.members.size} listed)`;
    const away = c.away.size ? ` · ${c.away.size} away` : '';
    logEvent('joined', '', `joined ${ch} · ${plural(c.count, 'member')}${shown}${away}`);
    renderSoon();
  });
  me.addEventListener('left', (ev) => {
    // The server took a room away.
    dropRoom(ev.detail.channel);
    logEvent('left', '', `left ${ev.detail.channel}`);
    renderSoon();
  });
  me.addEventListener('presence', (ev) => {
    const d = ev.detail;
    // Count-only diffs come at most once a tick from big rooms: the count shows them.
    logEdges('join', d.joins, `joined ${d.channel}`);
    logEdges('leave', d.leaves, `left ${d.channel}`);
    logEdges('away', d.away, `is away (${d.channel})`);
    logEdges('active', d.active, `is back (${d.channel})`);
    renderSoon();
  });
  me.addEventListener('typing', renderSoon);
  me.addEventListener('chat', (ev) => {
    const f = ev.detail;
    if (typeof f.from !== 'string' || typeof f.text !== 'string') return;
    // A chat frame is a keepalive of its sender's connection.
    heard.set(f.from, Date.now());
    addChat(f.channel, { from: f.from, text: f.text }, Date.now());
  });
  me.addEventListener('publish', (ev) => {
    const text = dataText(ev.detail.data);
    addChat(ev.detail.channel, { text, system: 'published by the server' }, Date.now());
    logEvent('publish', '', `to ${ev.detail.channel}: ${text}`);
  });
  me.addEventListener('message', (ev) => {
    logEvent('message', '', `from the server to ${me.uid}: ${dataText(ev.detail.data)}`);
  });
  me.addEventListener('watching', (ev) => {
    watch.watching(ev.detail, Date.now());
    const on = watch.uids().filter((u) => watch.users.get(u).online);
    logEvent('watch', '', `watching ${plural(watch.size, 'user')}, ${on.length} online` + (on.length ? `: ${on.join(', ')}` : ''));
    askLastSeen();
    renderSoon();
  });
  me.addEventListener('status', (ev) => {
    for (const c of watch.status(ev.detail, Date.now())) logEvent(c.kind, c.uid, STATUS_WORDS[c.kind]);
    renderSoon();
  });
  me.addEventListener('error', (ev) => {
    const ch = ev.detail.channel;
    logEvent('error', '', `server: ${ev.detail.error}` + (ch ? ` (${ch})` : ''));
  });
}

const STATUS_WORDS = { online: 'is online', offline: 'is offline', away: 'is away', active: 'is back' };

// askLastSeen asks the server when the watched users who are offline were
// last seen: the watching answer says who is online, not since when the
// others are gone. Only a server in demo mode answers without a key.
const askingLastSeen = new Set();
function askLastSeen() {
  if (mode !== 'demo') return;
  for (const u of watch.unseen()) {
    if (askingLastSeen.has(u)) continue;
    askingLastSeen.add(u);
    fetch(`/api/presence/${encodeURIComponent(u)}`, { cache: 'no-store' })
      .then((res) => (res.ok ? res.json() : null))
      .then((p) => {
        if (p && !p.online && watch.lastSeen(u, p.last_seen)) renderSoon();
      })
      .catch(() => { /* the server is down: the status frames say it later */ })
      .finally(() => askingLastSeen.delete(u));
  }
}

function dropRoom(ch) {
  if (!rooms.delete(ch)) return;
  for (const li of [...ui.chat.children]) if (li.dataset.channel === ch) li.remove();
  if (selected === ch) selected = rooms.keys().next().value || '';
  showChat();
}

// welcomed says whether the server welcomed the current connection attempt.
let welcomed = false;

// closed logs a close of the page's connection, and stops for good on the
// closes that say the user cannot come back as it is.
function closed(c, retrying) {
  for (const r of rooms.values()) r.paging = false;
  const final = FINAL_CLOSES.includes(c.code);
  logEvent('conn', me.uid, `connection closed: ${closeText(c)}${retrying ? ' · reconnecting with backoff' : ''}`);
  if (c.code === 4401) {
    block(`Your token expired and the server closed the connection (4401 token expired): ${TOKEN_HELP}.`);
  } else if (c.code === 4403) {
    block('The server disconnected this user (4403 disconnected): reload the page to connect again.');
  } else if (!final && !welcomed && token && mode !== 'demo') {
    checkToken();
  }
  welcomed = false;
}

function renderMe(now) {
  const s = me.state;
  ui.me.dataset.state = s;
  ui.pill.dataset.state = s;
  ui.meUid.textContent = me.uid;
  let pill;
  let state;
  ui.meToggle.hidden = !!blocked;
  ui.meAway.hidden = !!blocked || !live(me);
  ui.meAway.textContent = me.away ? "I'm back" : 'Go away';
  ui.meAway.setAttribute('aria-pressed', String(me.away));
  ui.me.dataset.away = String(me.away);
  ui.meActivity.textContent = !live(me) ? '—' : me.away ? 'away: still online, drawn dimmed' : 'active';
  if (blocked) {
    ui.me.dataset.state = 'needs-token';
    ui.pill.dataset.state = 'needs-token';
    ui.pill.lastElementChild.textContent = 'not connected';
    ui.meState.textContent = blocked;
    if (me.lastClose) ui.meClose.textContent = `${closeText(me.lastClose)} at ${fmtClock(me.lastClose.at)}`;
    return;
  }
  switch (s) {
    case 'connecting':
    case 'new':
      pill = 'connecting…';
      state = me.attempt ? `reconnecting (try ${me.attempt})…` : 'connecting…';
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
  ui.meToggle.textContent = s !== 'closed' ? 'Disconnect' : 'Connect';
  if (me.lastSent) ui.meKeepalive.textContent = `${fmtDur(now - me.lastSent)} ago`;
  if (me.lastRecv) ui.meRecv.textContent = `${fmtDur(now - me.lastRecv)} ago`;
  if (me.lastClose) ui.meClose.textContent = `${closeText(me.lastClose)} at ${fmtClock(me.lastClose.at)}`;
}

ui.meAway.addEventListener('click', () => {
  if (!live(me)) return;
  me.setActivity(me.away ? 'active' : 'away');
  logEvent(me.away ? 'away' : 'active', me.uid, me.away ? 'says it is away' : 'says it is back');
  renderSoon();
});

ui.meToggle.addEventListener('click', () => {
  if (me.state === 'new') return;
  if (me.state !== 'closed') me.close('disconnected by the user');
  else me.connect();
});

// A tab that comes back, or a network that returns, need not wait out the backoff.
document.addEventListener('visibilitychange', () => {
  if (!document.hidden && me.state === 'waiting') me.connect();
});
window.addEventListener('online', () => { if (me.state === 'waiting') me.connect(); });

// ---- simulated clients ----

function spawn(n) {
  if (mode !== 'demo') {
    logEvent('error', '', 'simulated clients have no token: they need a server in demo mode (no -jwt-secret)');
    return;
  }
  const room = MAX_SIMS - sims.length;
  if (room <= 0) {
    logEvent('error', '', `at most ${MAX_SIMS} simulated clients per page`);
    return;
  }
  n = Math.max(1, Math.min(n | 0 || 1, MAX_SPAWN, room));
  for (let i = 0; i < n; i++) {
    // Not reconnected: a simulated client closed stays closed until Bring back.
    const client = new Presenced({ url: socketURL({}), uid: `sim-${simTag}-${++simSeq}`, channels: [LOBBY], reconnect: false });
    const sim = { client, idleLogged: false };
    client.addEventListener('state', (ev) => {
      if (ev.detail.state === 'closed' && client.lastClose) logEvent('closed', client.uid, `connection closed: ${closeText(client.lastClose)}`);
      renderSoon();
    });
    client.addEventListener('error', (ev) => {
      const d = ev.detail;
      logEvent('error', client.uid, `server: ${d.error}` + (d.channel ? ` (${d.channel})` : ''));
    });
    sims.push(sim);
  }
}

function silence(sim) {
  if (sim.client.silence()) {
    sim.idleLogged = false;
    logEvent('silenced', sim.client.uid, 'stops sending; the server will ignore its pongs');
  }
}

function setAway(sim) {
  const c = sim.client;
  if (!live(c)) return;
  c.setActivity(c.away ? 'active' : 'away');
  logEvent(c.away ? 'away' : 'active', c.uid, c.away ? 'says it is away' : 'says it is back');
}

// bringBack sends a keepalive on a silenced socket that is still open, or reconnects.
function bringBack(sim) {
  const c = sim.client;
  sim.idleLogged = false;
  logEvent('back', c.uid, live(c) ? 'sends a ping again' : 'reconnects');
  if (live(c)) c.send({ type: 'ping' });
  else c.connect();
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
  if (!live(c)) return { state: 'connecting', text: 'connecting…', life: 1 };
  const age = now - c.lastSent;
  const life = t ? Math.max(0, 1 - age / t) : 1;
  if (!c.silenced) return { state: 'live', text: `${c.away ? 'away' : 'live'} · keepalive ${fmtDur(age)} ago`, life };
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
    li.dataset.away = String(c.away);
    // Saying so is a data frame, which would end a silence: only live ones.
    const awayBtn = li.querySelector('[data-act="away"]');
    awayBtn.hidden = !canSilence;
    awayBtn.textContent = c.away ? 'Back' : 'Away';
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
    '<button type="button" class="small-btn" data-act="away">Away</button>' +
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
  if (btn.dataset.act === 'away') setAway(sim);
  else if (btn.dataset.act === 'silence') silence(sim);
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
  const sim = sims.find((s) => live(s.client) && !s.client.silenced);
  if (sim) silence(sim);
  else logEvent('error', '', 'no live simulated client to silence: spawn some first');
  render();
});

$('close-sims').addEventListener('click', () => {
  for (const sim of [...sims]) removeSim(sim);
  render();
});

// ---- rooms and their members ----

// lastHeard is when this page last knew of a keepalive from u, or 0.
function lastHeard(u) {
  if (u === me.uid && live(me)) return me.lastSent;
  const sim = sims.find((s) => s.client.uid === u);
  if (sim && live(sim.client)) return sim.client.lastSent;
  return heard.get(u) || 0;
}

function renderRooms(now) {
  const tabs = [];
  const old = new Map();
  for (const b of ui.roomTabs.children) old.set(b.dataset.channel, b);
  for (const r of rooms.values()) {
    let b = old.get(r.name);
    if (!b) {
      b = document.createElement('button');
      b.type = 'button';
      b.className = 'tab';
      b.setAttribute('role', 'tab');
      b.dataset.channel = r.name;
      b.innerHTML = '<span class="name"></span><span class="n"></span><span class="unread"></span>';
      b.querySelector('.name').textContent = r.name;
    }
    b.dataset.state = r.state;
    b.setAttribute('aria-selected', String(r.name === selected));
    b.querySelector('.n').textContent = r.state === 'joined' ? String(me.channel(r.name)?.count ?? 0) : '…';
    b.querySelector('.unread').textContent = r.unread ? String(r.unread) : '';
    tabs.push(b);
  }
  syncChildren(ui.roomTabs, tabs);

  const r = rooms.get(selected);
  // What the client knows of the channel; the last connection's while a new one joins again.
  const c = (r && me.channel(r.name)) || { count: 0, members: new Set(), away: new Set(), typing: [], complete: true };
  ui.roomsCard.dataset.channel = r ? r.name : '';
  ui.roomsCard.dataset.state = r ? r.state : 'none';
  ui.roomsCard.dataset.partial = String(!!r && !c.complete);
  ui.roomsCard.classList.toggle('stale', !live(me) || !r || r.state !== 'joined');
  ui.roomLeave.hidden = !r;
  ui.roomCount.textContent = String(c.count);
  ui.chatRoom.textContent = r ? r.name : 'no room';
  ui.chatText.placeholder = r ? `Message ${r.name}…` : 'Join a room to chat';
  renderTyping(r, c);
  if (!r) {
    ui.roomNote.textContent = 'no room: join one';
    ui.roomMore.hidden = true;
    syncChildren(ui.members, []);
    return;
  }
  const noun = c.count === 1 ? 'member' : 'members';
  const countOnly = r.countOnly && !c.complete;
  if (r.state !== 'joined') ui.roomNote.textContent = `${r.state}…`;
  else if (countOnly) ui.roomNote.textContent = `${noun} · list partial: a room this big gets counts, not names`;
  else if (!c.complete) ui.roomNote.textContent = `${noun}, showing ${c.members.size}`;
  else ui.roomNote.textContent = noun;
  // Paging needs the room joined on a live connection: a page belongs to
  // the snapshot and diffs of the connection that asks.
  ui.roomMore.hidden = !(r.state === 'joined' && live(me) && !c.complete);
  ui.roomMore.disabled = r.paging;
  ui.roomMore.textContent = r.paging ? 'loading…' : countOnly ? 'reload the list' : 'load more';

  const t = timeoutMs();
  const mine = new Map(sims.map((s, i) => [s.client.uid, i]));
  const rank = (u) => (u === me.uid ? -1 : mine.has(u) ? mine.get(u) : MAX_SIMS);
  const list = [...c.members].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  const rows = new Map();
  for (const li of ui.members.children) if (li.dataset.uid) rows.set(li.dataset.uid, li);
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
    const at = lastHeard(u);
    const age = now - at;
    const known = at > 0 && t > 0 && age < t;
    const away = c.away.has(u);
    li.classList.toggle('known', known);
    li.classList.toggle('away', away);
    li.querySelector('.dot').style.setProperty('--life', known ? (1 - age / t).toFixed(3) : '0');
    const tag = u === me.uid ? 'you' : mine.has(u) ? 'simulated' : watch.has(u) ? 'watched' : '';
    li.querySelector('.tag').textContent = away ? (tag ? `${tag} · away` : 'away') : tag;
    li.querySelector('.seen').textContent = at > 0 ? `heard ${fmtDur(age)} ago` : '';
    li.title = known
      ? `last keepalive this page knows of: ${fmtDur(age)} ago; offline ${fmtDur(t)} to ${fmtDur(t + tickMs())} after the last one`
      : 'a member; its keepalives are not visible from this page';
    frag.push(li);
  }
  const hidden = c.count - shown.length;
  if (hidden > 0) {
    let more = ui.members.querySelector('.more');
    if (!more) {
      more = document.createElement('li');
      more.className = 'more';
    }
    more.textContent = list.length > shown.length ? `and ${hidden} more` : `and ${hidden} more not listed`;
    frag.push(more);
  }
  syncChildren(ui.members, frag);
}

ui.roomMore.addEventListener('click', () => {
  const r = rooms.get(selected);
  if (!r || r.paging || !live(me)) return;
  r.paging = true;
  render();
  me.loadPage(r.name).then(() => {
    const c = me.channel(r.name);
    if (c) logEvent('members', '', `${r.name}: a page · ${c.members.size} of ${c.count} listed`);
  }, (err) => logEvent('error', '', `paging ${r.name}: ${err.message}`)).finally(() => {
    r.paging = false;
    renderSoon();
  });
});

function select(ch) {
  if (!rooms.has(ch)) return;
  selected = ch;
  rooms.get(ch).unread = 0;
  showChat();
  render();
}

ui.roomTabs.addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-channel]');
  if (b) select(b.dataset.channel);
});

$('join-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const ch = ui.joinName.value.trim();
  if (!ch) return;
  if (!validChannel(ch)) {
    logEvent('error', '', `${JSON.stringify(ch)} is not a room name: 1–128 letters, digits or _.-:@/#`);
    return;
  }
  if (!rooms.has(ch) && rooms.size >= MAX_ROOMS) {
    logEvent('error', '', `at most ${MAX_ROOMS} rooms per page`);
    return;
  }
  if (me.state === 'new' || me.state === 'closed') {
    logEvent('error', '', 'not connected: cannot join now');
    return;
  }
  if (!rooms.has(ch)) rooms.set(ch, newRoom(ch));
  me.join(ch).catch((err) => {
    // Refused: the client has let it go.
    logEvent('error', '', err.message);
    dropRoom(ch);
    render();
  });
  ui.joinName.value = '';
  select(ch);
});

ui.roomLeave.addEventListener('click', () => {
  const r = rooms.get(selected);
  if (!r) return;
  r.state = 'leaving';
  const offline = !live(me);
  me.leave(r.name).catch(() => {}).finally(() => {
    dropRoom(r.name);
    logEvent('left', '', `left ${r.name}` + (offline ? ' (while disconnected)' : ''));
    render();
  });
  render();
});

// ---- watched users ----

function sendWatch() {
  // Offline, the client sends the list once live.
  if (me.watch) me.watch(watch.uids());
}

function renderWatch(now) {
  const rows = new Map();
  for (const li of ui.watched.children) rows.set(li.dataset.uid, li);
  const frag = [];
  for (const u of watch.uids()) {
    const w = watch.users.get(u);
    let li = rows.get(u);
    if (!li) {
      li = document.createElement('li');
      li.dataset.uid = u;
      li.innerHTML = '<span class="dot"></span><code class="uid"></code><span class="seen"></span>' +
        '<button type="button" class="small-btn icon" data-act="unwatch" aria-label="Stop watching" title="Stop watching">×</button>';
      li.querySelector('.uid').textContent = u;
    }
    const state = w.online === null || !live(me) ? 'unknown' : w.online ? 'online' : 'offline';
    const away = state === 'online' && w.away;
    li.dataset.online = state;
    li.dataset.away = String(away);
    li.dataset.lastSeen = state === 'offline' && w.lastSeen ? String(w.lastSeen) : '';
    const since = w.since ? ` for ${fmtDur(now - w.since)}` : '';
    let seen;
    if (state === 'unknown') seen = live(me) ? 'asking…' : 'not connected';
    else if (away) seen = 'away';
    else if (state === 'offline' && w.lastSeen) seen = `last seen ${fmtAgo(now - w.lastSeen)}`;
    else seen = `${state}${since}`;
    const text = li.querySelector('.seen');
    text.textContent = seen;
    text.title = state === 'offline' && w.lastSeen ? `offline since ${new Date(w.lastSeen).toLocaleString()}`
      : away ? `online, away${since}` : '';
    frag.push(li);
  }
  syncChildren(ui.watched, frag);
  ui.watchedEmpty.hidden = watch.size > 0;
}

$('watch-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const u = ui.watchUid.value.trim();
  if (!u) return;
  if (!validUid(u)) {
    logEvent('error', '', `${JSON.stringify(u)} is not a user ID: 1–64 letters, digits or _.-@`);
    return;
  }
  if (!watch.has(u) && watch.size >= MAX_WATCHED) {
    logEvent('error', '', `at most ${MAX_WATCHED} watched users per page`);
    return;
  }
  ui.watchUid.value = '';
  if (!watch.add(u)) return;
  sendWatch();
  render();
});

ui.watched.addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-act="unwatch"]');
  if (!b) return;
  if (watch.remove(b.closest('li').dataset.uid)) sendWatch();
  render();
});

// ---- chat ----

function addChat(ch, { from = '', text, system = '' }, at) {
  const r = rooms.get(ch);
  if (!r) return; // a room this page has left since
  const li = document.createElement('li');
  li.dataset.channel = ch;
  if (from) li.dataset.from = from;
  if (from === me.uid) li.className = 'mine';
  if (system) li.className = 'system';
  const head = document.createElement('div');
  head.className = 'head';
  const who = document.createElement(from ? 'code' : 'span');
  who.textContent = from || system;
  const time = document.createElement('time');
  time.textContent = fmtClock(at);
  head.append(who, time);
  const body = document.createElement('p');
  body.textContent = text;
  li.append(head, body);
  li.hidden = ch !== selected;
  const stick = ui.chat.scrollHeight - ui.chat.scrollTop - ui.chat.clientHeight < 40;
  ui.chat.appendChild(li);
  while (ui.chat.childElementCount > MAX_CHAT) ui.chat.firstElementChild.remove();
  if (ch !== selected) r.unread++;
  else if (stick) ui.chat.scrollTop = ui.chat.scrollHeight;
  showChat();
}

// renderTyping says who types in the selected room, others than this user.
function renderTyping(r, c) {
  const t = r && r.state === 'joined' && live(me) ? typingText(c.typing, Math.max(r.typingCount, c.typing.length), me.uid) : '';
  if (ui.typing.textContent !== t) ui.typing.textContent = t;
}

// Typing is said of the room shown, while the box holds text: clearing
// the box is not typing.
ui.chatText.addEventListener('input', () => {
  const r = rooms.get(selected);
  if (!r || r.state !== 'joined' || !ui.chatText.value.trim()) return;
  if (live(me) && typingPace.due(r.name, Date.now())) me.typing(r.name);
});

// showChat shows the messages of the selected room only.
function showChat() {
  let any = false;
  for (const li of ui.chat.children) {
    li.hidden = li.dataset.channel !== selected;
    any ||= !li.hidden;
  }
  ui.chatEmpty.hidden = any;
  ui.chatEmpty.textContent = !rooms.has(selected) ? 'Join a room to chat.'
    : selected === LOBBY ? 'Open this page in a second window and say hello.'
      : `Nothing said in ${selected} yet.`;
}

$('chat-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = ui.chatText.value.trim();
  if (!text) return;
  const r = rooms.get(selected);
  if (!r || r.state !== 'joined') {
    logEvent('error', '', 'join a room first: chat goes to the members of a room');
    return;
  }
  if (new TextEncoder().encode(text).length > MAX_CHAT_BYTES) {
    logEvent('error', '', `message too long: at most ${MAX_CHAT_BYTES} bytes`);
    return;
  }
  if (!live(me)) {
    logEvent('error', '', 'not connected: the message was not sent');
    return;
  }
  me.chat(r.name, text);
  // The chat ends the typing mark; the next key starts a new one at once.
  typingPace.reset(r.name);
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
  renderRooms(now);
  renderWatch(now);
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

showChat();
pollRing();
loop();
probeMode().then((m) => {
  setMode(m);
  if (m === 'token' && !token) {
    block(`This server needs a token: ${TOKEN_HELP}.`);
    logEvent('error', '', 'this server needs a token; not connecting');
    return;
  }
  me = new Presenced({ url: socketURL({}), uid, token, channels: [...rooms.keys()] });
  globalThis.presenced = me; // for the console, and the browser tests
  listen();
  render();
});
