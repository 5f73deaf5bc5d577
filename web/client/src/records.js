// Records: who a user is (info) and what it wants (mode, note), as the
// server's frames say, kept for every user present to the client.

import { UID, isObject, own, whole } from './frames.js';

// readNote keeps what is well formed of a note the server sent: null when
// it has neither text nor emoji, which the server never sends.
function readNote(v) {
  if (!isObject(v)) return null;
  const n = {};
  if (typeof v.text === 'string' && v.text) n.text = v.text;
  if (typeof v.emoji === 'string' && v.emoji) n.emoji = v.emoji;
  if (!n.text && !n.emoji) return null;
  if (whole(v.until) && v.until > 0) n.until = v.until;
  return n;
}

// readRecord keeps what is well formed of a record the server sent, as a
// copy the app cannot reach into: null when it is not an object at all.
// "online" is the absence of a mode.
export function readRecord(v) {
  if (!isObject(v)) return null;
  const r = {};
  if (isObject(v.info)) {
    try {
      r.info = JSON.parse(JSON.stringify(v.info));
    } catch { /* a cycle cannot come from JSON; skip it anyway */ }
  }
  if (v.mode === 'dnd' || v.mode === 'invisible') r.mode = v.mode;
  const n = readNote(v.note);
  if (n) r.note = n;
  return r;
}

// recordIn is the record a frame's map gives a listed user: its entry, or
// empty when it has none (the server leaves out empty records). undefined
// when the entry is there but not a record.
function recordIn(map, uid) {
  if (!isObject(map) || !own(map, uid)) return {};
  return readRecord(map[uid]) ?? undefined;
}

export const copyRecord = (r) => {
  const c = {};
  if (r.info) c.info = JSON.parse(JSON.stringify(r.info));
  if (r.mode) c.mode = r.mode;
  if (r.note) c.note = { ...r.note };
  return c;
};

// Records holds the record of every user present to the client (listed in
// a joined channel, a watched user online) and of its own user. What the
// frames carry that is not a record is skipped and told to bad(what, ch).
export class Records {
  #map = new Map();
  #me; // () => the own user ID
  #held; // (uid) => whether the user is still present to the client
  #bad;

  constructor(me, held, bad) {
    this.#me = me;
    this.#held = held;
    this.#bad = bad;
  }

  get(uid) { return this.#map.get(uid); }
  set(uid, r) { this.#map.set(uid, r); }

  // copy is what the app may have of a record: undefined for a user not present.
  copy(uid) {
    const r = this.#map.get(uid);
    return r ? copyRecord(r) : undefined;
  }

  // listed takes the records of users a frame lists (members of a snapshot
  // or a page, joins, watched users online) from its map: a user without an
  // entry has an empty record. It returns them for the event.
  listed(what, ch, uids, map) {
    const out = [];
    const bad = [];
    for (const u of uids) {
      const rec = recordIn(map, u);
      if (rec === undefined) {
        bad.push(u);
        if (!this.#map.has(u)) this.#map.set(u, {});
        continue;
      }
      this.#map.set(u, rec);
      out.push([u, copyRecord(rec)]);
    }
    if (bad.length) this.#bad(`${what}: the users entry of ${JSON.stringify(bad[0])} is not a record${bad.length > 1 ? ` (and ${bad.length - 1} more)` : ''}`, ch);
    return Object.fromEntries(out);
  }

  // updated takes the new records of an updated map, for the users ok says
  // are present ({} when a record became empty). It returns them for the event.
  updated(what, ch, map, ok) {
    if (!isObject(map)) return {};
    const out = [];
    const bad = [];
    for (const u of Object.keys(map)) {
      if (!UID.test(u) || !(u === this.#me() || ok(u))) continue;
      const rec = readRecord(map[u]);
      if (!rec) {
        bad.push(u);
        continue;
      }
      this.#map.set(u, rec);
      out.push([u, copyRecord(rec)]);
    }
    if (bad.length) this.#bad(`${what}: the updated entry of ${JSON.stringify(bad[0])} is not a record${bad.length > 1 ? ` (and ${bad.length - 1} more)` : ''}`, ch);
    return Object.fromEntries(out);
  }

  // invisible sets the own user's invisibility, which a snapshot says apart
  // from its list (the list may not reach the own user).
  invisible(on) {
    const uid = this.#me();
    const me = this.#map.get(uid) ?? {};
    if (on) this.#map.set(uid, { ...me, mode: 'invisible' });
    else if (me.mode === 'invisible') {
      const { mode, ...rest } = me;
      this.#map.set(uid, rest);
    }
  }

  // forget lets go of the records of users no longer present to this
  // client. The own user's is kept.
  forget(uids) {
    for (const u of uids) {
      if (u === this.#me() || !this.#map.has(u) || this.#held(u)) continue;
      this.#map.delete(u);
    }
  }
}
