// The rooms this connection joined, as tabs, and the selected room's member
// list: away members dimmed, each with how long ago this page last knew of a
// keepalive, and big rooms paged.

import { fmtDur, validChannel } from './format.js';
import { showChat, renderTyping } from './chat.js';
import { PERSON_PARTS, drawPerson } from './people.js';
import { $, MAX_SIMS, heard, live, logEvent, newRoom, page, render, renderSoon, rooms, sims, syncChildren, tickMs, timeoutMs, ui, watch } from './state.js';

const MAX_USERS_SHOWN = 1000;
const MAX_ROOMS = 20;


// lastHeard is when this page last knew of a keepalive from u, or 0.
function lastHeard(u) {
  if (u === page.me.uid && live(page.me)) return page.me.lastSent;
  const sim = sims.find((s) => s.client.uid === u);
  if (sim && live(sim.client)) return sim.client.lastSent;
  return heard.get(u) || 0;
}

export function renderRooms(now) {
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
      b.title = r.name; // a long name is cut with an ellipsis
    }
    b.dataset.state = r.state;
    b.setAttribute('aria-selected', String(r.name === page.selected));
    b.querySelector('.n').textContent = r.state === 'joined' ? String(page.me.channel(r.name)?.count ?? 0) : '…';
    b.querySelector('.unread').textContent = r.unread ? String(r.unread) : '';
    tabs.push(b);
  }
  syncChildren(ui.roomTabs, tabs);

  const r = rooms.get(page.selected);
  // What the client knows of the channel; the last connection's while a new one joins again.
  const c = (r && page.me.channel(r.name)) || { count: 0, members: new Set(), away: new Set(), typing: [], complete: true };
  ui.roomsCard.dataset.channel = r ? r.name : '';
  ui.roomsCard.dataset.state = r ? r.state : 'none';
  ui.roomsCard.dataset.partial = String(!!r && !c.complete);
  ui.roomsCard.classList.toggle('stale', !live(page.me) || !r || r.state !== 'joined');
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
  ui.roomMore.hidden = !(r.state === 'joined' && live(page.me) && !c.complete);
  ui.roomMore.disabled = r.paging;
  ui.roomMore.textContent = r.paging ? 'loading…' : countOnly ? 'reload the list' : 'load more';

  const t = timeoutMs();
  const mine = new Map(sims.map((s, i) => [s.client.uid, i]));
  const rank = (u) => (u === page.me.uid ? -1 : mine.has(u) ? mine.get(u) : MAX_SIMS);
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
      li.innerHTML = `<span class="dot"></span>${PERSON_PARTS}<span class="tag"></span><span class="seen"></span>`;
      li.querySelector('.uid').textContent = u;
    }
    rows.delete(u);
    const at = lastHeard(u);
    const age = now - at;
    const known = at > 0 && t > 0 && age < t;
    const away = c.away.has(u);
    li.classList.toggle('known', known);
    // Never heard: a member (so online) whose keepalives this page cannot
    // see, drawn unlike a dot that emptied.
    li.dataset.heard = at === 0 ? 'never' : known ? 'recent' : 'lapsed';
    li.classList.toggle('away', away);
    drawPerson(li, u, now);
    li.querySelector('.dot').style.setProperty('--life', known ? (1 - age / t).toFixed(3) : '0');
    // An invisible user is listed only on its own pages: tell it that no one else sees it.
    const you = li.dataset.mode === 'invisible' ? 'you · invisible' : 'you';
    const tag = u === page.me.uid ? you : mine.has(u) ? 'simulated' : watch.has(u) ? 'watched' : '';
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
  const r = rooms.get(page.selected);
  if (!r || r.paging || !live(page.me)) return;
  r.paging = true;
  render();
  page.me.loadPage(r.name).then(() => {
    const c = page.me.channel(r.name);
    if (c) logEvent('members', '', `${r.name}: a page · ${c.members.size} of ${c.count} listed`);
  }, (err) => logEvent('error', '', `paging ${r.name}: ${err.message}`)).finally(() => {
    r.paging = false;
    renderSoon();
  });
});

function select(ch) {
  if (!rooms.has(ch)) return;
  page.selected = ch;
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
  if (page.me.state === 'new' || page.me.state === 'closed') {
    logEvent('error', '', 'not connected: cannot join now');
    return;
  }
  if (!rooms.has(ch)) rooms.set(ch, newRoom(ch));
  page.me.join(ch).catch((err) => {
    // Refused: the client has let it go.
    logEvent('error', '', err.message);
    dropRoom(ch);
    render();
  });
  ui.joinName.value = '';
  select(ch);
});

ui.roomLeave.addEventListener('click', () => {
  const r = rooms.get(page.selected);
  if (!r) return;
  r.state = 'leaving';
  const offline = !live(page.me);
  page.me.leave(r.name).catch(() => {}).finally(() => {
    dropRoom(r.name);
    logEvent('left', '', `left ${r.name}` + (offline ? ' (while disconnected)' : ''));
    render();
  });
  render();
});


export function dropRoom(ch) {
  if (!rooms.delete(ch)) return;
  for (const li of [...ui.chat.children]) if (li.dataset.channel === ch) li.remove();
  if (page.selected === ch) page.selected = rooms.keys().next().value || '';
  showChat();
}
