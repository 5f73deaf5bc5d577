// Checks of server frames, before they change any state, and the server's
// rules for names. Each check returns what is wrong, or '' when nothing is.

// The server's rule for channel names: a bad one gets an error frame that
// names no channel, which no join could be told from.
export const CHANNEL = /^[A-Za-z0-9_.:@/#-]{1,128}$/;
// The server's rule for user IDs: what snapshots and pages list.
export const UID = /^[A-Za-z0-9_.@-]{1,64}$/;

export const strings = (v) => (Array.isArray(v) ? v.filter((s) => typeof s === 'string') : []);
export const whole = (v) => Number.isSafeInteger(v) && v >= 0;
export const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
export const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

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
export const badList = (name, v) => (v == null || Array.isArray(v) ? '' : `${name} is not a list`);

// badRecords checks an optional map of records (users, updated): an object
// or nothing. A bad entry in a good map is skipped where it is read.
export const badRecords = (name, v) => (v == null || isObject(v) ? '' : `${name} is not an object`);

export function badSnapshot(f) {
  if (!whole(f.count)) return `count ${JSON.stringify(f.count)} is not a whole number`;
  const bad = badUIDs('members', f.members) || badList('away', f.away);
  if (bad) return bad;
  if (f.members.length > f.count) return `${f.members.length} members listed, count ${f.count}`;
  return '';
}

export function badDiff(f) {
  if (!whole(f.count)) return `count ${JSON.stringify(f.count)} is not a whole number`;
  return badList('joins', f.joins) || badList('leaves', f.leaves) || badList('away', f.away) || badList('active', f.active);
}

// badPage checks a members frame against the page asked for: after `after`,
// at most `limit`; a page that says more follow must name its last member as
// next, so each page moves the pass on.
export function badPage(f, after, limit) {
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
