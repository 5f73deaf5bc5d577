// The WebSocket transport: a link over a WebSocket of the implementation the
// app gives (a browser's own, the ws package in Node).

import { REFUSALS, TOO_BIG, byteSize } from './link.js';

// isWsPackage tells the ws package's WebSocket (or a subclass), which takes
// options, from a browser's, whose second argument is the subprotocols.
const isWsPackage = (WS) => typeof WS === 'function' && !!WS.prototype &&
  typeof WS.prototype.terminate === 'function' && typeof WS.prototype.on === 'function';

// openWebSocket opens a link over a WebSocket of the implementation WS.
export function openWebSocket(WS, url, maxMessageBytes, on) {
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

