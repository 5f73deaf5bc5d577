// presenced.js: a client of presenced, the presence server, for browsers and
// Node 20. One ES module, no dependencies.
//
// It keeps what a chat UI shows (each joined channel's members, who of them
// is away, who types; the watched users' state and last seen) from the
// server's snapshots and per-tick diffs, and keeps it true across
// reconnects: every reconnect re-joins, re-watches and rebuilds each state
// from the new snapshots, so a member who left while the client was away is
// not kept.
//
//   import { Presenced } from './presenced.js';
//   const p = new Presenced({ url: 'wss://chat.example.com/ws', token, refreshToken, channels: ['lobby'] });
//   p.addEventListener('presence', (e) => draw(p.channel(e.detail.channel)));
//
// Where a WebSocket does not open (a proxy that strips the upgrade), it
// falls back to Server-Sent Events by itself, with the same API and events.
//
// This file is built from the modules in src/, one concern each, by
// go generate ./web; edit those, and build it again.

// ---- activity.js ----
// Typing and activity: what the user does, as the server counts it.

// activityFrame says this connection is 'away' or 'active'.
function activityFrame(state) {
  if (state !== 'away' && state !== 'active') throw new TypeError(`presenced: activity is 'away' or 'active', not ${JSON.stringify(state)}`);
  return { type: 'activity', state };
}

const typingFrame = (channel) => ({ type: 'typing', channel });

// awayAfter is whether the connection is away once frame is sent: chat,
// typing and set make the server count it active.
function awayAfter(frame, away) {
  if (frame.type === 'chat' || frame.type === 'typing' || frame.type === 'set') return false;
  if (frame.type === 'activity') return frame.state === 'away';
  return away;
}

// ---- frames.js ----
// Checks of server frames, before they change any state, and the server's
// rules for names. Each check returns what is wrong, or '' when nothing is.

