// What the page's modules share: the elements they draw into, the mutable
// state of the page, the event log and the timing every panel reads. It
// imports no other module of the page, so any of them may import it without
// a cycle; the render loop lives in app.js and is reached through render and
// renderSoon, which app.js points at it with setRenderer.

import { WatchList } from './rooms.js';
import { fmtClock } from './format.js';

export const $ = (id) => document.getElementById(id);

// Enough to fill a room past the server's default snapshot of 100 members,
// under Chromium's cap of 255 WebSockets.
export const MAX_SIMS = 200;
const MAX_LOG = 300;
export const LOBBY = 'lobby';

export const ui = {
  pill: $('me-pill'),
  me: $('me'),
  meUid: $('me-uid'),
  meState: $('me-state'),
  meTransport: $('me-transport'),
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
export function newRoom(name) {
  return { name, state: 'joining', unread: 0, paging: false, countOnly: false, typingCount: 0 };
}

// page holds what is reassigned: an importer cannot assign an imported binding.
//   me: the page's connection (a stand-in until the page may connect);
//   mode: what the page knows of the server: 'demo' (it trusts ?uid=),
//     'token' (it needs a JWT) or 'unknown'; simulated clients have no
//     token, so Spawn is offered in demo mode only;
//   blocked, when set, says why the page does not connect: the server needs
//     a token and the page has none, or refused the one it has;
//   selected: the room the member list and the chat show;
//   ringInfo: the last reading of /api/ring.
export const page = { me: null, mode: 'unknown', blocked: '', selected: LOBBY, ringInfo: null };

// rooms: the channels this connection has joined or asked to join, in the
// order it asked, with what the page adds to the client's channel state.
export const rooms = new Map([[LOBBY, newRoom(LOBBY)]]);
export const watch = new WatchList();
// heard: when this page last saw a frame from a user it does not run (a chat).
export const heard = new Map();
export const sims = []; // {client, idleLogged}

export const live = (c) => c.state === 'live';

// syncChildren makes nodes the children of parent, touching the DOM only when
// they differ, so hover and tooltips survive the 5 Hz redraw.
export function syncChildren(parent, nodes) {
  const kids = parent.children;
  if (kids.length === nodes.length && nodes.every((n, i) => kids[i] === n)) return;
  parent.replaceChildren(...nodes);
}

let draw = () => {};
export function setRenderer(fn) { draw = fn; }
export function render() { draw(); }

// Events redraw at once (in a microtask, so a burst draws once); the loop
// in app.js only keeps the ages and fading dots current.
let renderQueued = false;
export function renderSoon() {
  if (renderQueued) return;
  renderQueued = true;
  queueMicrotask(() => {
    renderQueued = false;
    render();
  });
}

// ---- event log ----

export function logEvent(kind, uid, text, at = Date.now()) {
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
export function timeoutMs() {
  if (page.me.timeoutMs) return page.me.timeoutMs;
  if (page.ringInfo) return (page.ringInfo.slots - 1) * page.ringInfo.tick_ms;
  return 0;
}

export function tickMs() { return page.ringInfo ? page.ringInfo.tick_ms : 0; }

export function closeText(c) {
  if (!c) return '';
  const reason = c.reason ? ` ${c.reason}` : c.code === 1006 ? ' (no close frame: connection lost)' : '';
  return `${c.code}${reason}`;
}
