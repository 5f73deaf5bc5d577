// A client in a process of its own, for measuring what one message costs
// it: node --expose-gc bigframe-client.js URL [maxMessageBytes]. It
// connects without reconnecting, and prints one JSON line when the
// connection ends or a message came: {before, peak, state, code, reason,
// message} (RSS in bytes; message: the length of a message's data).
import WebSocket from 'ws';
import { Presenced } from '../presenced.js';

const [url, limit] = process.argv.slice(2);
const opts = { url, uid: 'bigframe', WebSocket, reconnect: false };
if (limit) opts.maxMessageBytes = Number(limit);
globalThis.gc?.();
const before = process.memoryUsage().rss;
let peak = before;
const sample = () => { peak = Math.max(peak, process.memoryUsage().rss); };
const timer = setInterval(sample, 5);
const p = new Presenced(opts);
let done = false;
function report(extra) {
  if (done) return;
  done = true;
  sample();
  clearInterval(timer);
  process.stdout.write(JSON.stringify({ before, peak, state: p.state, ...(p.lastClose ?? {}), ...extra }) + '\n');
  p.close();
  process.exit(0);
}
p.addEventListener('state', (e) => { if (e.detail.state === 'closed') report({}); });
p.addEventListener('message', (e) => report({ message: String(e.detail.data).length }));
setTimeout(() => report({ timeout: true }), 60000).unref();
