// What the page knows of its channels and of the users it watches, built
// from server frames alone. No DOM here: app.js draws it.
//
// A channel starts from a "joined" snapshot (members sorted and bounded,
// count exact) and follows "presence" diffs. A diff of a large channel may
// carry the count only: the list is then kept as it was and marked partial
// until the next snapshot.

/** strings returns the string entries of v when it is an array, else []. */
function strings(v) {
  return Array.isArray(v) ? v.filter((s) => typeof s === 'string') : [];
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
    this.members = new Set(strings(f.members));
    this.count = count(f.count, this.members.size);
    this.countOnly = false;
    this.state = 'joined';
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
    for (const u of strings(f.leaves)) {
      if (this.members.delete(u)) leaves.push(u);
    }
    for (const u of strings(f.joins)) {
      if (!this.members.has(u)) {
        this.members.add(u);
        joins.push(u);
      }
    }
    if (!hasLists) this.countOnly = true;
    this.count = count(f.count, hasLists ? this.count + joins.length - leaves.length : this.count);
    return { joins, leaves, countOnly: !hasLists };
  }
}

/**
 * WatchList is the users this connection watches and what the server last
 * said of each: online true or false, or null before the first answer.
 */
export class WatchList {
  constructor() {
    this.users = new Map(); // uid -> {online, since}
  }

  /** add starts watching uid; it reports whether uid is new. */
  add(uid) {
    if (this.users.has(uid)) return false;
    this.users.set(uid, { online: null, since: 0 });
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
    return true;
  }

  /**
   * watching applies a "watching" answer: the watched users it lists are
   * online, the others offline. It returns the changes, [{uid, online}].
   */
  watching(f, now) {
    const on = new Set(strings(f.online));
    const changes = [];
    for (const uid of this.uids()) {
      const online = on.has(uid);
      if (this.set(uid, online, now)) changes.push({ uid, online });
    }
    return changes;
  }

  /**
   * status applies a "status" frame; users no longer watched are ignored
   * (the frame may have crossed a new watch list). It returns the changes.
   */
  status(f, now) {
    const changes = [];
    for (const uid of strings(f.offline)) {
      if (this.set(uid, false, now)) changes.push({ uid, online: false });
    }
    for (const uid of strings(f.online)) {
      if (this.set(uid, true, now)) changes.push({ uid, online: true });
    }
    return changes;
  }
}
