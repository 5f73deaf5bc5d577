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

/** fmtAgo writes how long ago something was, coarsely, for a last seen: "just now", "2 min ago", "3 h ago". */
export function fmtAgo(ms) {
  const min = Math.floor(Math.max(0, ms) / 60000);
  if (min < 1) return 'just now';
  if (min < 60) return `${min} min ago`;
  const h = Math.floor(min / 60);
  if (h < 24) return `${h} h ago`;
  return `${Math.floor(h / 24)} d ago`;
}

/**
 * typingText says who types, from a typing frame's users (sorted, at most
 * 10) and count (present when there are more), leaving out `me`: the
 * server names the sender too, and no one needs telling that they type.
 */
export function typingText(users, count, me) {
  const others = users.filter((u) => u !== me);
  if (count > users.length || others.length > 3) return 'several people are typing…';
  if (others.length === 0) return '';
  if (others.length === 1) return `${others[0]} is typing…`;
  return `${others.slice(0, -1).join(', ')} and ${others[others.length - 1]} are typing…`;
}

/**
 * Throttle lets a thing through at most once per `every` ms for each key:
 * typing frames go out while keys are pressed, not once a key.
 */
export class Throttle {
  constructor(every) {
    this.every = every;
    this.last = new Map();
  }

  /** due reports whether key may go now, and if so counts it as gone at now. */
  due(key, now) {
    const at = this.last.get(key);
    if (at !== undefined && now - at < this.every) return false;
    this.last.set(key, now);
    return true;
  }

  /** reset lets key through at once next time (after a chat, which ends typing). */
  reset(key) {
    this.last.delete(key);
  }
}

/** socketURL returns the /ws address on this page's host with the given query. */
export function socketURL(query) {
  const u = new URL('/ws', location.href);
  u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  for (const [k, v] of Object.entries(query)) u.searchParams.set(k, v);
  return u.toString();
}

/**
 * fmtLeft writes the time left before a note clears, as a countdown that
 * visibly ticks: "0:45", "29:59", "3:59:59", and "2 d 4 h" past a day.
 */
export function fmtLeft(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const p = (n) => String(n).padStart(2, '0');
  if (s >= 86400) {
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    return h ? `${d} d ${h} h` : `${d} d`;
  }
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `${h}:${p(m)}:${p(s % 60)}` : `${m}:${p(s % 60)}`;
}

/**
 * clearAt turns a "clear after" choice into a note's until (Unix ms): ''
 * is never (0), 'today' the coming local midnight, a number that many ms
 * from now.
 */
export function clearAt(choice, now = Date.now()) {
  if (!choice) return 0;
  if (choice === 'today') {
    const d = new Date(now);
    d.setHours(24, 0, 0, 0);
    return d.getTime();
  }
  const ms = Number(choice);
  return Number.isFinite(ms) && ms > 0 ? Math.round(now + ms) : 0;
}

/** codePoints counts the characters of s as the server does: Unicode code points. */
export function codePoints(s) {
  let n = 0;
  for (const _ of s) n++;
  return n;
}
