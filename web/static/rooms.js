// What the page knows of the users it watches, built from the client's
// watching and status events. No DOM here: app.js draws it. The channels'
// members are the client's (presenced.js).

/** strings returns the string entries of v when it is an array, else []. */
function strings(v) {
  return Array.isArray(v) ? v.filter((s) => typeof s === 'string') : [];
}

/**
 * WatchList is the users this connection watches and what the server last
 * said of each: online true or false, or null before the first answer; away
 * while online; and lastSeen, when the server said when it went offline
 * (Unix ms, 0 when unknown).
 */
export class WatchList {
  constructor() {
    this.users = new Map(); // uid -> {online, since, away, lastSeen, never}
  }

  /** add starts watching uid; it reports whether uid is new. */
  add(uid) {
    if (this.users.has(uid)) return false;
    this.users.set(uid, { online: null, since: 0, away: false, lastSeen: 0, never: false });
    return true;
  }

  /** remove stops watching uid; it reports whether it was watched. */
  remove(uid) {
    return this.users.delete(uid);
  }

  has(uid) { return this.users.has(uid); }

  get size() { return this.users.size; }

  /** uids returns the watched IDs, sorted: the body of a "watch" frame. */
  uids() {
    return [...this.users.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }

  /** unknown marks every user as not yet answered for (a new connection). */
  unknown() {
    for (const u of this.users.values()) u.online = null;
  }

  set(uid, online, now) {
    const u = this.users.get(uid);
    if (!u || u.online === online) return false;
    u.online = online;
    u.since = now;
    u.never = false;
    if (online) u.lastSeen = 0;
    else u.away = false;
    return true;
  }

  // setAway records an away or active edge of an online user; it reports a change.
  setAway(uid, away) {
    const u = this.users.get(uid);
    if (!u || !u.online || u.away === away) return false;
    u.away = away;
    return true;
  }

  /**
   * watching applies a "watching" answer: the watched users it lists are
   * online (and away when also in its "away"), the others offline, with
   * their last seen where its "last_seen" has it. It returns the changes,
   * [{uid, online, kind}] with kind online, offline, away or active.
   */
  watching(f, now) {
    const on = new Set(strings(f.online));
    const away = new Set(strings(f.away));
    // A server of protocol 2.2 says when the offline ones went; an older one leaves it to GET /api/presence/{uid}.
    const seen = f.last_seen && typeof f.last_seen === 'object' ? f.last_seen : {};
    const changes = [];
    for (const uid of this.uids()) {
      const online = on.has(uid);
      if (this.set(uid, online, now)) changes.push({ uid, online, kind: online ? 'online' : 'offline' });
      if (online && this.setAway(uid, away.has(uid))) changes.push({ uid, online, kind: away.has(uid) ? 'away' : 'active' });
      if (!online && Object.prototype.hasOwnProperty.call(seen, uid)) this.lastSeen(uid, seen[uid]);
    }
    return changes;
  }

  /**
   * status applies a "status" frame; users no longer watched are ignored
   * (the frame may have crossed a new watch list). It returns the changes,
   * as watching does.
   */
  status(f, now) {
    const changes = [];
    const seen = f.last_seen && typeof f.last_seen === 'object' ? f.last_seen : {};
    for (const uid of strings(f.offline)) {
      if (this.set(uid, false, now)) changes.push({ uid, online: false, kind: 'offline' });
      this.lastSeen(uid, seen[uid]);
    }
    for (const uid of strings(f.online)) {
      if (this.set(uid, true, now)) changes.push({ uid, online: true, kind: 'online' });
    }
    for (const uid of strings(f.active)) {
      if (this.setAway(uid, false)) changes.push({ uid, online: true, kind: 'active' });
    }
    for (const uid of strings(f.away)) {
      if (this.setAway(uid, true)) changes.push({ uid, online: true, kind: 'away' });
    }
    return changes;
  }

  /**
   * lastSeen records when uid, offline, went offline: from a status frame
   * or from GET /api/presence/{uid}. Anything but a positive number, or a
   * user not offline, is ignored.
   */
  lastSeen(uid, at) {
    const u = this.users.get(uid);
    const n = Number(at);
    if (!u || u.online !== false || !(Number.isFinite(n) && n > 0)) return false;
    u.lastSeen = n;
    return true;
  }

  /**
   * neverSeen records that the server keeps no last seen of uid, offline:
   * not seen within its -last-seen-ttl. It reports a change.
   */
  neverSeen(uid) {
    const u = this.users.get(uid);
    if (!u || u.online !== false || u.lastSeen || u.never) return false;
    u.never = true;
    return true;
  }

  /** unseen returns the offline users whose last seen is not known, sorted. */
  unseen() {
    return this.uids().filter((uid) => {
      const u = this.users.get(uid);
      return u.online === false && !u.lastSeen && !u.never;
    });
  }
}
