// The chat of the selected room and who is typing in it.

import { Throttle, fmtClock, typingText } from './format.js';
import { $, LOBBY, live, logEvent, page, rooms, ui } from './state.js';
import { nameOf } from './people.js';

const MAX_CHAT = 200;
const MAX_CHAT_BYTES = 4000; // under the server's default 4096-byte frame limit, with room for the JSON around it
// The server holds a typing mark for seconds after each typing frame: one
// every 2 s while keys are pressed keeps it up without a frame per key.
const TYPING_EVERY_MS = 2000;
const typingPace = new Throttle(TYPING_EVERY_MS);


export function addChat(ch, { from = '', text, system = '' }, at) {
  const r = rooms.get(ch);
  if (!r) return; // a room this page has left since
  const li = document.createElement('li');
  li.dataset.channel = ch;
  if (from) li.dataset.from = from;
  if (from === page.me.uid) li.className = 'mine';
  if (system) li.className = 'system';
  const head = document.createElement('div');
  head.className = 'head';
  const who = document.createElement(from ? 'code' : 'span');
  // The name as it was when the message came; the ID stays in the tooltip.
  who.textContent = from ? nameOf(from) : system;
  if (from && who.textContent !== from) who.className = 'named';
  // The ID in the tooltip: the head shows one line, cut with an ellipsis.
  if (from) who.title = from;
  const time = document.createElement('time');
  time.textContent = fmtClock(at);
  head.append(who, time);
  const body = document.createElement('p');
  body.textContent = text;
  li.append(head, body);
  li.hidden = ch !== page.selected;
  const stick = ui.chat.scrollHeight - ui.chat.scrollTop - ui.chat.clientHeight < 40;
  ui.chat.appendChild(li);
  while (ui.chat.childElementCount > MAX_CHAT) ui.chat.firstElementChild.remove();
  if (ch !== page.selected) r.unread++;
  else if (stick) ui.chat.scrollTop = ui.chat.scrollHeight;
  showChat();
}

// renderTyping says who types in the selected room, others than this user.
export function renderTyping(r, c) {
  const me = page.me.uid;
  const names = c.typing.map((u) => (u === me ? u : nameOf(u)));
  const t = r && r.state === 'joined' && live(page.me) ? typingText(names, Math.max(r.typingCount, c.typing.length), me) : '';
  if (ui.typing.textContent !== t) ui.typing.textContent = t;
}

// Typing is said of the room shown, while the box holds text: clearing
// the box is not typing.
ui.chatText.addEventListener('input', () => {
  const r = rooms.get(page.selected);
  if (!r || r.state !== 'joined' || !ui.chatText.value.trim()) return;
  if (live(page.me) && typingPace.due(r.name, Date.now())) page.me.typing(r.name);
});

// showChat shows the messages of the selected room only.
export function showChat() {
  let any = false;
  for (const li of ui.chat.children) {
    li.hidden = li.dataset.channel !== page.selected;
    any ||= !li.hidden;
  }
  ui.chatEmpty.hidden = any;
  ui.chatEmpty.textContent = !rooms.has(page.selected) ? 'Join a room to chat.'
    : page.selected === LOBBY ? 'Open this page in a second window and say hello.'
      : `Nothing said in ${page.selected} yet.`;
}

$('chat-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = ui.chatText.value.trim();
  if (!text) return;
  const r = rooms.get(page.selected);
  if (!r || r.state !== 'joined') {
    logEvent('error', '', 'join a room first: chat goes to the members of a room');
    return;
  }
  if (new TextEncoder().encode(text).length > MAX_CHAT_BYTES) {
    logEvent('error', '', `message too long: at most ${MAX_CHAT_BYTES} bytes`);
    return;
  }
  if (!live(page.me)) {
    logEvent('error', '', 'not connected: the message was not sent');
    return;
  }
  page.me.chat(r.name, text);
  // The chat ends the typing mark; the next key starts a new one at once.
  typingPace.reset(r.name);
  ui.chatText.value = '';
});

