// Channel state: each joined channel's members, who of them is away and who
// types, from snapshots, diffs and pages of members; and the joins, leaves
// and loads waiting on the server.

import { badDiff, badList, badPage, badRecords, badSnapshot, strings } from './frames.js';

// Room is what the client knows of one channel. A bounded snapshot lists the
// first members in sorted order, so the list is exact up to its last member,
// `through`. Pages move that mark on; a join past it is left for the page
// that will hold it. So members only ever holds real members, and the next
// page's `after` is simply the mark.
export class Room {
  constructor() {
    this.count = 0;
    this.members = new Set();
    this.away = new Set();
    this.typing = [];
    this.through = null; // the list is exact up to this member; null: every member
    this.countOnly = false; // a count-only diff came after the last snapshot or pass start
    this.mid = false; // a pass of pages is under way: it goes on from `through`
    this.known = false; // a snapshot arrived, on this connection or an earlier one
    this.snap = false; // a snapshot arrived on the current connection
    this.asked = null; // the `after` of the page in flight
    this.askedLimit = 0; // and its limit
    this.limit = 100; // page size: the server's snapshot size
    this.follow = false; // loadMembers was called: page again after every new snapshot
    this.pageWaiters = []; // loadPage callers: one page each
    this.allWaiters = []; // loadMembers callers: to the end of a pass
  }

  get complete() { return this.known && !this.countOnly && this.through === null; }

  // next is the `after` of the page that continues the list, or null when complete.
  next() {
    if (!this.mid && this.countOnly) return '';
    return this.through;
  }

  snapshot(f) {
    const listed = strings(f.members);
    this.members = new Set(listed);
    this.count = f.count;
    this.away = new Set(strings(f.away).filter((u) => this.members.has(u)));
    this.countOnly = false;
    this.through = listed.length < this.count ? (listed[listed.length - 1] ?? '') : null;
    if (this.through !== null && listed.length) this.limit = Math.min(1000, listed.length);
    this.typing = []; // a typing frame follows the snapshot when someone types
    this.snap = true;
    this.known = true;
    this.mid = false;
    this.asked = null;
  }

  // page applies a members frame answering the page asked after `after`:
  // what the list holds past `after`, up to and including the page's next
  // (to the end on the last page), becomes the page's members.
  page(f, after) {
    const next = typeof f.next === 'string' && f.next !== '' ? f.next : null;
    if (after === '' && this.countOnly) {
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
    for (const u of strings(f.members)) this.members.add(u);
    for (const u of strings(f.away)) if (this.members.has(u)) this.away.add(u);
    this.count = f.count;
    this.through = next;
    this.mid = next !== null;
  }

  diff(f) {
    if (!Array.isArray(f.joins) && !Array.isArray(f.leaves)) {
      // Above the server's -presence-lists: the list can no longer follow.
      this.countOnly = true;
      this.count = f.count;
      return;
    }
    for (const u of strings(f.leaves)) {
      this.members.delete(u);
      this.away.delete(u);
    }
    for (const u of strings(f.joins)) if (this.through === null || u <= this.through) this.members.add(u);
    for (const u of strings(f.active)) this.away.delete(u);
    for (const u of strings(f.away)) if (this.members.has(u)) this.away.add(u);
    this.count = f.count;
  }

  view() {
    return { count: this.count, members: new Set(this.members), away: new Set(this.away), typing: [...this.typing], complete: this.complete };
  }
}

// Channels holds every channel joined, asked to join or leaving. It sends
// through on.send (false when no connection takes the frame) while
// on.live() says so, and tells the client what to announce: on.joined(ch),
// on.left(ch), on.presence(detail), on.typing(detail); a frame that breaks
// the protocol goes to on.violation(ch, what), a skipped part of one to
// on.bad(what, ch).
export class Channels {
  rooms = new Map(); // channel -> Room: joined, or asked to join, or leaving
  wanted = new Set(); // channels every connection joins
  #joins = new Map(); // channel -> [{resolve, reject}]: join() calls waiting for joined
  #leaves = new Map(); // channel -> [{resolve, reject}]: leave() calls waiting for left
  #records;
  #on;

