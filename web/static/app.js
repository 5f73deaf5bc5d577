// The demo page: one connection of its own, simulated clients, the ring, the
// rooms this connection joined with their members (away ones dimmed, big
// rooms paged), the users it watches with their last seen, an event log and
// a chat per room with who is typing. Everything comes from this server: the
// WebSocket at /ws, GET /api/ring, at load without a token one question that
// tells whether the server needs one (probeMode), and in demo mode
// GET /api/presence/{uid} for the last seen of a watched user. Every
// connection, the page's own and the simulated ones, is a Presenced client
// (/presenced.js): it keeps the channels' members, away and typing and
// re-joins after a reconnect; this page draws what it knows.
//
// This module is the wiring: the page's own connection and its panel, demo
// mode or tokens, the ring and the render loop. The other panels are
// sims.js, members.js, watched.js and chat.js; what they share is state.js.

import { FINAL_CLOSES, Presenced } from './presenced.js';
import { RingView } from './ring.js';
import { fmtDur, fmtClock, randomTag, socketURL, validUid } from './format.js';
import { $, closeText, heard, live, logEvent, page, renderSoon, rooms, setRenderer, sims, ui, watch } from './state.js';
import { removeSim, renderSims } from './sims.js';
import { dropRoom, renderRooms } from './members.js';
import { STATUS_WORDS, askLastSeen, renderWatch } from './watched.js';
import { addChat, showChat } from './chat.js';
import { renderStatus } from './status.js';
import { MODE_WORDS, noteWords } from './people.js';

const MAX_EDGES_LOGGED = 10; // per diff; a big diff is summed up after these

const params = new URLSearchParams(location.search);
const token = params.get('token') || '';

const ring = new RingView($('ring'));

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
page.me = { state: 'new', uid, transport: '', timeoutMs: 0, away: false, attempt: 0, retryAt: 0, liveSince: 0, lastSent: 0, lastRecv: 0, lastClose: null, channel: () => null, record: () => undefined };

// ---- demo mode or tokens ----

