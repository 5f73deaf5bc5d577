// The status picker: this user's mode (online, do not disturb, invisible)
// and note (emoji, text and when it clears), set with the client's set(),
// and what is set now, from the client's record of its own user: the
// welcome says it, and so do the updates that other tabs of this user cause.

import { MAX_NOTE_EMOJI, MAX_NOTE_TEXT } from './presenced.js';
import { clearAt, codePoints } from './format.js';
import { $, logEvent, page, renderSoon } from './state.js';
import { MODE_WORDS, drawNote, noteWords, recordOf, shownNote } from './people.js';

const el = {
  card: $('status-card'),
  mine: $('my-status'),
  modes: $('status-modes'),
  form: $('note-form'),
  emoji: $('note-emoji'),
  text: $('note-text'),
  clear: $('note-clear'),
  set: $('note-set'),
  remove: $('note-remove'),
};

let saving = 0; // set() calls not settled yet

// usable says whether the page has a connection to set through (live, or one that will be).
const usable = () => typeof page.me.set === 'function' && page.me.state !== 'closed' && !page.blocked;

function change(what, c) {
  if (!usable()) {
    logEvent('error', '', 'not connected: the status was not changed');
    return;
  }
  saving++;
  renderSoon();
  page.me.set(c).then(
    () => logEvent('status', page.me.uid, what),
    (err) => logEvent('error', '', `status not changed: ${err.message}`),
  ).finally(() => {
    saving--;
    renderSoon();
  });
}

el.modes.addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-mode]');
  if (!b) return;
  const mode = b.dataset.mode;
  if ((recordOf(page.me.uid).mode || 'online') === mode) return;
  change(`is now ${MODE_WORDS[mode]}`, { mode });
});

el.form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const emoji = el.emoji.value.trim();
  const text = el.text.value.trim();
  if (!emoji && !text) {
    logEvent('error', '', 'a note needs text or an emoji; Clear removes the note');
    return;
  }
  if (codePoints(text) > MAX_NOTE_TEXT || codePoints(emoji) > MAX_NOTE_EMOJI) {
    logEvent('error', '', `a note holds at most ${MAX_NOTE_TEXT} characters of text and ${MAX_NOTE_EMOJI} of emoji`);
    return;
  }
  const note = {};
  if (emoji) note.emoji = emoji;
  if (text) note.text = text;
  const until = clearAt(el.clear.value);
  if (until) note.until = until;
  change(`note: ${noteWords(note)}${until ? ` until ${new Date(until).toLocaleTimeString()}` : ''}`, { note });
  el.text.value = '';
  el.emoji.value = '';
});

el.remove.addEventListener('click', () => {
  if (!recordOf(page.me.uid).note) return;
  change('cleared the note', { note: null });
});

/** renderStatus shows what is set now and which mode the picker has pressed. */
export function renderStatus(now) {
  const r = recordOf(page.me.uid);
  const mode = r.mode || 'online';
  el.card.dataset.mode = mode;
  el.card.dataset.saving = String(saving > 0);
  for (const b of el.modes.querySelectorAll('button[data-mode]')) {
    const on = b.dataset.mode === mode;
    if (b.getAttribute('aria-pressed') !== String(on)) b.setAttribute('aria-pressed', String(on));
    b.disabled = !usable();
  }
  const words = mode === 'invisible' ? 'invisible: others see you offline' : mode === 'dnd' ? 'do not disturb' : 'online';
  const w = el.mine.querySelector('.mode-words');
  if (w.textContent !== words) w.textContent = words;
  const n = shownNote(r, now);
  drawNote(el.mine.querySelector('.note-view'), n, now);
  el.remove.disabled = !n || !usable();
  el.set.disabled = !usable();
}
