-- leave.lua drops up to ARGV[3] of the node's own records, for a node that
-- shuts down; once none is left it drops the node's liveness too. It goes
-- in the two phases of claim.lua, memberships first. A node gone this way
-- is kept in T:reaped, for the last-seen TTL, as the replies of its calls
-- are. After prelude_keys, prelude_write, prelude_records and
-- prelude_presence.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   node
-- ARGV[3]   limit: the most records to drop
-- ARGV[4]   last-seen TTL ms
-- ARGV[5]   phase: "m" or "a"
-- ARGV[6]   this call's number
-- ARGV[7]   from (see recall)
-- ARGV[8]   unknown (see recall)
-- ARGV[9]   the log's (see appendLog in prelude_write.lua)
--
-- Returns {1 if more is left in this phase, then kind, uid, channel, ms,
-- log entry ID per edge made, the shard's clock (see withClock)}.

local node = ARGV[2]
seenTTL = tonumber(ARGV[4])
local seen, c = recall(node, num(ARGV[6]), num(ARGV[7]), ARGV[8])
if seen == 'replay' then return replayed(c) end
if seen == 'stale' then return unapplied({1}) end
redis.call('HSET', K('ver'), node, math.max(verOf(node), num(ARGV[6])))
redis.call('SADD', K('dead'), node)
local membersOnly = ARGV[5] == 'm'
local more = 0
reap(node, tonumber(ARGV[3]), membersOnly)
if membersOnly then
  if #recordsOf('m', node, 1) > 0 then more = 1 end
elseif holdsRecords(node) then
  more = 1
end
if not holdsRecords(node) then
  -- Edges it made and has not delivered yet: its lease runs on, and a
  -- claim takes them over if it dies before it delivers them.
  if not keeps(node) then redis.call('ZREM', K('alive'), node) end
  redis.call('SREM', K('dead'), node)
  redis.call('ZADD', K('reaped'), now, node)
  more = 0
end
trimSeen()
return reply({more})
