// set(): the changes of the own user's mode and note, checked as the server
// would, and waited on until the server has taken or refused them.

import { isObject } from './frames.js';
import { copyRecord } from './records.js';

// The server's bounds of a note, in code points; a set past them is refused.
export const MAX_NOTE_TEXT = 128;
export const MAX_NOTE_EMOJI = 16;
const SET_MODES = ['online', 'dnd', 'invisible'];

const codePoints = (s) => { let n = 0; for (const _ of s) n++; return n; };

// setFrame checks a set() call against the server's rules of shape, so a
// mistake in the app fails at once and names the field as the server would;
// whether an until is in time is the server's to say, on its clock.
export function setFrame(change) {
  if (!isObject(change)) throw new TypeError('presenced: set takes {mode, note}');
  const frame = { type: 'set' };
  if (change.mode !== undefined) {
    if (!SET_MODES.includes(change.mode)) throw new TypeError(`presenced: set: "mode" must be "online", "dnd" or "invisible", not ${JSON.stringify(change.mode)}`);
    frame.mode = change.mode;
  }
  if (change.note === null) frame.note = null;
  else if (change.note !== undefined) {
    const n = change.note;
    if (!isObject(n)) throw new TypeError('presenced: set: "note" must be an object with "text", "emoji" or "until", or null to clear it');
    const note = {};
    if (n.text !== undefined) {
      if (typeof n.text !== 'string') throw new TypeError('presenced: set: "note.text" must be a string');
      if (codePoints(n.text) > MAX_NOTE_TEXT) throw new TypeError(`presenced: set: "note.text" is too long: at most ${MAX_NOTE_TEXT} characters`);
      note.text = n.text;
    }
    if (n.emoji !== undefined) {
      if (typeof n.emoji !== 'string') throw new TypeError('presenced: set: "note.emoji" must be a string');
      if (codePoints(n.emoji) > MAX_NOTE_EMOJI) throw new TypeError(`presenced: set: "note.emoji" is too long: at most ${MAX_NOTE_EMOJI} characters`);
      note.emoji = n.emoji;
    }
    if (n.until !== undefined && n.until !== null && n.until !== 0) {
      if (!Number.isSafeInteger(n.until) || n.until <= 0) throw new TypeError('presenced: set: "note.until" must be in the future and at most 7 days ahead, in Unix milliseconds');
      note.until = n.until;
    }
    if (!note.text && !note.emoji) throw new TypeError('presenced: set: "note.text" or "note.emoji" must be set; "note": null clears the note');
    frame.note = note;
  }
  if (!('mode' in frame) && !('note' in frame)) throw new TypeError('presenced: set needs "mode" or "note"');
  return frame;
}

// The error frames that refuse a set: they name its fields. A server that
// predates sets does not know the type.
const SET_ERROR = /^(set needs |"mode"|"note[".]|unknown type "set")/;
// The rate limiter's refusal names no frame: any set in flight may be the one.
const DROPPED = /^too many messages/;

// refusesSet tells the error frames that may refuse a set in flight.
export const refusesSet = (error) => SET_ERROR.test(error) || DROPPED.test(error);

// A set() call waiting: sent on the connection whose ping number `ping`
// follows it (0: not sent yet).
export class SetWait {
  constructor(frame, resolve, reject) {
    this.frame = frame;
    this.resolve = resolve;
    this.reject = reject;
    this.ping = 0;
  }
}

// Sets are the set() calls not yet confirmed, in the order sent. The server
// answers frames in turn, so the pong of the ping sent after a set says it
// was taken, unless an error came first.
export class Sets {
  #waits = [];

  add(w) { this.#waits.push(w); }

  // confirm settles the sets the pongs so far answer, making each change in
  // the own record.
  confirm(pongs, records, uid) {
    for (const w of [...this.#waits]) {
      if (!w.ping || w.ping > pongs) continue;
      this.#waits.splice(this.#waits.indexOf(w), 1);
      const me = { ...records.get(uid) };
      if (w.frame.mode === 'online') delete me.mode;
      else if (w.frame.mode) me.mode = w.frame.mode;
      if (w.frame.note === null) delete me.note;
      else if (w.frame.note) me.note = { ...w.frame.note };
      records.set(uid, me);
      w.resolve(copyRecord(me));
    }
  }

  // refuse rejects the set an error frame refuses: the oldest one sent.
  // A frame dropped by the rate limit may be any of those in flight.
  refuse(error) {
    const sent = this.#waits.filter((w) => w.ping);
    const refused = DROPPED.test(error) ? sent : sent.slice(0, 1);
    const err = new Error(DROPPED.test(error) ? `presenced: set: the server dropped a frame (${error}); the change may not have been made` : `presenced: set: ${error}`);
    for (const w of refused) {
      this.#waits.splice(this.#waits.indexOf(w), 1);
      w.reject(err);
    }
  }

  // lost rejects the sets sent on a connection that ended before the server
  // answered (they may or may not have been made); those not sent go on the
  // next connection, through outbox.
  lost(code, outbox) {
    const err = new Error(`presenced: set: the connection ended (${code}) before the server answered; the change may not have been made`);
    for (const w of this.#waits.splice(0)) {
      if (w.ping) w.reject(err);
      else {
        this.#waits.push(w);
        if (!outbox.includes(w)) outbox.push(w);
      }
    }
  }

  rejectAll(err) {
    for (const w of this.#waits.splice(0)) w.reject(err);
  }
}
