// The watch list: the users whose state (active, away, offline) and last
// seen the client follows, from watching and status frames.

import { badRecords, isObject, own, strings, whole } from './frames.js';

const order = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

// Watch is what the client knows of the users it watches. Records of the
// watched users online are kept in records; bad(what) hears what a frame
// breaks and was skipped.
export class Watch {
  list = null; // the watch list as last sent, null before watch()
  #users = new Map(); // watched uid -> UserState

  #records;
  #bad;

  constructor(records, bad) {
    this.#records = records;
    this.#bad = bad;
  }

  // replace makes uids the watch list; the users no longer watched are
  // forgotten.
  replace(uids) {
    this.list = [...new Set(strings(uids))].sort(order);
    const keep = new Set(this.list);
    const dropped = [...this.#users.keys()].filter((u) => !keep.has(u));
    for (const u of dropped) this.#users.delete(u);
    this.#records.forget(dropped);
    for (const u of this.list) if (!this.#users.has(u)) this.#users.set(u, { state: 'unknown', last_seen: null });
  }

  user(uid) {
    const u = this.#users.get(uid);
    return u ? { ...u } : { state: 'unknown', last_seen: null };
  }

  online(uid) {
    const s = this.#users.get(uid);
    return !!s && (s.state === 'active' || s.state === 'away');
  }

  // watching applies the answer to a watch list, which says every watched
  // user's state; it returns the event's detail.
  watching(f) {
    const on = new Set(strings(f.online));
    const away = new Set(strings(f.away));
    const seen = this.#lastSeen('watching', f.last_seen);
    for (const [u, s] of this.#users) {
      const state = on.has(u) ? (away.has(u) ? 'away' : 'active') : 'offline';
      // An offline user's last seen: the answer's, else what was known of this same absence.
      let last = null;
      if (state === 'offline') last = own(seen, u) ? seen[u] : s.state === 'offline' ? s.last_seen : null;
      if (state !== s.state || last !== s.last_seen) this.#users.set(u, { state, last_seen: last });
    }
    const users = this.#recordsOf('watching', f.users, [...on]);
    this.#records.forget(this.#users.keys());
    return { online: [...on], away: [...away], users, last_seen: seen };
  }

  // status applies a change of some watched users' states; it returns the
  // event's detail.
  status(f) {
    const seen = this.#lastSeen('status', f.last_seen);
    const set = (u, state, last_seen = null) => { if (this.#users.has(u)) this.#users.set(u, { state, last_seen }); };
    for (const u of strings(f.offline)) set(u, 'offline', own(seen, u) ? seen[u] : null);
    for (const u of strings(f.online)) set(u, 'active');
    for (const u of strings(f.active)) set(u, 'active');
    for (const u of strings(f.away)) set(u, 'away');
    const users = this.#recordsOf('status', f.users, strings(f.online));
    const badUpdated = badRecords('updated', f.updated);
    let updated = {};
    if (badUpdated) this.#bad(`status: ${badUpdated}`);
    else updated = this.#records.updated('status', '', f.updated, (u) => this.online(u));
    this.#records.forget(strings(f.offline));
    return {
      online: strings(f.online), offline: strings(f.offline), away: strings(f.away), active: strings(f.active), last_seen: seen,
      users, updated,
    };
  }

  // recordsOf takes the records of the watched users a frame says are online.
  #recordsOf(what, map, online) {
    const bad = badRecords('users', map);
    if (bad) {
      this.#bad(`${what}: ${bad}`);
      map = undefined;
    }
    return this.#records.listed(what, '', online.filter((u) => this.#users.has(u)), map);
  }

  // lastSeen reads a last_seen map: user ID -> Unix ms.
  #lastSeen(what, v) {
    if (v == null) return {};
    if (!isObject(v)) {
      this.#bad(`${what}: last_seen is not an object`);
      return {};
    }
    return Object.fromEntries(Object.keys(v).filter((u) => whole(v[u]) && v[u] > 0).map((u) => [u, v[u]]));
  }
}