// The server's rule for channel names: a bad one gets an error frame that
// names no channel, which no join could be told from.
const CHANNEL = /^[A-Za-z0-9_.:@/#-]{1,128}$/;
// The server's rule for user IDs: what snapshots and pages list.
const UID = /^[A-Za-z0-9_.@-]{1,64}$/;

const strings = (v) => (Array.isArray(v) ? v.filter((s) => typeof s === 'string') : []);
const whole = (v) => Number.isSafeInteger(v) && v >= 0;
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

// badUIDs checks a sorted list of user IDs, all after `after` when given.
function badUIDs(name, v, after = null) {
  if (!Array.isArray(v)) return `${name} is not a list`;
  let last = after;
  for (const u of v) {
    if (typeof u !== 'string' || !UID.test(u)) return `${name}: ${JSON.stringify(u)} is not a user ID`;
    if (last !== null && !(u > last)) return `${name}: ${JSON.stringify(u)} does not come after ${JSON.stringify(last)}`;
    last = u;
  }
  return '';
}

// badList checks an optional list; what in it is not a string is skipped
// where it is read.
const badList = (name, v) => (v == null || Array.isArray(v) ? '' : `${name} is not a list`);

// badRecords checks an optional map of records (users, updated): an object
// or nothing. A bad entry in a good map is skipped where it is read.
const badRecords = (name, v) => (v == null || isObject(v) ? '' : `${name} is not an object`);

function badSnapshot(f) {
  if (!whole(f.count)) return `count ${JSON.stringify(f.count)} is not a whole number`;
  const bad = badUIDs('members', f.members) || badList('away', f.away);
  if (bad) return bad;
  if (f.members.length > f.count) return `${f.members.length} members listed, count ${f.count}`;
  return '';
}

function badDiff(f) {
  if (!whole(f.count)) return `count ${JSON.stringify(f.count)} is not a whole number`;
  return badList('joins', f.joins) || badList('leaves', f.leaves) || badList('away', f.away) || badList('active', f.active);
}

// badPage checks a members frame against the page asked for: after `after`,
// at most `limit`; a page that says more follow must name its last member as
// next, so each page moves the pass on.
function badPage(f, after, limit) {
  if (!whole(f.count)) return `count ${JSON.stringify(f.count)} is not a whole number`;
  const more = f.next !== undefined && f.next !== '';
  if (more && (typeof f.next !== 'string' || !(f.next > after))) return `next ${JSON.stringify(f.next)} does not move past after ${JSON.stringify(after)}`;
  const bad = badUIDs('members', f.members, after) || badList('away', f.away);
  if (bad) return bad;
  if (f.members.length > limit) return `${f.members.length} members, over the limit of ${limit} asked for`;
  if (f.members.length > f.count) return `${f.members.length} members listed, count ${f.count}`;
  if (more && f.next !== f.members[f.members.length - 1]) return `next ${JSON.stringify(f.next)} is not the page's last member`;
  return '';
}

// ---- channels.js ----
// Channel state: each joined channel's members, who of them is away and who
// types, from snapshots, diffs and pages of members; and the joins, leaves
// and loads waiting on the server.

// Room is what the client knows of one channel. A bounded snapshot lists the
// first members in sorted order, so the list is exact up to its last member,
// `through`. Pages move that mark on; a join past it is left for the page
// that will hold it. So members only ever holds real members, and the next
// page's `after` is simply the mark.
class Room {
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
class Channels {
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

// ---- link.js ----
// What the transports share: the link a connection drives, and how each
// opener tells what ended it.
//
// A link is one open transport, as the connection drives it:
//   open       whether a frame sent now goes out
//   send(text) sends one frame
//   close(code, reason)  ends it (with a closing handshake where there is
//                        one, after the frames sent before), and says nothing more
//   terminate()          ends it at once, and says nothing more
// Its opener feeds it to `on`: on.message(data) for each message, then one
// on.close(code, reason, final) when it ends of itself; final says a retry
// would be refused the same way. on.error(text), where the opener has it,
// tells of frames the server refused while the link stays up. The
// connection is up at the server's welcome, not when the transport opens,
// so an opener reports no open.

// Handshake refusals never retried, where the transport tells the status (a
// browser's WebSocket does not): a bad user ID, an origin or a path.
const REFUSALS = [400, 403, 404];

// The code reported for a message over maxMessageBytes: the link ends it itself.
const TOO_BIG = 1009;

// byteSize is the size of a message as it came, in UTF-8 bytes for text; it
// counts a long string's bytes only when its length leaves a doubt.
function byteSize(data, limit) {
  if (typeof data === 'string') {
    if (data.length > limit || data.length * 3 <= limit) return data.length;
    let n = 0;
    for (let i = 0; i < data.length; i++) {
      const c = data.charCodeAt(i);
      n += c < 0x80 ? 1 : c < 0x800 ? 2 : c >= 0xd800 && c < 0xdc00 ? (i++, 4) : 3;
    }
    return n;
  }
  if (data && typeof data.byteLength === 'number') return data.byteLength; // ArrayBuffer, Buffer, views
  if (data && typeof data.size === 'number') return data.size; // Blob
  return 0;
}

// ---- sse.js ----
// The Server-Sent Events transport, for where a proxy strips the WebSocket
// upgrade: the server's frames as a stream from GET /sse, the client's as
// POSTs to /sse/{session}. The stream is read with fetch, not EventSource:
// one implementation for browsers and Node 20 (which has no EventSource),
// and fetch tells the status of a refused stream, which EventSource hides.

// After a POST's 404 (the session ended) the stream is given this long to
// bring its close event, which says why, before the link ends without one.
const SESSION_END_MS = 2000;

// sseURL is the stream's address for a WebSocket address: ws://host/ws?q is
// http://host/sse?q (wss: https:).
function sseURL(url) {
  const u = new URL(url);
  if (u.protocol === 'ws:') u.protocol = 'http:';
  else if (u.protocol === 'wss:') u.protocol = 'https:';
  u.pathname = u.pathname.endsWith('/ws') ? `${u.pathname.slice(0, -3)}/sse` : `${u.pathname.replace(/\/$/, '')}/sse`;
  return u.toString();
}

// frameType reads the type of a frame that starts as the server writes
// them, {"type":..., without parsing the whole frame.
const frameType = (data) => {
  const m = /^\{\s*"type"\s*:\s*"(\w+)"/.exec(data);
  return m ? m[1] : '';
};

// drop discards a body that says nothing, freeing its connection.
const drop = (res) => (res.body ? res.body.cancel().catch(() => {}) : undefined);

const message = (err) => String((err && (err.cause && err.cause.message || err.message)) || err);

// errorText reads the error of a refused POST's JSON body.
async function errorText(res) {
  try {
    const body = await res.text();
    try {
      return String(JSON.parse(body).error || body);
    } catch {
      return body;
    }
  } catch {
    return '';
  }
}

// openSSE opens a link over a stream of Server-Sent Events, url being the
// WebSocket address with its query.
function openSSE(url, maxMessageBytes, on) {
  const streamURL = sseURL(url);
  const stream = new AbortController();
  const posts = new AbortController();
  let session = '';
  let postURL = '';
  let done = false; // nothing more is reported
  let closing = false; // close(): the stream ends once the frames sent before are posted
  let queue = [];
  let flushing = false; // a POST in flight, or one to start in this turn
  let endTimer = 0;

  const stop = () => {
    clearTimeout(endTimer);
    stream.abort();
  };
  const end = (code, reason, final) => {
    if (done) return;
    done = true;
    stop();
    posts.abort();
    on.close(code, reason, final);
  };
  const link = {
    get open() { return !done && !closing && session !== ''; },
    send(text) {
      queue.push(text);
      if (flushing) return;
      flushing = true;
      queueMicrotask(flush); // frames sent in the same turn go in one POST
    },
    close() {
      done = true;
      closing = true;
      if (!flushing) stop();
    },
    terminate() {
      done = true;
      stop();
      posts.abort();
    },
  };

  // flush posts what is queued, one POST at a time, so that the server
  // takes the frames in the order they were sent.
  async function flush() {
    while (queue.length) {
      const body = queue.join('\n');
      queue = [];
      let res;
      try {
        res = await fetch(postURL, { method: 'POST', body, headers: { 'Content-Type': 'text/plain' }, signal: posts.signal });
      } catch (err) {
        end(1006, `POST failed: ${message(err)}`, false);
        break;
      }
      if (res.status === 404) {
        await drop(res);
        // Its close event may be on its way: the stream ends soon either way.
        if (!done && !endTimer) endTimer = setTimeout(() => end(1006, 'the session ended (HTTP 404)', false), SESSION_END_MS);
        break;
      }
      if (res.ok) {
        await drop(res);
        continue;
      }
      // 429's frames over the rates: the stream brings the error frame a
      // WebSocket gets. Others (413 past -max-message, 503 from a node that
      // did not answer) say nothing on the stream: tell the app.
      const text = await errorText(res);
      if (res.status !== 429 && !done && on.error) on.error(`the server refused frames (HTTP ${res.status}): ${text}`);
    }
    flushing = false;
    if (closing) stop();
  }

  const read = async () => {
    let res;
    try {
      res = await fetch(streamURL, { headers: { Accept: 'text/event-stream' }, cache: 'no-store', signal: stream.signal });
    } catch (err) {
      return end(1006, `cannot open the stream: ${message(err)}`, false);
    }
    if (res.status !== 200 || !res.body) {
      await drop(res);
      const s = res.status;
      if (s === 401) return end(4401, 'HTTP 401', false); // refreshed and retried like a 4401
      // A 404 here may be a server without streams (a WebSocket may still
      // open next time), so it is retried, unlike on /ws.
      return end(1006, `HTTP ${s}`, REFUSALS.includes(s) && s !== 404);
    }
    const reader = res.body.getReader();
    const text = new TextDecoder();
    let buf = ''; // what came of the current line
    let data = null; // the event's data lines so far, null before its first
    const line = (l) => {
      if (l === '') {
        if (data === null) return true;
        const d = data;
        data = null;
        return event(d);
      }
      if (l.startsWith('data:')) {
        const v = l.slice(l[5] === ' ' ? 6 : 5);
        data = data === null ? v : `${data}\n${v}`;
      }
      return true; // comments (": keepalive") and other fields say nothing
    };
    const event = (d) => {
      const n = byteSize(d, maxMessageBytes);
      if (n > maxMessageBytes) {
        end(TOO_BIG, `a message of ${n} bytes, over maxMessageBytes (${maxMessageBytes})`, false);
        return false;
      }
      const type = frameType(d);
      if (type === 'close') {
        let f = {};
        try { f = JSON.parse(d); } catch { /* a close all the same */ }
        const code = Number.isInteger(f.code) ? f.code : 1006;
        end(code, typeof f.reason === 'string' ? f.reason : '', false);
        return false;
      }
      if (!session && type === 'welcome') {
        try {
          session = String(JSON.parse(d).session || '');
        } catch { /* the connection reports the bad welcome */ }
        if (session) postURL = `${streamURL.replace(/[?#].*$/, '')}/${encodeURIComponent(session)}`;
      }
      on.message(d);
      return !done;
    };
    try {
      for (;;) {
        const { value, done: over } = await reader.read();
        if (done) return;
        if (over) break;
        buf += text.decode(value, { stream: true });
        let at;
        while ((at = buf.search(/\r\n|\r|\n/)) >= 0) {
          if (at === buf.length - 1 && buf[at] === '\r') break; // its \n may come next
          const l = buf.slice(0, at);
          buf = buf.slice(at + (buf[at] === '\r' && buf[at + 1] === '\n' ? 2 : 1));
          if (!line(l)) return;
        }
        // A line longer than any message it could carry: no need to wait for its end.
        if (buf.length > maxMessageBytes + 6 || (data !== null && data.length > maxMessageBytes)) {
          return end(TOO_BIG, `a message over maxMessageBytes (${maxMessageBytes})`, false);
        }
      }
      end(1006, 'the stream ended without a close event', false);
    } catch (err) {
      end(1006, `the stream broke: ${message(err)}`, false);
    } finally {
      reader.cancel().catch(() => {});
    }
  };
  read();
  return link;
}

// ---- websocket.js ----
// The WebSocket transport: a link over a WebSocket of the implementation the
// app gives (a browser's own, the ws package in Node).

// isWsPackage tells the ws package's WebSocket (or a subclass), which takes
// options, from a browser's, whose second argument is the subprotocols.
const isWsPackage = (WS) => typeof WS === 'function' && !!WS.prototype &&
  typeof WS.prototype.terminate === 'function' && typeof WS.prototype.on === 'function';

// openWebSocket opens a link over a WebSocket of the implementation WS.
function openWebSocket(WS, url, maxMessageBytes, on) {
  // The ws package reads no message past maxPayload (its default is
  // 100 MiB); other implementations are checked as each message comes.
  const ws = isWsPackage(WS) ? new WS(url, undefined, { maxPayload: maxMessageBytes }) : new WS(url);
  let done = false;
  let refused = 0; // the HTTP status of a refused handshake, where the implementation says it (ws does)
  const link = {
    get open() { return ws.readyState === 1; },
    send(text) { ws.send(text); },
    close(code, reason) {
      done = true;
      if (ws.readyState <= 1) ws.close(code, reason);
    },
    terminate() {
      done = true;
      try {
        if (typeof ws.terminate === 'function') ws.terminate(); // the ws package: no closing handshake to wait out
        else ws.close(); // a browser may send no other code than 1000 here
      } catch { /* closed already */ }
    },
  };
  const tooBig = (reason) => {
    if (done) return;
    link.terminate();
    on.close(TOO_BIG, reason, false);
  };
  ws.onmessage = (ev) => {
    if (done) return;
    const n = byteSize(ev.data, maxMessageBytes);
    if (n > maxMessageBytes) tooBig(`a message of ${n} bytes, over maxMessageBytes (${maxMessageBytes})`);
    else on.message(ev.data);
  };
  ws.onclose = (ev) => {
    if (done) return;
    done = true;
    if (refused === 401) on.close(4401, 'HTTP 401', false); // refreshed and retried like a 4401
    else if (REFUSALS.includes(refused)) on.close(ev.code, `HTTP ${refused}`, true);
    else on.close(ev.code, ev.reason, false);
  };
  ws.onerror = (ev) => { // a close follows, with its code
    const msg = String((ev && (ev.message || (ev.error && ev.error.message))) || '');
    const m = /Unexpected server response: (\d+)/.exec(msg);
    if (m) refused = Number(m[1]);
    // Past maxPayload the ws package stops reading and closes, but waits
    // for the server's close frame (up to 30 s): end it now.
    if ((ev && ev.error && ev.error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') || /max payload size exceeded/i.test(msg)) {
      tooBig(`a message over maxMessageBytes (${maxMessageBytes})`);
    }
  };
  return link;
}

// ---- connection.js ----
// The connection: opening it, keeping it alive, its token, and reconnecting
// with a backoff after a close the server did not mean as final. This is
// the one place that opens a transport and hears what it says.

/** Close codes never retried: 4401 (token expired) would fail again with the same token, 4403 is on purpose. */
const FINAL_CLOSES = [4401, 4403];

// A connection that stayed live (welcomed) this long resets the backoff;
// until one does, every attempt waits longer than the last, so a server that
// accepts and drops at once, or welcomes and drops, is not hammered.
const STABLE_MS = 10000;
const MAX_TIMER = 2 ** 31 - 1; // setTimeout overflows past this
const MIN_PING_MS = 100; // app pings never come closer than this, whatever the welcome says

/** The default of the maxMessageBytes option: 4 MiB, ample for a page of 1000 members. */
const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** The default of the connectTimeoutMs option: from opening a connection to its welcome. */
const CONNECT_TIMEOUT_MS = 10000;
// The values of the transport option: 'auto' tries a WebSocket first and falls back to Server-Sent Events.
const TRANSPORTS = ['auto', 'websocket', 'sse'];

// Codes the client reports (in 'state' and lastClose) for connections it
// ended itself: no welcome in time, a message over the limit, a snapshot or
// diff that breaks the protocol. In a browser the close frame it sends says
// only 1000 or nothing, the codes a page may send.
const NO_WELCOME = 1006;
const PROTOCOL_ERROR = 1002;

/** backoffDelay is the wait before reconnect attempt n (0-based): 0.5 s doubling to 15 s, the upper half jittered. */
function backoffDelay(n) {
  const base = Math.min(15000, 500 * 2 ** Math.min(n, 10));
  return base / 2 + Math.random() * (base / 2);
}

/** tokenExpiry returns a JWT's exp in Unix ms, or 0 when it has none or is not a JWT. */
function tokenExpiry(token) {
  try {
    const b64 = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const exp = Number(JSON.parse(atob(b64)).exp);
    return Number.isFinite(exp) && exp > 0 ? exp * 1000 : 0;
  } catch {
    return 0;
  }
}

// pending marks an attempt under way that has no link yet (a token being
// refreshed): connect() and close() see it, and nothing goes out on it.
const pending = () => ({ open: false, send() {}, close() {}, terminate() {} });

// Connection is the client's connection, reconnected as needed. It keeps
// its state in the client's public fields (url, token, refreshToken, uid,
// reconnect, keepalive, maxMessageBytes, connectTimeoutMs, state,
// transport, timeoutMs, attempt, retryAt, liveSince, lastSent, lastRecv,
// lastClose)
// and tells the client, through on: frame(data) for each message,
// state(state, code) for each change, error(text), lost(code) when a
// connection ends and another may follow, ended(code, reason) when the
// client is closed.
class Connection {
  #c;
  #WS;
  #mode; // the transport option
  #fellBack = null; // the close of this attempt's WebSocket, once it fell back to a stream
  #on;
  #link = null;
  #pingTimer = 0;
  #retryTimer = 0;
  #refreshTimer = 0;
  #welcomeTimer = 0; // from opening a connection to its welcome
  welcomes = 0; // welcomes on the current connection: one is the protocol
  pings = 0; // pings sent on the current connection
  pongs = 0; // and pongs received: the server answers each in turn
  silenced = false;

  constructor(client, WS, mode, on) {
    this.#c = client;
    this.#WS = WS;
    this.#mode = mode;
    this.#on = on;
  }

  // idle is true when no connection is open or being opened.
  get idle() { return this.#link === null; }

  connect() {
    clearTimeout(this.#retryTimer);
    this.#c.retryAt = 0;
    if (this.#link) return;
    this.silenced = false;
    // Every attempt tries the WebSocket first, where it may: after a
    // stream ended, the way may be open again (another network, a proxy
    // fixed), and a refused upgrade costs one round trip.
    const kind = this.#mode === 'sse' || !this.#WS ? 'sse' : 'websocket';
    this.#c.transport = kind;
    this.#fellBack = null;
    this.#on.state('connecting');
    this.#open(kind);
  }

  close(reason) {
    const link = this.#link;
    this.#link = null;
    if (link) link.close(1000, reason);
    this.#ended(1000, reason);
  }

  // send sends a frame when a connection takes it, and reports whether one did.
  send(frame) {
    const link = this.#link;
    if (!link || !link.open) return false;
    link.send(JSON.stringify(frame));
    this.#c.lastSent = Date.now();
    // Any text frame ends a silence.
    if (frame.type !== 'silence') this.silenced = false;
    if (frame.type === 'ping') this.pings++;
    this.#schedulePing();
    return true;
  }

  // welcomed counts a welcome, and reports whether it is the connection's
  // first: another one says nothing.
  welcomed() {
    if (this.welcomes++) return false;
    clearTimeout(this.#welcomeTimer);
    this.#c.liveSince = Date.now();
    return true;
  }

  // live starts the keepalive and the token's refresh, once welcomed.
  live() {
    this.#schedulePing();
    this.#scheduleRefresh();
  }

  silence() {
    this.silenced = true;
    clearTimeout(this.#pingTimer);
  }

  // abort ends the current connection from this side, at once and whatever
  // the server does next, and goes on as after a close with code.
  abort(code, reason) {
    this.#abort(this.#link, code, reason);
  }

  #abort(link, code, reason) {
    if (!link || link !== this.#link) return;
    this.#link = null; // its events are not heard any more
    link.terminate();
    this.#lost(code, reason);
  }

  // open opens a link of kind ('websocket' or 'sse') for this attempt.
  async #open(kind) {
    const c = this.#c;
    const mark = pending(); // marks this attempt, so a close() during the refresh below wins
    this.#link = mark;
    // A token that expires before the server would read it: ask for a new one first.
    const exp = () => tokenExpiry(c.token); // 0: no token, or none that says
    if (exp() && exp() < Date.now() + 1000 && c.refreshToken) {
      await this.#refresh();
      if (this.#link !== mark) return;
    }
    // The server would refuse it (HTTP 401, which a browser reports as 1006):
    // final, as a 4401 with no newer token is.
    if (exp() && exp() <= Date.now()) {
      this.#link = null;
      this.#ended(4401, 'token expired');
      return;
    }
    let link;
    try {
      const u = new URL(c.url);
      if (c.token) u.searchParams.set('token', c.token);
      else if (c.uid) u.searchParams.set('uid', c.uid);
      c.transport = kind;
      link = this.#transport(kind, u.toString(), {
        message: (data) => {
          if (link !== this.#link) return;
          c.lastRecv = Date.now();
          this.#on.frame(data);
        },
        close: (code, reason, final) => {
          if (link !== this.#link) return;
          if (this.#fallBack(link, kind, code, reason, final)) return;
          // A stream that failed as its WebSocket did says less of why
          // (a server without streams, a proxy's error page) than the WebSocket.
          const ws = this.#fellBack;
          if (ws && !final && !this.welcomes && code !== 4401 && !FINAL_CLOSES.includes(code)) return this.#lost(ws.code, ws.reason);
          if (!final) return this.#lost(code, reason);
          this.#link = null;
          this.#ended(code, reason);
        },
        error: (text) => {
          if (link === this.#link) this.#on.error(text);
        },
      });
    } catch (err) {
      this.#link = null;
      this.#on.error(`cannot connect: ${err.message}`);
      this.#ended(1006, String(err.message), true);
      return;
    }
    this.#link = link;
    this.welcomes = 0;
    this.pings = 0;
    this.pongs = 0;
    this.#welcomeTimer = setTimeout(() => {
      const reason = `no welcome within ${c.connectTimeoutMs} ms`;
      if (link !== this.#link || this.#fallBack(link, kind, NO_WELCOME, reason, false)) return;
      this.#abort(link, NO_WELCOME, reason);
    }, c.connectTimeoutMs);
  }

  // transport opens the link of one connection attempt to url, feeding it to on.
  #transport(kind, url, on) {
    if (kind === 'sse') return openSSE(url, this.#c.maxMessageBytes, on);
    return openWebSocket(this.#WS, url, this.#c.maxMessageBytes, on);
  }

  // fallBack opens a stream at once, in the same attempt, for a WebSocket
  // that ended before its welcome in a way a stream might not (a proxy that
  // strips the upgrade, one that passes no frames); it reports whether it did.
  #fallBack(link, kind, code, reason, final) {
    if (this.#mode !== 'auto' || kind !== 'websocket' || this.welcomes || final || FINAL_CLOSES.includes(code) || code === 4401) return false;
    clearTimeout(this.#welcomeTimer);
    this.#link = null;
    link.terminate();
    this.#c.lastClose = { code, reason, at: Date.now() };
    this.#fellBack = { code, reason };
    this.#open('sse');
    return true;
  }

  // Pinging a spread fraction of the timeout after the last frame sent keeps
  // one timer re-armed, never an interval: a throttled background tab sends
  // fewer pings instead of a burst, and the server's own pings (answered by
  // the browser) keep such a tab online.
  #schedulePing() {
    clearTimeout(this.#pingTimer);
    const timeout = this.#c.timeoutMs;
    if (!this.#c.keepalive || this.silenced || !timeout) return;
    const wait = Math.min(MAX_TIMER, Math.max(MIN_PING_MS, timeout * (0.2 + Math.random() * 0.15)));
    this.#pingTimer = setTimeout(() => this.send({ type: 'ping' }), wait);
  }

  #scheduleRefresh(failed = false) {
    const c = this.#c;
    clearTimeout(this.#refreshTimer);
    const exp = c.refreshToken && c.token ? tokenExpiry(c.token) : 0;
    const left = exp - Date.now();
    if (!exp || left <= 0) return; // past exp, the 4401 tries once more
    // A quarter of what is left, at most a minute, before exp: slack for a
    // slow refreshToken. After a failure, half of what is left, once a second at most.
    const at = failed ? Math.max(1000, left / 2) : left - Math.min(60000, left / 4);
    if (failed && at >= left) return;
    this.#refreshTimer = setTimeout(async () => {
      const ok = await this.#refresh();
      if (c.state !== 'live') return;
      if (ok) this.send({ type: 'refresh', token: c.token });
      this.#scheduleRefresh(!ok);
    }, Math.min(at, MAX_TIMER));
  }

  // refresh asks the app for a newer token; it reports whether one came.
  async #refresh() {
    try {
      const t = await this.#c.refreshToken();
      if (typeof t === 'string' && t) {
        this.#c.token = t;
        return true;
      }
      this.#on.error('refreshToken gave no token');
    } catch (err) {
      this.#on.error(`refreshToken failed: ${err && err.message}`);
    }
    return false;
  }

  async #lost(code, reason) {
    const c = this.#c;
    const now = Date.now();
    this.#link = null;
    clearTimeout(this.#pingTimer);
    clearTimeout(this.#refreshTimer);
    clearTimeout(this.#welcomeTimer);
    c.lastClose = { code, reason, at: now };
    if (c.liveSince && now - c.liveSince >= STABLE_MS) c.attempt = 0;
    c.liveSince = 0;
    this.#on.lost(code);
    let final = !c.reconnect || FINAL_CLOSES.includes(code);
    if (code === 4401 && c.reconnect && c.refreshToken) {
      const mark = pending();
      this.#link = mark;
      this.#on.state('waiting', code);
      final = !(await this.#refresh());
      if (this.#link !== mark) return;
      this.#link = null;
    }
    if (final) {
      this.#ended(code, reason);
      return;
    }
    const delay = backoffDelay(c.attempt++);
    c.retryAt = now + delay;
    this.#retryTimer = setTimeout(() => this.connect(), delay);
    if (c.state !== 'waiting') this.#on.state('waiting', code); // said already while refreshing
  }

  // ended makes the client closed: nothing more happens until connect().
  #ended(code, reason, retry = false) {
    const c = this.#c;
    clearTimeout(this.#pingTimer);
    clearTimeout(this.#retryTimer);
    clearTimeout(this.#refreshTimer);
    clearTimeout(this.#welcomeTimer);
    c.lastClose = { code, reason, at: Date.now() };
    c.liveSince = 0;
    if (retry && c.reconnect) {
      const delay = backoffDelay(c.attempt++);
      c.retryAt = Date.now() + delay;
      this.#retryTimer = setTimeout(() => this.connect(), delay);
      this.#on.state('waiting', code);
      return;
    }
    this.#on.ended(code, reason);
    this.#on.state('closed', code);
  }
}

// ---- records.js ----
// Records: who a user is (info) and what it wants (mode, note), as the
// server's frames say, kept for every user present to the client.

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
function readRecord(v) {
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

const copyRecord = (r) => {
  const c = {};
  if (r.info) c.info = JSON.parse(JSON.stringify(r.info));
  if (r.mode) c.mode = r.mode;
  if (r.note) c.note = { ...r.note };
  return c;
};

// Records holds the record of every user present to the client (listed in
// a joined channel, a watched user online) and of its own user. What the
// frames carry that is not a record is skipped and told to bad(what, ch).
class Records {
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

// ---- sets.js ----
// set(): the changes of the own user's mode and note, checked as the server
// would, and waited on until the server has taken or refused them.

// The server's bounds of a note, in code points; a set past them is refused.
const MAX_NOTE_TEXT = 128;
const MAX_NOTE_EMOJI = 16;
const SET_MODES = ['online', 'dnd', 'invisible'];

const codePoints = (s) => { let n = 0; for (const _ of s) n++; return n; };

// setFrame checks a set() call against the server's rules of shape, so a
// mistake in the app fails at once and names the field as the server would;
// whether an until is in time is the server's to say, on its clock.
function setFrame(change) {
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
const refusesSet = (error) => SET_ERROR.test(error) || DROPPED.test(error);

// A set() call waiting: sent on the connection whose ping number `ping`
// follows it (0: not sent yet).
class SetWait {
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
class Sets {
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

// ---- watch.js ----
// The watch list: the users whose state (active, away, offline) and last
// seen the client follows, from watching and status frames.

const order = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

// Watch is what the client knows of the users it watches. Records of the
// watched users online are kept in records; bad(what) hears what a frame
// breaks and was skipped.
class Watch {
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

// ---- presenced.js ----

export { CONNECT_TIMEOUT_MS, FINAL_CLOSES, MAX_MESSAGE_BYTES, backoffDelay, tokenExpiry };
export { MAX_NOTE_EMOJI, MAX_NOTE_TEXT };

/**
 * @typedef {'connecting'|'live'|'waiting'|'closed'} State
 * @typedef {{count: number, members: Set<string>, away: Set<string>, typing: string[], complete: boolean}} ChannelState
 * @typedef {{state: 'unknown'|'active'|'away'|'offline', last_seen: number|null}} UserState
 */

/**
 * Presenced is one connection to presenced, reconnected as needed. Events
 * (an EventTarget; CustomEvent detail in brackets): 'state' {state, code?},
 * 'joined' {channel}, 'left' {channel}, 'presence' {channel, count, joins,
 * leaves, away, active, users, updated} after the state changed, 'typing'
 * {channel, users}, 'watching' {online, away, users, last_seen}, 'status'
 * {online, offline, away, active, last_seen, users, updated}, 'chat'
 * {channel, from, text}, 'publish' {channel, data}, 'message' {data},
 * 'error' {error, channel?}; and 'frame', each server frame as it came,
 * before it is applied. users and updated map user IDs to records
 * ({info, mode, note}, each part omitted when empty).
 */
export class Presenced extends EventTarget {
  #conn;
  #records = new Records(() => this.uid, (u) => this.#watch.online(u) || this.#channels.held(u), (what, ch) => this.#badFrame(what, ch));
  #channels = new Channels(this.#records, {
    send: (frame) => this.#send(frame),
    live: () => this.state === 'live',
    joined: (channel) => this.#emit('joined', { channel }),
    left: (channel) => this.#emit('left', { channel }),
    presence: (detail) => this.#emit('presence', detail),
    typing: (detail) => this.#emit('typing', detail),
    violation: (ch, what) => this.#violation(ch, what),
    bad: (what, ch) => this.#badFrame(what, ch),
  });
  #watch = new Watch(this.#records, (what) => this.#badFrame(what));
  #sets = new Sets(); // set() calls not yet confirmed
  #outbox = []; // frames sent while not live

  /**
   * @param {object} o
   * @param {string} o.url the server's WebSocket address, e.g. wss://chat.example.com/ws
   * @param {string} [o.token] an HS256 JWT for a server with -jwt-secret
   * @param {() => Promise<string>} [o.refreshToken] gives a newer token: called before the token's exp, and after a 4401
   * @param {string} [o.uid] the user ID, for a server in demo mode (no token)
   * @param {string[]} [o.channels] joined at connect and after every reconnect
   * @param {any} [o.WebSocket] a WebSocket implementation (the ws package in Node); default globalThis.WebSocket
   * @param {'auto'|'websocket'|'sse'} [o.transport] 'auto' (the default) tries a WebSocket first on every attempt and falls back to Server-Sent Events at once when it does not open or ends before its welcome; the others pin one
   * @param {boolean} [o.reconnect] reconnect after a close the server did not mean as final (default true)
   * @param {boolean} [o.keepalive] send app pings (default true)
   * @param {number} [o.maxMessageBytes] the largest message read; a larger one ends the connection (1009) (default 4 MiB)
   * @param {number} [o.connectTimeoutMs] from opening a connection to its welcome; past it the attempt is dropped and retried (default 10 s)
   */
  constructor({
    url, token = '', refreshToken = null, uid = '', channels = [], WebSocket = globalThis.WebSocket, reconnect = true, keepalive = true,
    maxMessageBytes = MAX_MESSAGE_BYTES, connectTimeoutMs = CONNECT_TIMEOUT_MS, transport = 'auto',
  } = {}) {
    super();
    if (!url) throw new TypeError('Presenced: url is required');
    if (!TRANSPORTS.includes(transport)) throw new TypeError(`Presenced: transport is 'auto', 'websocket' or 'sse', not ${JSON.stringify(transport)}`);
    if (!WebSocket && transport === 'websocket') throw new TypeError('Presenced: no WebSocket implementation: pass one (in Node, the ws package)');
    if (typeof globalThis.fetch !== 'function' && transport !== 'websocket') {
      if (!WebSocket) throw new TypeError('Presenced: neither a WebSocket implementation nor fetch: pass a WebSocket (in Node, the ws package)');
      transport = 'websocket'; // no streams without fetch
    }
    if (!whole(maxMessageBytes) || maxMessageBytes < 1) throw new TypeError(`Presenced: maxMessageBytes is a positive whole number, not ${maxMessageBytes}`);
    if (!(connectTimeoutMs > 0 && connectTimeoutMs <= MAX_TIMER)) throw new TypeError(`Presenced: connectTimeoutMs is a positive number of ms, not ${connectTimeoutMs}`);
    this.url = url;
    this.token = token;
    this.refreshToken = refreshToken;
    this.uid = uid;
    this.reconnect = reconnect;
    this.keepalive = keepalive;
    this.maxMessageBytes = maxMessageBytes;
    this.connectTimeoutMs = connectTimeoutMs;
    /** @type {'websocket'|'sse'} the transport of the current connection, or of the attempt under way */
    this.transport = transport === 'sse' || !WebSocket ? 'sse' : 'websocket';
    /** @type {State} */
    this.state = 'connecting';
    this.timeoutMs = 0; // the server's idle timeout, from its welcome
    this.away = false; // what setActivity last said
    this.attempt = 0; // reconnect attempts since the last stable connection
    this.retryAt = 0; // when the next attempt starts, while waiting
    this.liveSince = 0;
    this.lastSent = 0; // ms epoch of the last frame sent: the last keepalive
    this.lastRecv = 0;
    this.lastClose = null; // {code, reason, at}
    this.#conn = new Connection(this, WebSocket || null, transport, {
      frame: (data) => this.#frame(data),
      state: (state, code) => this.#setState(state, code),
      error: (error) => this.#emit('error', { error }),
      lost: (code) => {
        this.#channels.lost();
        this.#sets.lost(code, this.#outbox);
      },
      ended: (code, reason) => {
        this.#outbox = [];
        const err = new Error(`presenced: closed (${code}${reason ? ` ${reason}` : ''})`);
        this.#sets.rejectAll(err);
        this.#channels.ended(err);
      },
    });
    for (const ch of channels) this.#channels.want(ch);
    // In a microtask, so listeners added right after the constructor hear
    // the first 'connecting'; close() before then means no connection.
    queueMicrotask(() => { if (this.state === 'connecting' && this.#conn.idle) this.connect(); });
  }

  // ---- the API ----

  /** channel returns a copy of what is known of a channel: empty (count 0, complete false) until its snapshot, or when not joined. @returns {ChannelState} */
  channel(name) { return this.#channels.view(name); }

  /** user returns what the last watching or status frame said of a watched user. @returns {UserState} */
  user(uid) { return this.#watch.user(uid); }

  /**
   * record returns what the client knows of who uid is and what it wants:
   * {info, mode, note}, each part omitted when empty, for a user present to
   * this client (a member of a joined channel, a watched user online) or its
   * own user; undefined for any other. A copy: changing it changes nothing.
   */
  record(uid) { return this.#records.copy(uid); }

  /**
   * set changes the user's own record on every connection of it: mode
   * ('online', 'dnd' or 'invisible') and note ({text, emoji, until}, or null
   * to clear it); what is left out stays as it is. It sends now, or once
   * live, and resolves when the server has taken it (the answer to a ping
   * sent right after it); it rejects at once on a call the server would
   * refuse, at the server's error frame (which names the field), when the
   * connection ends before the server answered (the change may or may not
   * have been made), and when the client closes.
   */
  set(change) {
    if (this.state === 'closed') return Promise.reject(new Error('presenced: the client is closed'));
    let frame;
    try {
      frame = setFrame(change);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise((resolve, reject) => {
      const w = new SetWait(frame, resolve, reject);
      this.#sets.add(w);
      if (this.state !== 'live' || !this.#sendSet(w)) this.#outbox.push(w);
    });
  }

  /** join joins a channel (now, or once live) and resolves at its snapshot; an error frame for it rejects. */
  join(channel) {
    if (this.state === 'closed') return Promise.reject(new Error('presenced: the client is closed'));
    if (!CHANNEL.test(channel)) return Promise.reject(new TypeError(`presenced: join ${JSON.stringify(channel)}: a channel name is 1 to 128 letters, digits or _.-:@/#`));
    return this.#channels.join(channel);
  }

  /** leave leaves a channel and resolves when the server says so (or at once when no connection holds it); a join of it still waiting resolves too. */
  leave(channel) {
    if (this.state === 'closed') return Promise.reject(new Error('presenced: the client is closed'));
    return this.#channels.leave(channel);
  }

  /** watch replaces the watch list: status events and user() follow these users. */
  watch(uids) {
    this.#watch.replace(uids);
    if (this.state === 'live') this.#send({ type: 'watch', uids: this.#watch.list });
  }

  /** chat sends a message to a joined channel; it comes back as a 'chat' event to every member. */
  chat(channel, text) { this.send({ type: 'chat', channel, text }); }

  /** typing says the user types in a joined channel; say it again every few seconds while typing goes on. */
  typing(channel) { this.send(typingFrame(channel)); }

  /** setActivity says this connection is 'away' or 'active'; it is said again after every reconnect. */
  setActivity(state) {
    const frame = activityFrame(state);
    this.away = state === 'away';
    this.send(frame); // queued in order with chat and typing while not live
  }

  /**
   * loadMembers pages through a joined channel's whole member list, applying
   * diffs meanwhile; then complete is true until a count-only diff. The
   * channel stays loaded in full: after a reconnect its pages are loaded again.
   */
  loadMembers(channel) {
    return this.#channels.load(channel, this.state === 'closed', (r, w) => { r.follow = true; r.allWaiters.push(w); });
  }

  /** loadPage loads one more page of a joined channel's members, of the snapshot's size; it resolves to complete. */
  loadPage(channel) {
    return this.#channels.load(channel, this.state === 'closed', (r, w) => r.pageWaiters.push(w));
  }

  /** send sends a frame of the protocol as it is, now when live or else once live (also frames the embedding app handles). */
  send(frame) {
    if (this.state === 'live') this.#send(frame);
    else if (this.state !== 'closed') this.#outbox.push(frame);
  }

  /** silence is the demo mode's testing aid: the server ignores this connection's pongs and no app pings go out, so it idles out (4408) unless the app sends a frame. */
  silence() {
    if (this.state !== 'live') return false;
    this.#send({ type: 'silence' });
    this.#conn.silence();
    return true;
  }

  get silenced() { return this.#conn.silenced; }

  /** connect opens a connection now, after close() or a final close, or instead of waiting out the backoff. */
  connect() { this.#conn.connect(); }

  /** close ends the connection for good (connect() opens a new one); pending joins, leaves and loads reject. */
  close(reason = 'closed by the client') {
    if (this.state === 'closed') return;
    this.#conn.close(reason);
  }

  // ---- frames ----

  #frame(data) {
    let f;
    try {
      f = JSON.parse(typeof data === 'string' ? data : String(data));
    } catch {
      return;
    }
    if (!f || typeof f !== 'object' || Array.isArray(f)) return;
    this.#emit('frame', f); // every frame as it came, for what the state does not keep
    if (f.type === 'welcome') return this.#welcome(f);
    // The server speaks first: nothing before the welcome is applied.
    if (!this.#conn.welcomes && f.type !== 'error') return;
    const ch = typeof f.channel === 'string' ? f.channel : '';
    switch (f.type) {
      case 'joined': return this.#channels.joined(ch, f, f.mode === 'invisible');
      case 'left': return this.#channels.left(ch);
      case 'presence': return this.#channels.presence(ch, f);
      case 'members': return this.#channels.members(ch, f);
      case 'typing': return this.#channels.typing(ch, f);
      case 'watching': return this.#emit('watching', this.#watch.watching(f));
      case 'status': return this.#emit('status', this.#watch.status(f));
      case 'pong':
        this.#conn.pongs++;
        this.#sets.confirm(this.#conn.pongs, this.#records, this.uid);
        return;
      case 'chat': return this.#emit('chat', { channel: ch, from: f.from, text: f.text });
      case 'publish': return this.#emit('publish', { channel: ch, data: f.data });
      case 'message': return this.#emit('message', { data: f.data });
      case 'error': {
        const error = String(f.error);
        if (!ch && refusesSet(error)) this.#sets.refuse(error);
        if (ch) this.#channels.refused(ch, error);
        this.#emit('error', ch ? { error, channel: ch } : { error });
      }
    }
  }

  // violation ends a connection whose snapshot or diff breaks the protocol,
  // unapplied: the channel's state could no longer be trusted, and the next
  // connection rebuilds it from new snapshots (after a backoff that grows
  // while connections die young).
  #violation(ch, what) {
    this.#emit('error', { error: `bad frame from the server: ${what}`, channel: ch });
    this.#conn.abort(PROTOCOL_ERROR, `bad frame: ${what}`);
  }

  // badFrame reports a part of a frame that breaks the protocol and was
  // skipped; the rest of the frame holds, and so does the connection.
  #badFrame(what, ch = '') {
    this.#emit('error', ch ? { error: `bad frame from the server: ${what}`, channel: ch } : { error: `bad frame from the server: ${what}` });
  }

  #welcome(f) {
    if (!this.#conn.welcomed()) {
      // A welcome is first and once: another one says nothing, and must not
      // make the client join everything again.
      if (this.#conn.welcomes === 2) this.#emit('error', { error: 'bad frame from the server: a second welcome on the connection (ignored, as are any more)' });
      return;
    }
    if (typeof f.uid === 'string' && f.uid) this.uid = f.uid;
    // The welcome says the own mode and note, set or not; info comes with the lists.
    const me = this.#records.get(this.uid);
    const mine = readRecord({ mode: f.mode, note: f.note });
    if (me && me.info) mine.info = me.info;
    this.#records.set(this.uid, mine);
    const t = Number(f.timeout_ms);
    this.timeoutMs = Number.isFinite(t) && t > 0 ? t : 0;
    this.state = 'live';
    for (const ch of this.#channels.welcomed()) this.#send({ type: 'join', channel: ch });
    if (this.#watch.list) this.#send({ type: 'watch', uids: this.#watch.list });
    if (this.away) this.#send({ type: 'activity', state: 'away' });
    for (const item of this.#outbox.splice(0)) {
      if (item instanceof SetWait) this.#sendSet(item);
      else this.#send(item);
    }
    this.#conn.live();
    this.#setState('live');
  }

  // ---- helpers ----

  #send(frame) {
    if (!this.#conn.send(frame)) return false;
    this.away = awayAfter(frame, this.away);
    return true;
  }

  // sendSet sends a set and a ping after it: the server answers frames in
  // turn, so the pong says the set was taken, unless an error came first.
  #sendSet(w) {
    if (!this.#send(w.frame)) return false;
    this.#send({ type: 'ping' });
    w.ping = this.#conn.pings;
    return true;
  }

  #setState(state, code) {
    this.state = state;
    this.#emit('state', code === undefined ? { state } : { state, code });
  }

  #emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}