  constructor(records, on) {
    this.#records = records;
    this.#on = on;
  }

  want(ch) {
    this.wanted.add(ch);
    if (!this.rooms.has(ch)) this.rooms.set(ch, new Room());
  }

  // held reports whether a user is listed in a channel the client holds.
  held(uid) {
    for (const r of this.rooms.values()) if (r.members.has(uid)) return true;
    return false;
  }

  view(ch) {
    const r = this.rooms.get(ch);
    return r ? r.view() : new Room().view();
  }

  join(ch) {
    return new Promise((resolve, reject) => {
      push(this.#joins, ch, { resolve, reject });
      const fresh = !this.wanted.has(ch);
      this.want(ch);
      // Not live: the welcome joins every wanted channel.
      if (this.#on.live() && (fresh || this.rooms.get(ch).snap)) this.#on.send({ type: 'join', channel: ch });
    });
  }

  leave(ch) {
    this.wanted.delete(ch);
    settle(this.#joins, ch, (w) => w.resolve());
    if (!this.rooms.has(ch)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      push(this.#leaves, ch, { resolve, reject });
      if (this.#on.live()) this.#on.send({ type: 'leave', channel: ch });
      // Not live: the next welcome does not join it, and settles this.
    });
  }

  // load waits, through enqueue, for pages of a joined channel.
  load(ch, closed, enqueue) {
    const r = this.rooms.get(ch);
    if (!r || !this.wanted.has(ch)) return Promise.reject(new Error(`presenced: ${ch} is not joined`));
    if (closed) return Promise.reject(new Error('presenced: the client is closed'));
    return new Promise((resolve, reject) => {
      enqueue(r, { resolve, reject });
      this.#pump(ch, r);
    });
  }

  // welcomed settles what no connection held: channels left meanwhile are
  // left by not joining them. It returns the channels to join; the old
  // state stays until each new snapshot replaces it.
  welcomed() {
    for (const ch of [...this.rooms.keys()]) if (!this.wanted.has(ch)) this.#drop(ch, 'left');
    for (const ch of [...this.#leaves.keys()]) settle(this.#leaves, ch, (w) => w.resolve());
    return [...this.wanted];
  }

  // lost forgets what belonged to the connection: pages are the asking
  // connection's, and the next snapshot starts over.
  lost() {
    for (const r of this.rooms.values()) { r.asked = null; r.snap = false; }
  }

  // ended rejects everything waiting: the client is closed.
  ended(err) {
    for (const m of [this.#joins, this.#leaves]) {
      for (const ws of m.values()) for (const w of ws) w.reject(err);
      m.clear();
    }
    for (const r of this.rooms.values()) {
      for (const w of r.pageWaiters.concat(r.allWaiters)) w.reject(err);
      r.pageWaiters = [];
      r.allWaiters = [];
      r.asked = null;
      r.snap = false;
    }
  }

  // refused takes an error frame that names a channel: a join refused is
  // not joined, now or after a reconnect.
  refused(ch, error) {
    if (!this.#joins.has(ch)) return;
    this.wanted.delete(ch);
    this.#drop(ch, error);
    settle(this.#joins, ch, (w) => w.reject(new Error(`presenced: join ${ch}: ${error}`)));
  }

  // ---- frames of channels; those of channels not joined (left since, or never asked) are ignored ----

  joined(ch, f, invisible) {
    const r = this.rooms.get(ch);
    if (!r) return; // left since it was asked
    const bad = badSnapshot(f) || badRecords('users', f.users);
    if (bad) return this.#on.violation(ch, `joined: ${bad}`);
    const before = r.members;
    r.snapshot(f);
    this.#records.listed(`joined ${ch}`, ch, r.members, f.users);
    this.#records.invisible(invisible);
    this.#records.forget(before);
    settle(this.#joins, ch, (w) => w.resolve());
    this.#on.joined(ch);
    this.#pump(ch, r);
  }

  left(ch) {
    // Unasked, the server took the channel away (a refreshed token no longer allows it).
    const asked = this.#leaves.has(ch);
    if (!this.rooms.has(ch) && !asked) return;
    settle(this.#leaves, ch, (w) => w.resolve());
    if (asked && this.wanted.has(ch)) return; // joined again since: its snapshot follows
    this.wanted.delete(ch);
    this.#drop(ch, 'left');
    this.#on.left(ch);
  }

  presence(ch, f) {
    const r = this.rooms.get(ch);
    if (!r || !r.snap) return;
    const bad = badDiff(f) || badRecords('users', f.users) || badRecords('updated', f.updated);
    if (bad) return this.#on.violation(ch, `presence: ${bad}`);
    r.diff(f);
    const joins = strings(f.joins);
    const listed = Array.isArray(f.joins) || Array.isArray(f.leaves); // a count-only diff carries no records
    const users = listed ? this.#records.listed(`presence ${ch}`, ch, joins.filter((u) => r.members.has(u)), f.users) : {};
    const updated = listed ? this.#records.updated(`presence ${ch}`, ch, f.updated, (u) => r.members.has(u)) : {};
    this.#records.forget(strings(f.leaves).concat(joins));
    this.#on.presence({
      channel: ch, count: r.count, joins, leaves: strings(f.leaves),
      away: strings(f.away), active: strings(f.active), users, updated,
    });
  }

  members(ch, f) {
    const r = this.rooms.get(ch);
    if (!r || r.asked === null) return;
    const after = r.asked;
    r.asked = null;
    const bad = badPage(f, after, r.askedLimit) || badRecords('users', f.users);
    if (bad) return this.#pageFailed(ch, r, bad);
    const before = [...r.members];
    r.page(f, after);
    this.#records.listed(`members ${ch}`, ch, strings(f.members).filter((u) => r.members.has(u)), f.users);
    this.#records.forget(before);
    for (const w of r.pageWaiters.splice(0)) w.resolve(r.complete);
    if (r.through === null) for (const w of r.allWaiters.splice(0)) w.resolve(r.complete);
    this.#pump(ch, r);
  }

  typing(ch, f) {
    const r = this.rooms.get(ch);
    if (!r || !r.snap || badList('users', f.users)) return;
    r.typing = strings(f.users);
    this.#on.typing({ channel: ch, users: [...r.typing] });
  }

  #drop(ch, why) {
    const r = this.rooms.get(ch);
    if (!r) return;
    this.rooms.delete(ch);
    const err = new Error(`presenced: ${ch}: ${why}`);
    for (const w of r.pageWaiters.concat(r.allWaiters)) w.reject(err);
    this.#records.forget(r.members);
  }

  // pageFailed stops a pass of pages at a page that breaks the rules (one
  // whose next does not move past its after would have it ask forever):
  // the page is not applied, its callers reject, and nothing pages the
  // channel again by itself; a new loadMembers or loadPage call tries again.
  #pageFailed(ch, r, why) {
    r.follow = false;
    const err = new Error(`presenced: ${ch}: bad members page: ${why}`);
    for (const w of r.pageWaiters.splice(0).concat(r.allWaiters.splice(0))) w.reject(err);
    this.#on.bad(`members: ${why}`, ch);
  }

  // pump asks for the next page when someone waits for one, or the channel
  // is followed in full, and a connection's snapshot is there to page on.
  #pump(ch, r) {
    if (!this.#on.live() || !r.snap || r.asked !== null) return;
    const after = r.next();
    if (after === null) {
      for (const w of r.pageWaiters.splice(0).concat(r.allWaiters.splice(0))) w.resolve(true);
      return;
    }
    if (!r.pageWaiters.length && !r.allWaiters.length && !(r.follow && !r.countOnly)) return;
    if (this.#on.send({ type: 'members', channel: ch, after, limit: r.limit })) {
      r.asked = after;
      r.askedLimit = r.limit;
    }
  }
}

function push(m, k, v) {
  const a = m.get(k);
  if (a) a.push(v);
  else m.set(k, [v]);
}

function settle(m, k, fn) {
  const a = m.get(k);
  if (!a) return;
  m.delete(k);
  for (const w of a) fn(w);
}
