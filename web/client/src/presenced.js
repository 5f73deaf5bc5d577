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

import { activityFrame, awayAfter, typingFrame } from './activity.js';
import { Channels } from './channels.js';
import { CONNECT_TIMEOUT_MS, Connection, MAX_MESSAGE_BYTES, MAX_TIMER, PROTOCOL_ERROR, TRANSPORTS } from './connection.js';
import { CHANNEL, whole } from './frames.js';
import { Records, readRecord } from './records.js';
import { SetWait, Sets, refusesSet, setFrame } from './sets.js';
import { Watch } from './watch.js';

export { CONNECT_TIMEOUT_MS, FINAL_CLOSES, MAX_MESSAGE_BYTES, backoffDelay, tokenExpiry } from './connection.js';
export { MAX_NOTE_EMOJI, MAX_NOTE_TEXT } from './sets.js';

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
