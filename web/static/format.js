// Small pure helpers for the page: durations, clock times, IDs, channel names.

const UID_RE = /^[A-Za-z0-9_.@-]{1,64}$/;
const CHANNEL_RE = /^[A-Za-z0-9_.:@\/#-]{1,128}$/;

/** validUid reports whether s is a user ID the server accepts: 1–64 letters, digits or _.-@ */
export function validUid(s) {
  return UID_RE.test(s);
}

/** validChannel reports whether s is a channel name the server accepts: 1–128 letters, digits or _.-:@/# */
export function validChannel(s) {
  return CHANNEL_RE.test(s);
}

/** randomTag returns 4 random base-36 characters. */
export function randomTag() {
  const a = new Uint32Array(1);
  crypto.getRandomValues(a);
  return (a[0] % 36 ** 4).toString(36).padStart(4, '0');
}

/** fmtDur writes a duration in ms for people: "250 ms", "2.5 s", "30 s", "1 min 5 s". */
export function fmtDur(ms) {
  ms = Math.max(0, ms);
  if (ms < 1000) return `${Math.round(ms / 10) * 10} ms`;
  const s = ms / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  const r = Math.round(s - m * 60);
  return r ? `${m} min ${r} s` : `${m} min`;
}

/** fmtClock writes a local time of day with tenths: "14:03:07.4". */
export function fmtClock(at) {
  const d = new Date(at);
  const p = (n) => String(n).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${Math.floor(d.getMilliseconds() / 100)}`;
}
