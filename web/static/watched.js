// The users this connection watches: whether each is online or away, since
// when, and for those offline when they were last seen.

import { fmtAgo, fmtDur, validUid } from './format.js';
import { $, live, logEvent, page, render, renderSoon, syncChildren, ui, watch } from './state.js';
import { PERSON_PARTS, drawPerson } from './people.js';

const MAX_WATCHED = 50;

export const STATUS_WORDS = { online: 'is online', offline: 'is offline', away: 'is away', active: 'is back' };


export function sendWatch() {
  // Offline, the client sends the list once live.
  if (page.me.watch) page.me.watch(watch.uids());
}

export function renderWatch(now) {
  const rows = new Map();
  for (const li of ui.watched.children) rows.set(li.dataset.uid, li);
  const frag = [];
  for (const u of watch.uids()) {
    const w = watch.users.get(u);
    let li = rows.get(u);
    if (!li) {
      li = document.createElement('li');
      li.dataset.uid = u;
      li.innerHTML = `<span class="dot"></span>${PERSON_PARTS}<span class="seen"></span>` +
        '<button type="button" class="small-btn icon" data-act="unwatch" aria-label="Stop watching" title="Stop watching">×</button>';
      li.querySelector('.uid').textContent = u;
    }
    const state = w.online === null || !live(page.me) ? 'unknown' : w.online ? 'online' : 'offline';
    const away = state === 'online' && w.away;
    li.dataset.online = state;
    li.dataset.never = String(state === 'offline' && !!w.never && !w.lastSeen);
    li.dataset.away = String(away);
    drawPerson(li, u, now);
    li.dataset.lastSeen = state === 'offline' && w.lastSeen ? String(w.lastSeen) : '';
    const since = w.since ? ` for ${fmtDur(now - w.since)}` : '';
    let seen;
    if (state === 'unknown') seen = live(page.me) ? 'asking…' : 'not connected';
    else if (away) seen = 'away';
    else if (state === 'offline' && w.lastSeen) seen = `last seen ${fmtAgo(now - w.lastSeen)}`;
    else if (state === 'offline' && w.never) seen = 'never seen';
    // Offline since before the watch: how long is not known, only the server's last seen says.
    else if (state === 'offline') seen = 'offline';
    else seen = `${state}${since}`;
    const text = li.querySelector('.seen');
    text.textContent = seen;
    text.title = state === 'offline' && w.lastSeen ? `offline since ${new Date(w.lastSeen).toLocaleString()}`
      : state === 'offline' && w.never ? 'the server has no record of this user online (it keeps them for -last-seen-ttl, 24 h by default)'
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


// askLastSeen asks the server of the watched users who are offline with no
// last seen known: the watching answer has it for those the server keeps one
// of (an older server's has none), and the API tells the others apart as
// never seen. Only a server in demo mode answers without a key.
const askingLastSeen = new Set();
export function askLastSeen() {
  if (page.mode !== 'demo') return;
  for (const u of watch.unseen()) {
    if (askingLastSeen.has(u)) continue;
    askingLastSeen.add(u);
    fetch(`/api/presence/${encodeURIComponent(u)}`, { cache: 'no-store' })
      .then((res) => (res.ok ? res.json() : null))
      .then((p) => {
        if (!p || p.online) return;
        if (p.last_seen === undefined ? watch.neverSeen(u) : watch.lastSeen(u, p.last_seen)) renderSoon();
      })
      .catch(() => { /* the server is down: the status frames say it later */ })
      .finally(() => askingLastSeen.delete(u));
  }
}
