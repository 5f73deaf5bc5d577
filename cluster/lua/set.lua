-- set.lua renews the node's liveness in the shard, then applies its
-- records. After prelude_keys, prelude_write, prelude_records and
-- prelude_presence.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   node
-- ARGV[3]   ttl ms
-- ARGV[4]   last-seen TTL ms
-- ARGV[5]   the node's landed writes
-- ARGV[6]   this write's number
-- ARGV[7]   restore window ms
-- ARGV[8]   mode: "w" write, "a" this node's records written again in a new
--           life, after its last one ended, "r" restore: what had landed
--           before a loss
-- ARGV[9]   the node's life (in mode "a", the life it begins)
-- ARGV[10]  from (see recall)
-- ARGV[11]  unknown (see recall)
-- ARGV[12...] a list of "u", uid, n, away (n connections of which away are
--           away; n 0 drops the record) and "m", channel, uid, 1|0, away
--           1|0, or "M" and those and the member's record as this node
--           knows it: version, hidden-at ms, record JSON (see
--           keepMemberRecord).
-- ARGV[last] the log's (see appendLog in prelude_write.lua)
--
-- Returns {1 if the node's life ended (it owes), state, ms left of the
-- restore window, the life Redis holds of the node, then kind, uid,
-- channel, ms, log entry ID per edge made, the shard's clock (see
-- withClock)}; state is 0 applied, 1 not applied
-- (the restore window is open), 2 not applied (Redis lost the node's
-- writes: it must restore first), 3 restored, 4 not applied (stale: a
-- later call of the node ran first), 5 not applied (the node's life ended:
-- it must write its records again in a new life; see standing).
-- A restore is quiet, and after the window too but for users that went
-- offline since the loss.

local node = ARGV[2]
local ttl = tonumber(ARGV[3])
local mode = ARGV[8]
local seen, c = recall(node, tonumber(ARGV[6]), num(ARGV[10]), ARGV[11])
if seen == 'replay' then return replayed(c) end
if seen == 'stale' then return unapplied({0, 4, 0, 0}) end
seenTTL = tonumber(ARGV[4])
local st, held, till = standing(node, num(ARGV[9]), mode, ttl, tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ttl)
local state = 0
if st == 'owes' then
  state = 5
elseif st == 'lost' then
  state = 2
elseif st == 'held' then
  state = 1
elseif mode == 'r' then
  state = 3
  if now < till then quiet = true else restoring = true end
end
local i = 12
if state == 1 or state == 2 or state == 5 then i = argc + 1 end
while i <= argc do
  if ARGV[i] == 'u' then
    setUser(node, ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
    i = i + 4
  else
    local rv, rh, rj
    if ARGV[i] == 'M' then rv, rh, rj = tonumber(ARGV[i + 5]), ARGV[i + 6], ARGV[i + 7] end
    setMember(node, ARGV[i + 1], ARGV[i + 2], ARGV[i + 3] == '1', ARGV[i + 4] == '1', rv, rh, rj)
    if rv then i = i + 8 else i = i + 5 end
  end
end
restoring, quiet = false, false
trimSeen()
local owes = 0
if st == 'owes' then owes = 1 end
return reply({owes, state, math.max(0, till - now), held}, state == 2)
