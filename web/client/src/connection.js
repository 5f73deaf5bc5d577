// The connection: opening it, keeping it alive, its token, and reconnecting
// with a backoff after a close the server did not mean as final. This is
// the one place that opens a transport and hears what it says.

import { openSSE } from './sse.js';
import { openWebSocket } from './websocket.js';

/** Close codes never retried: 4401 (token expired) would fail again with the same token, 4403 is on purpose. */
export const FINAL_CLOSES = [4401, 4403];

// A connection that stayed live (welcomed) this long resets the backoff;
// until one does, every attempt waits longer than the last, so a server that
// accepts and drops at once, or welcomes and drops, is not hammered.
const STABLE_MS = 10000;
export const MAX_TIMER = 2 ** 31 - 1; // setTimeout overflows past this
const MIN_PING_MS = 100; // app pings never come closer than this, whatever the welcome says

/** The default of the maxMessageBytes option: 4 MiB, ample for a page of 1000 members. */
export const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** The default of the connectTimeoutMs option: from opening a connection to its welcome. */
export const CONNECT_TIMEOUT_MS = 10000;
// The values of the transport option: 'auto' tries a WebSocket first and falls back to Server-Sent Events.
export const TRANSPORTS = ['auto', 'websocket', 'sse'];

// Codes the client reports (in 'state' and lastClose) for connections it
// ended itself: no welcome in time, a message over the limit, a snapshot or
// diff that breaks the protocol. In a browser the close frame it sends says
// only 1000 or nothing, the codes a page may send.
const NO_WELCOME = 1006;
export const PROTOCOL_ERROR = 1002;

/** backoffDelay is the wait before reconnect attempt n (0-based): 0.5 s doubling to 15 s, the upper half jittered. */
export function backoffDelay(n) {
  const base = Math.min(15000, 500 * 2 ** Math.min(n, 10));
  return base / 2 + Math.random() * (base / 2);
}

/** tokenExpiry returns a JWT's exp in Unix ms, or 0 when it has none or is not a JWT. */
export function tokenExpiry(token) {
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
export class Connection {
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
