// A WebSocket client of presenced: the welcome, ping/pong and the
// demo-only "silence" message here; channels, chat, watch lists and the
// frames they bring are the caller's, through send() and "frame" events.
// The channels it names at connect are joined as the socket opens.
//
// Keepalives: after each pong the client waits a fraction of the server's
// timeout and sends the next app ping. Scheduling from the reply, never with
// setInterval, means a throttled background tab sends fewer pings instead of
// queueing a burst; the server's own pings (answered by the browser) keep
// such a tab online.

/** socketURL returns the /ws address on this page's host with the given query. */
export function socketURL(query) {
  const u = new URL('/ws', location.href);
  u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  for (const [k, v] of Object.entries(query)) u.searchParams.set(k, v);
  return u.toString();
}

/** backoffDelay is the wait before reconnect attempt n (0-based): exponential, capped, half jittered. */
export function backoffDelay(n) {
  const base = Math.min(15000, 500 * 2 ** Math.min(n, 10));
  return base / 2 + Math.random() * (base / 2);
}

// Closes the server means: 4401 (token expired) would be refused again with
// the same token, and 4403 (disconnected by the server side) is on purpose.
// Neither is retried.
export const FINAL_CLOSES = [4401, 4403];

// A connection that lived this long resets the backoff; a server that accepts
// and drops at once must not be hammered.
const STABLE_MS = 10000;

/**
 * Client is one WebSocket connection. It dispatches:
 *  - "change": any state or timing field changed;
 *  - "frame":  detail is a parsed server frame (welcome, joined, presence, chat, status, error, ...);
 *  - "closed": detail is {code, reason, clean, at}.
 * States: new, connecting, open (socket up, no welcome yet), live, waiting (reconnect
 * scheduled), closed.
 */
export class Client extends EventTarget {
  /**
   * @param {object} o
   * @param {string} o.uid      user ID sent as ?uid= (demo mode)
   * @param {string} [o.token]  JWT sent as ?token= instead, when the server wants one
   * @param {boolean} [o.reconnect] reconnect with backoff after an unwanted close
   * @param {number[]} [o.pingAt] app ping delay as [min, max] fractions of the timeout
   * @param {string[]} [o.channels] channels to join at connect (?channels=); the
   *   caller may change the array between connections
   */
  constructor({ uid, token = '', reconnect = false, pingAt = [1 / 3, 1 / 3], channels = [] }) {
    super();
    this.uid = uid;
    this.token = token;
    this.channels = channels;
    this.reconnect = reconnect;
    this.pingAt = pingAt;
    this.ws = null;
    this.state = 'new';
    this.timeoutMs = 0;
    this.lastSent = 0;  // ms epoch of the last frame this page sent: its last keepalive
    this.lastRecv = 0;
    this.liveSince = 0;
    this.lastClose = null;
    this.attempt = 0;
    this.retryAt = 0;
    this.silenced = false;
    this.silencedAt = 0;
    this.away = false; // this connection said it is away
    this.wanted = false;
    this.pingTimer = 0;
    this.retryTimer = 0;
  }

