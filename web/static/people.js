// How the page draws a person: the name the application gave it (info.name
// from its token), else its ID; a badge when it does not want to be
// disturbed; its note with a countdown when the note clears by itself. The
// records are the client's (presenced.js).

import { fmtLeft } from './format.js';
import { page } from './state.js';

const MAX_NAME = 64; // info is the application's: a long name must not push the row out

export const MODE_WORDS = { online: 'online', dnd: 'do not disturb', invisible: 'invisible' };

/** recordOf returns the client's record of uid, or an empty one. */
export function recordOf(uid) {
  const r = typeof page.me.record === 'function' ? page.me.record(uid) : undefined;
  return r || {};
}

/** nameOf returns what to call uid: its info.name when it has one, else the ID. */
export function nameOf(uid, r = recordOf(uid)) {
  const n = r.info && typeof r.info.name === 'string' ? r.info.name.trim() : '';
  if (!n) return uid;
  return n.length > MAX_NAME ? `${n.slice(0, MAX_NAME)}…` : n;
}

/** shownNote returns the note to show now: none once its until has passed on this clock. */
export function shownNote(r, now) {
  const n = r.note;
  if (!n || (n.until && n.until <= now)) return null;
  return n;
}

/** noteWords says a note in one line: "📅 In a meeting". */
export function noteWords(n) {
  return [n.emoji, n.text].filter(Boolean).join(' ');
}

/**
 * personParts is the markup of a person in a list row: a name (hidden when
 * it would only repeat the ID), the ID, the dnd badge and the note.
 */
export const PERSON_PARTS = '<span class="name"></span><code class="uid"></code>' +
  '<span class="dnd" title="do not disturb" hidden>dnd</span>' +
  '<span class="note-view" hidden><span class="emoji"></span><span class="text"></span><span class="left"></span></span>';

/** drawPerson fills the parts of a row made with PERSON_PARTS for uid. */
export function drawPerson(li, uid, now) {
  const r = recordOf(uid);
  const name = nameOf(uid, r);
  const nameEl = li.querySelector('.name');
  setText(nameEl, name === uid ? '' : name);
  nameEl.hidden = name === uid;
  // Titles: a long name or ID is cut with an ellipsis, and still readable.
  if (nameEl.title !== name) nameEl.title = name;
  const uidEl = li.querySelector('.uid');
  if (uidEl.title !== uid) uidEl.title = uid;
  li.classList.toggle('named', name !== uid);
  const mode = r.mode || 'online';
  li.dataset.mode = mode;
  li.querySelector('.dnd').hidden = mode !== 'dnd';
  drawNote(li.querySelector('.note-view'), shownNote(r, now), now);
}

/** drawNote fills a .note-view element (emoji, text, time left) with n, or hides it. */
export function drawNote(el, n, now) {
  el.hidden = !n;
  const left = el.querySelector('.left');
  if (!n) {
    el.dataset.until = '';
    el.removeAttribute('title');
    return;
  }
  setText(el.querySelector('.emoji'), n.emoji || '');
  setText(el.querySelector('.text'), n.text || '');
  el.dataset.until = n.until ? String(n.until) : '';
  setText(left, n.until ? fmtLeft(n.until - now) : '');
  left.hidden = !n.until;
  const words = noteWords(n);
  const title = n.until ? `${words} · clears at ${new Date(n.until).toLocaleTimeString()}` : words;
  if (el.title !== title) el.title = title;
}

// setText writes only a change, so a 5 Hz redraw keeps selections and tooltips.
function setText(el, s) {
  if (el.textContent !== s) el.textContent = s;
}
