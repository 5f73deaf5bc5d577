// The Server-Sent Events transport, for where a proxy strips the WebSocket
// upgrade: the server's frames as a stream from GET /sse, the client's as
// POSTs to /sse/{session}. The stream is read with fetch, not EventSource:
// one implementation for browsers and Node 20 (which has no EventSource),
// and fetch tells the status of a refused stream, which EventSource hides.

import { REFUSALS, TOO_BIG, byteSize } from './link.js';

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
export function openSSE(url, maxMessageBytes, on) {
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