// probeMode tells demo mode from a server that needs tokens, with no side
// effect, and so that a healthy load logs no error in the console (a
// browser logs every 4xx answer): a page given a token takes the server to
// need one (a refused token is explained once its connection fails); one
// without asks for the count of online users, which a demo server answers
// with 200. Only when that is refused (403: tokens and no API key; 401: an
// API key, in either mode) does a heartbeat naming no user tell: 400 (not a
// valid user ID) in demo mode, 401 when a token is needed.
async function probeMode() {
  if (token) return 'token';
  try {
    const count = await fetch('/api/presence?limit=0', { cache: 'no-store' });
    if (count.ok) return 'demo';
    if (count.status === 403) return 'token';
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
  page.mode = m;
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
  page.blocked = why;
  ui.notice.textContent = why;
  ui.notice.hidden = false;
  if (page.me.close) page.me.close('no usable token');
  render();
}

const TOKEN_HELP = 'open this page with ?token=<JWT>: an HS256 token signed with the server\'s secret, ' +
  'with the user ID in "sub" and an "exp" (the page does not connect without one)';

// checkToken asks the server what it holds against the page's token, after
// an upgrade failed: a browser sees only a 1006 then, never the 401.
let checkingToken = false;
async function checkToken() {
  if (checkingToken || page.blocked) return;
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

// logUpdates logs the records that changed, once per user however many of
// this page's rooms and watches told of it in the same moment.
const lastLogged = new Map(); // uid -> what was logged of its record
function logUpdates(updated) {
  for (const [u, r] of Object.entries(updated || {}).slice(0, MAX_EDGES_LOGGED)) {
    if (u === page.me.uid) continue; // the status card shows it, and the picker logged it
    const words = [r.mode ? MODE_WORDS[r.mode] : 'online', r.note ? `note: ${noteWords(r.note)}` : 'no note'].join(' · ');
    if (lastLogged.get(u) === words) continue;
    lastLogged.set(u, words);
    if (lastLogged.size > 1000) lastLogged.delete(lastLogged.keys().next().value);
    logEvent('status', u, words);
  }
}

function dataText(v) {
  const s = JSON.stringify(v === undefined ? null : v);
  return s.length > 300 ? `${s.slice(0, 300)}…` : s;
}

// listen wires the page to its connection's events.
function listen() {
  page.me.addEventListener('state', (ev) => {
    const st = ev.detail.state;
    if (st === 'live') {
      welcomed = true;
      // Welcomed without a token: the server trusts ?uid=.
      if (page.mode === 'unknown' && !token) setMode('demo');
      // The client joins each room again; until its snapshot a room shows what the last connection knew, as stale.
      for (const r of rooms.values()) if (r.state === 'joined') r.state = 'joining';
      watch.unknown();
      const names = [...rooms.keys()];
      logEvent('conn', page.me.uid, `connected · timeout ${fmtDur(page.me.timeoutMs)}` + (names.length ? ` · joining ${names.join(', ')}` : ''));
    } else if (st === 'waiting' || (st === 'closed' && ev.detail.code !== undefined)) {
      closed(page.me.lastClose, st === 'waiting');
    }
    renderSoon();
  });
  page.me.addEventListener('frame', (ev) => {
    // What the client's channel state does not say: a count-only diff, and how many type past the ten named.
    const f = ev.detail;
    const r = rooms.get(f.channel);
    if (!r) return;
    if (f.type === 'joined') r.countOnly = false;
    if (f.type === 'presence' && !Array.isArray(f.joins)) r.countOnly = true;
    if (f.type === 'typing') r.typingCount = Number.isInteger(f.count) ? f.count : 0;
  });
  page.me.addEventListener('joined', (ev) => {
    const ch = ev.detail.channel;
    let r = rooms.get(ch);
    if (!r) return;
    if (r.state !== 'leaving') r.state = 'joined';
    r.paging = false;
    const c = page.me.channel(ch);
    const shown = c.complete ? '' : ` (${c.members.size} listed)`;
    const away = c.away.size ? ` · ${c.away.size} away` : '';
    logEvent('joined', '', `joined ${ch} · ${plural(c.count, 'member')}${shown}${away}`);
    renderSoon();
  });
  page.me.addEventListener('left', (ev) => {
    // The server took a room away.
    dropRoom(ev.detail.channel);
    logEvent('left', '', `left ${ev.detail.channel}`);
    renderSoon();
  });
  page.me.addEventListener('presence', (ev) => {
    const d = ev.detail;
    // Count-only diffs come at most once a tick from big rooms: the count shows them.
    logEdges('join', d.joins, `joined ${d.channel}`);
    logEdges('leave', d.leaves, `left ${d.channel}`);
    logEdges('away', d.away, `is away (${d.channel})`);
    logEdges('active', d.active, `is back (${d.channel})`);
    logUpdates(d.updated);
    renderSoon();
  });
  page.me.addEventListener('typing', renderSoon);
  page.me.addEventListener('chat', (ev) => {
    const f = ev.detail;
    if (typeof f.from !== 'string' || typeof f.text !== 'string') return;
    // A chat frame is a keepalive of its sender's connection.
    heard.set(f.from, Date.now());
    addChat(f.channel, { from: f.from, text: f.text }, Date.now());
  });
  page.me.addEventListener('publish', (ev) => {
    const text = dataText(ev.detail.data);
    addChat(ev.detail.channel, { text, system: 'published by the server' }, Date.now());
    logEvent('publish', '', `to ${ev.detail.channel}: ${text}`);
  });
  page.me.addEventListener('message', (ev) => {
    logEvent('message', '', `from the server to ${page.me.uid}: ${dataText(ev.detail.data)}`);
  });
  page.me.addEventListener('watching', (ev) => {
    watch.watching(ev.detail, Date.now());
    const on = watch.uids().filter((u) => watch.users.get(u).online);
    logEvent('watch', '', `watching ${plural(watch.size, 'user')}, ${on.length} online` + (on.length ? `: ${on.join(', ')}` : ''));
    askLastSeen();
    renderSoon();
  });
  page.me.addEventListener('status', (ev) => {
    for (const c of watch.status(ev.detail, Date.now())) logEvent(c.kind, c.uid, STATUS_WORDS[c.kind]);
    logUpdates(ev.detail.updated);
    renderSoon();
  });
  page.me.addEventListener('error', (ev) => {
    const ch = ev.detail.channel;
    logEvent('error', '', `server: ${ev.detail.error}` + (ch ? ` (${ch})` : ''));
  });
}


// welcomed says whether the server welcomed the current connection attempt.
let welcomed = false;

// closed logs a close of the page's connection, and stops for good on the
// closes that say the user cannot come back as it is.
function closed(c, retrying) {
  for (const r of rooms.values()) r.paging = false;
  const final = FINAL_CLOSES.includes(c.code);
  logEvent('conn', page.me.uid, `connection closed: ${closeText(c)}${retrying ? ' · reconnecting with backoff' : ''}`);
  if (c.code === 4401 && !welcomed) {
    // Refused before the server welcomed it: a token past its exp, or HTTP 401.
    block(`This server refused the token (${c.reason || 'token expired'}): ${TOKEN_HELP}.`);
  } else if (c.code === 4401) {
    block(`Your token expired and the server closed the connection (4401 token expired): ${TOKEN_HELP}.`);
  } else if (c.code === 4403) {
    block('The server disconnected this user (4403 disconnected): reload the page to connect again.');
  } else if (!final && !welcomed && token && page.mode !== 'demo') {
    checkToken();
  }
  welcomed = false;
}

function renderMe(now) {
  const s = page.me.state;
  ui.me.dataset.state = s;
  ui.pill.dataset.state = s;
  ui.pill.dataset.invisible = String(s === 'live' && page.me.record(page.me.uid)?.mode === 'invisible');
  ui.meUid.textContent = page.me.uid;
  ui.meUid.title = page.me.uid; // cut with an ellipsis where it is long
  let pill;
  let state;
  ui.meToggle.hidden = !!page.blocked;
  ui.meAway.hidden = !!page.blocked || !live(page.me);
  ui.meAway.textContent = page.me.away ? "I'm back" : 'Go away';
  ui.meAway.setAttribute('aria-pressed', String(page.me.away));
  ui.me.dataset.away = String(page.me.away);
  ui.meActivity.textContent = !live(page.me) ? '—' : page.me.away ? 'away: still online, drawn dimmed' : 'active';
  ui.meTransport.textContent = page.me.transport === 'sse' ? 'via SSE' : page.me.transport ? 'via WebSocket' : '—';
  ui.meTransport.dataset.transport = page.me.transport || '';
  if (page.blocked) {
    ui.me.dataset.state = 'needs-token';
    ui.pill.dataset.state = 'needs-token';
    ui.pill.lastElementChild.textContent = 'not connected';
    ui.meState.textContent = page.blocked;
    if (page.me.lastClose) ui.meClose.textContent = `${closeText(page.me.lastClose)} at ${fmtClock(page.me.lastClose.at)}`;
    return;
  }
  switch (s) {
    case 'connecting':
    case 'new':
      pill = 'connecting…';
      state = page.me.attempt ? `reconnecting (try ${page.me.attempt})…` : 'connecting…';
      break;
    case 'live':
      // Invisible is still connected: the pill says what everyone else sees.
      pill = ui.pill.dataset.invisible === 'true' ? `invisible as ${page.me.uid}` : `online as ${page.me.uid}`;
      state = `connected for ${fmtDur(now - page.me.liveSince)}`;
      break;
    case 'waiting': {
      const left = Math.max(0, page.me.retryAt - now);
      pill = `reconnecting in ${fmtDur(left)}`;
      state = `reconnect try ${page.me.attempt} in ${fmtDur(left)}`;
      break;
    }
    default:
      pill = 'disconnected';
      state = 'disconnected by you';
  }
  ui.pill.lastElementChild.textContent = pill;
  if (ui.pill.title !== pill) ui.pill.title = pill;
  ui.meState.textContent = state;
  ui.meToggle.textContent = s !== 'closed' ? 'Disconnect' : 'Connect';
  if (page.me.lastSent) ui.meKeepalive.textContent = `${fmtDur(now - page.me.lastSent)} ago`;
  if (page.me.lastRecv) ui.meRecv.textContent = `${fmtDur(now - page.me.lastRecv)} ago`;
  if (page.me.lastClose) ui.meClose.textContent = `${closeText(page.me.lastClose)} at ${fmtClock(page.me.lastClose.at)}`;
}

ui.meAway.addEventListener('click', () => {
  if (!live(page.me)) return;
  page.me.setActivity(page.me.away ? 'active' : 'away');
  logEvent(page.me.away ? 'away' : 'active', page.me.uid, page.me.away ? 'says it is away' : 'says it is back');
  renderSoon();
});

ui.meToggle.addEventListener('click', () => {
  if (page.me.state === 'new') return;
  if (page.me.state !== 'closed') page.me.close('disconnected by the user');
  else page.me.connect();
});

// A tab that comes back, or a network that returns, need not wait out the backoff.
document.addEventListener('visibilitychange', () => {
  if (!document.hidden && page.me.state === 'waiting') page.me.connect();
});
window.addEventListener('online', () => { if (page.me.state === 'waiting') page.me.connect(); });

// ---- the ring ----

async function pollRing() {
  let next = 2000;
  try {
    const res = await fetch('/api/ring', { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const r = await res.json();
    if (!(r.slots >= 2 && r.tick_ms > 0)) throw new Error('unexpected reply');
    page.ringInfo = r;
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
  renderStatus(now);
}

function loop() {
  render();
  setTimeout(loop, 200);
}

setRenderer(render);
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
  page.me = new Presenced({ url: socketURL({}), uid, token, channels: [...rooms.keys()] });
  globalThis.presenced = page.me; // for the console, and the browser tests
  listen();
  render();
});