  /** connect opens the socket now (cancelling a pending retry) unless one is already open. */
  connect() {
    this.wanted = true;
    clearTimeout(this.retryTimer);
    this.retryAt = 0;
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) return;
    this.silenced = false;
    // With a token the server (with -jwt-secret) takes the user from it; the uid
    // is what a server in demo mode uses instead.
    const query = this.token ? { uid: this.uid, token: this.token } : { uid: this.uid };
    if (this.channels.length) query.channels = this.channels.join(',');
    const ws = new WebSocket(socketURL(query));
    this.ws = ws;
    this.setState('connecting');
    ws.onopen = () => {
      if (ws !== this.ws) return;
      // The upgrade request itself is the connection's first keepalive.
      this.lastSent = Date.now();
      this.setState('open');
    };
    ws.onmessage = (ev) => this.onMessage(ws, ev);
    ws.onclose = (ev) => this.onClose(ws, ev);
  }

  /** close ends the connection on purpose; no reconnect follows. */
  close(reason = 'closed by the page') {
    this.wanted = false;
    clearTimeout(this.retryTimer);
    clearTimeout(this.pingTimer);
    this.retryAt = 0;
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) {
      this.ws.close(1000, reason);
    } else if (this.state === 'waiting') {
      this.setState('closed');
    }
  }

  /** send writes one JSON frame; it reports whether the socket was open. */
  send(frame) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(frame));
    this.lastSent = Date.now();
    // The server counts chatting and typing as being back.
    if (frame.type === 'chat' || frame.type === 'typing') this.away = false;
    this.emit('change');
    return true;
  }

  /**
   * setActivity tells the server this connection is away (or active again);
   * a user is away while every connection of it is. It reports whether the
   * frame went out.
   */
  setActivity(away) {
    if (!this.send({ type: 'activity', state: away ? 'away' : 'active' })) return false;
    this.away = away;
    this.emit('change');
    return true;
  }

  /** silence asks the server to ignore this connection's pongs, then sends nothing more. */
  silence() {
    if (this.silenced || !this.send({ type: 'silence' })) return false;
    clearTimeout(this.pingTimer);
    this.silenced = true;
    this.silencedAt = Date.now();
    this.emit('change');
    return true;
  }

  /** bringBack sends a keepalive on a silenced socket that is still open, or reconnects. */
  bringBack() {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.silenced = false;
      this.send({ type: 'ping' }); // its pong schedules the next ping
      return;
    }
    this.connect();
  }

  /** live reports whether the server has welcomed the current socket. */
  get live() { return this.state === 'live'; }

  setState(s) {
    this.state = s;
    this.emit('change');
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  schedulePing() {
    clearTimeout(this.pingTimer);
    if (this.silenced || !this.timeoutMs) return;
    const [lo, hi] = this.pingAt;
    const delay = this.timeoutMs * (lo + Math.random() * (hi - lo));
    this.pingTimer = setTimeout(() => { if (!this.silenced) this.send({ type: 'ping' }); }, delay);
  }

  onMessage(ws, ev) {
    if (ws !== this.ws) return;
    this.lastRecv = Date.now();
    let frame;
    try {
      frame = JSON.parse(ev.data);
    } catch {
      frame = { type: 'error', error: 'the server sent a frame that is not JSON' };
    }
    if (frame === null || typeof frame !== 'object') frame = { type: 'error', error: 'the server sent a frame that is not an object' };
    switch (frame.type) {
      case 'welcome':
        if (typeof frame.uid === 'string') this.uid = frame.uid;
        this.timeoutMs = Number(frame.timeout_ms) || 0;
        this.liveSince = this.lastRecv;
        this.state = 'live';
        this.schedulePing();
        // A new connection starts active; one that was away says so again.
        if (this.away) this.ws.send(JSON.stringify({ type: 'activity', state: 'away' }));
        break;
      case 'pong':
        this.schedulePing();
        break;
    }
    this.emit('frame', frame);
    this.emit('change');
  }

  onClose(ws, ev) {
    if (ws !== this.ws) return;
    const now = Date.now();
    clearTimeout(this.pingTimer);
    this.ws = null;
    this.lastClose = { code: ev.code, reason: ev.reason, clean: ev.wasClean, at: now };
    if (this.liveSince && now - this.liveSince >= STABLE_MS) this.attempt = 0;
    this.liveSince = 0;
    this.emit('closed', this.lastClose);
    if (FINAL_CLOSES.includes(ev.code)) this.wanted = false;
    if (this.reconnect && this.wanted) {
      const delay = backoffDelay(this.attempt++);
      this.retryAt = now + delay;
      this.retryTimer = setTimeout(() => this.connect(), delay);
      this.setState('waiting');
      return;
    }
    this.setState('closed');
  }
}
