// What the page knows of its channels and of the users it watches, built
// from server frames alone. No DOM here: app.js draws it.
//
// A channel starts from a "joined" snapshot (members sorted and bounded,
// count exact) and follows "presence" diffs. A diff of a large channel may
// carry the count only: the list is then kept as it was and marked partial
// until the next snapshot.
//
// A bounded snapshot is the first members in sorted order, so the list is
// exact up to its last member: "through". Pages of "members" frames move
// that mark on; a join past it is left for the page that will hold it, which
// keeps the list a sorted prefix of the channel and the next page's "after"
// simply the mark.

/** strings returns the string entries of v when it is an array, else []. */
function strings(v) {
  return Array.isArray(v) ? v.filter((s) => typeof s === 'string') : [];
}

/** last returns the last element of a, or null when it is empty. */
function last(a) {
  return a.length ? a[a.length - 1] : null;
}

/** count reads a member count: a whole number >= 0, or fallback. */
function count(v, fallback) {
  const n = Number(v);
  return Number.isInteger(n) && n >= 0 ? n : fallback;
}

export class Room {
  /** @param {string} name */
  constructor(name) {
    this.name = name;
    this.state = 'joining'; // joining (asked, no snapshot yet) or joined
    this.count = 0;
    this.members = new Set();
    this.countOnly = false; // a count-only diff came after the last snapshot
    this.away = new Set();  // listed members who are away
    this.through = null;    // the list is exact up to this member; null: every member
    this.paging = null;     // the "after" of the page asked for and not yet answered
    this.limit = 100;       // page size: as many as the server lists in a snapshot
    this.typing = { users: [], count: 0 };
    this.unread = 0;
  }

  /**
   * partial reports that the list is not every member: the snapshot was
   * bounded, or a diff carried the count alone.
   */
  get partial() {
    return this.countOnly || this.members.size !== this.count;
  }

  /** sorted returns the members known, in code point order like the server's lists. */
  sorted() {
    return [...this.members].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }

  /** snapshot applies a "joined" frame; it replaces everything known. */
  snapshot(f) {
    const listed = strings(f.members);
    this.members = new Set(listed);
    this.count = count(f.count, this.members.size);
    this.away = new Set(strings(f.away).filter((u) => this.members.has(u)));
    this.countOnly = false;
    this.through = this.members.size < this.count ? last(listed) : null;
    if (this.through !== null) this.limit = Math.min(1000, listed.length);
    this.paging = null;
    // A typing frame follows the snapshot when someone types there.
    this.typing = { users: [], count: 0 };
    this.state = 'joined';
  }

  /**
   * nextPage returns the "after" of the page that continues the list, or
   * null when the list already holds every member. A list made stale by
   * count-only diffs starts again from the first member.
   */
  nextPage() {
    if (this.countOnly) return '';
    return this.partial ? (this.through ?? '') : null;
  }

  /**
   * page applies a "members" frame that answers the page asked for after
   * `after`: what the list holds past `after`, up to and including the
   * page's `next` (to the end on the last page), becomes the page's members.
   */
  page(f, after) {
    const got = strings(f.members);
    const next = typeof f.next === 'string' && f.next !== '' ? f.next : null;
    if (after === '' && this.countOnly) {
      // A new pass over a stale list: what it held is no longer known exact.
      this.members.clear();
      this.away.clear();
      this.countOnly = false;
    }
    for (const u of [...this.members]) {
      if (u > after && (next === null || u <= next)) {
        this.members.delete(u);
        this.away.delete(u);
      }
    }
    for (const u of got) this.members.add(u);
    for (const u of strings(f.away)) if (this.members.has(u)) this.away.add(u);
    this.count = count(f.count, this.count);
    this.through = next;
  }

  /**
   * diff applies a "presence" frame and returns what it says changed:
   * {joins, leaves, countOnly}. Joins and leaves are only those that changed
   * the list (a repeated edge changes nothing).
   */
  diff(f) {
    const hasLists = Array.isArray(f.joins) || Array.isArray(f.leaves);
    const joins = [];
    const leaves = [];
    const away = [];
    const active = [];
    for (const u of strings(f.leaves)) {
      this.away.delete(u);
      if (this.members.delete(u)) leaves.push(u);
    }
    for (const u of strings(f.joins)) {
      // Past the mark the join belongs to a page not loaded yet.
      if (this.through !== null && u > this.through) continue;
      if (!this.members.has(u)) {
        this.members.add(u);
        joins.push(u);
      }
    }
    for (const u of strings(f.active)) {
      if (this.away.delete(u)) active.push(u);
    }
    for (const u of strings(f.away)) {
      if (this.members.has(u) && !this.away.has(u)) {
        this.away.add(u);
        away.push(u);
      }
    }
    if (!hasLists) this.countOnly = true;
    this.count = count(f.count, hasLists ? this.count + joins.length - leaves.length : this.count);
    return { joins, leaves, away, active, countOnly: !hasLists };
  }

  /** typed applies a "typing" frame: who types in the channel now. */
  typed(f) {
    const users = strings(f.users);
    this.typing = { users, count: count(f.count, users.length) };
  }
}

/**
 * WatchList is the users this connection watches and what the server last
 * said of each: online true or false, or null before the first answer; away
 * while online; and lastSeen, when the server said when it went offline
 * (Unix ms, 0 when unknown).
 */
export class WatchList {
  constructor() {
    this.users = new Map(); // uid -> {online, since, away, lastSeen}
  }

  /** add starts watching uid; it reports whether uid is new. */
  add(uid) {
    if (this.users.has(uid)) return false;
    this.users.set(uid, { online: null, since: 0, away: false, lastSeen: 0 });
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
   * online (and away when also in its "away"), the others offline. It
   * returns the changes, [{uid, online, kind}] with kind online, offline,
   * away or active.
   */
  watching(f, now) {
    const on = new Set(strings(f.online));
    const away = new Set(strings(f.away));
    const changes = [];
    for (const uid of this.uids()) {
      const online = on.has(uid);
      if (this.set(uid, online, now)) changes.push({ uid, online, kind: online ? 'online' : 'offline' });
      if (online && this.setAway(uid, away.has(uid))) changes.push({ uid, online, kind: away.has(uid) ? 'away' : 'active' });
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

  /** unseen returns the offline users whose last seen is not known, sorted. */
  unseen() {
    return this.uids().filter((uid) => {
      const u = this.users.get(uid);
      return u.online === false && !u.lastSeen;
    });
  }
}
