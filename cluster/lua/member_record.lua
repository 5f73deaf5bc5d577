-- member_record.lua copies a user's changed record to the channels of the
-- shard it is a member of, and publishes it on their topics, {s, u, r, rv,
-- h, at}. Every node that holds a membership of the user asks, so the copy
-- and its check are one atomic step: each version reaches each channel's
-- topic once, whichever node comes first, and an older one never after a
-- newer. A channel the user is not a member of (yet) is skipped: its join
-- carries the record. After prelude_keys, prelude_write, prelude_records
-- and prelude_presence.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   uid
-- ARGV[3]   the record's version
-- ARGV[4]   hidden-at ms
-- ARGV[5]   ms of the change
-- ARGV[6]   record JSON
-- ARGV[7...] channels
--
-- Returns 1.

local uid, rv, rh, at, rj = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6]
for i = 7, argc do
  local rec = ARGV[i] .. ' ' .. uid
  if redis.call('ZSCORE', K('c'), rec) and keepMemberRecord(rec, rv, rh, rj) then
    publish(P('pc:' .. ARGV[i]), {u = uid, r = rj, rv = rv, h = tonumber(rh), at = at})
  end
end
return 1
