-- claim.lua renews the claiming node, marks the nodes whose liveness
-- expired as dead and reaps up to ARGV[4] of their records. The script is
-- atomic, so when several nodes claim at once each record is dropped, and
-- each edge emitted, by exactly one of them. After prelude_keys,
-- prelude_write, prelude_records and prelude_presence.
--
-- A long gap since the last claim by any node means nobody reached Redis
-- meanwhile (Redis stalled or was cut off from all nodes): every node may
-- look expired then, though it is alive and about to renew. So after a gap
-- of ARGV[5] ms claims pause for ARGV[6] ms, one renewal round. That also
-- covers a claim sent before a stall and run by Redis only after it.
-- Claims also pause while a restore window is open (see standing): a node
-- not restored yet is not dead.
-- A user's memberships and its record live in different shards, so a
-- claim goes in two phases over every shard: "m" reaps memberships alone
-- until no dead node has one left, then "a" reaps the rest; a user's
-- leaves are then made before its offline, as when it really leaves.
-- Phase "a" reaps users only of the nodes the claimer found dead in phase
-- m (ripe): a node whose lease runs out during phase a may still have
-- memberships in a shard that has not found it dead yet, so its users wait
-- for the next claim.
--
-- A claimer remembers the nodes it reaped in full (see remark).
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   claiming node
-- ARGV[3]   ttl ms
-- ARGV[4]   limit: the most records to reap
-- ARGV[5]   gap ms
-- ARGV[6]   pause ms
-- ARGV[7]   last-seen TTL ms
-- ARGV[8]   the claimer's landed writes
-- ARGV[9]   this write's number
-- ARGV[10]  restore window ms
-- ARGV[11]  phase: "m", or "a" then, after a space, the ripe nodes
--           (comma-separated); "a" alone, or none, takes every dead node
--           for ripe (a call by hand)
-- ARGV[12]  the claimer's life
-- ARGV[13]  from (see recall)
-- ARGV[14]  unknown (see recall)
-- ARGV[15]  the nodes other shards found dead in this claim, comma-separated
-- ARGV[16...] the remembered triples: a node reaped in full, the life
--           reaped and when (ms)
-- ARGV[last] the log's (see appendLog in prelude_write.lua)
--
-- Returns {1 if the claimer's life ended (it owes), 1 if paused (2 if
-- paused as Redis lost the claimer's writes: it must restore), 1 if more is
-- left to reap in this phase, Redis's time (ms), the nodes reaped in full
-- by this call as "node life", those to forget (comma-separated lists),
-- and, unless paused, the nodes dead here (comma-separated), the life
-- Redis holds of the claimer, then kind, uid, channel, ms, log entry ID
-- per edge made, the shard's clock (see withClock)}. A stale call (see
-- recall) is paused, and so is a claimer whose life ended.

local by = ARGV[2]
local ttl = tonumber(ARGV[3])
seenTTL = tonumber(ARGV[7])
local forgot = {}
local held = 0
local function head(back, paused, more, dead)
  dead = dead or {}
  for _, r in ipairs(reapedNow) do dead[#dead + 1] = string.match(r, '^[^ ]+') end
  return {back, paused, more, now, table.concat(reapedNow, ','), table.concat(forgot, ','), table.concat(dead, ','), held}
end

-- remark writes back what Redis lost of the claimer's reaps. A reap ends
-- a node's life (see standing), so that when the node comes back it owes
-- its users' online and join edges. Redis that restarted empty, or a
-- replica that missed the reap, lost that end: the node, cut off while it
-- was reaped, would put its records back quietly (or find them still
-- there) as after any loss, and its users' offline edges would be the last
-- ones sent. So the claimer, which remembers the life it ended, ends it
-- again unless Redis holds a later life of the node (it came back after
-- the reap: nothing is owed, and the claimer forgets). The node's records
-- Redis holds meanwhile are of the ended life, whose offline and leave
-- edges were made: they go quietly.
local function remark(node, life, at)
  if at < now - seenTTL or num(redis.call('HGET', K('life'), node)) > life then
    forgot[#forgot + 1] = node
    return
  end
  if redis.call('ZSCORE', K('reaped'), node) then return end -- the end is there
  dropQuietly(node)
  redis.call('ZREM', K('alive'), node)
  redis.call('SREM', K('dead'), node)
  redis.call('HDEL', K('proof'), node)
  redis.call('ZADD', K('reaped'), at, node)
  redis.call('HSET', K('life'), node, life)
end

local seen, c = recall(by, num(ARGV[9]), num(ARGV[13]), ARGV[14])
if seen == 'replay' then return replayed(c) end
if seen == 'stale' then return unapplied(head(0, 1, 0)) end
local last = tonumber(redis.call('HGET', K('clock'), 'last') or '0')
local pause = tonumber(redis.call('HGET', K('clock'), 'pause') or '0')
redis.call('HSET', K('clock'), 'last', now)
for i = 16, argc - 2, 3 do remark(ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])) end
local st, till
st, held, till = standing(by, num(ARGV[12]), 'w', ttl, num(ARGV[8]), num(ARGV[9]), num(ARGV[10]), ttl)
if st == 'owes' then return reply(head(1, 1, 0)) end
if st == 'lost' then return reply(head(0, 2, 0), true) end
if now - last > tonumber(ARGV[5]) then
  redis.call('HSET', K('clock'), 'pause', now + tonumber(ARGV[6]))
  return reply(head(0, 1, 0))
end
if now < pause or now < till then return reply(head(0, 1, 0)) end
-- A node reaped longer ago than the last-seen TTL is forgotten, with the
-- replies kept for its calls.
local gone = redis.call('ZRANGEBYSCORE', K('reaped'), '-inf', '(' .. (now - seenTTL))
if #gone > 0 then
  redis.call('ZREM', K('reaped'), unpack(gone))
  for _, node in ipairs(gone) do forgetCalls(node) end
  redis.call('HDEL', K('ver'), unpack(gone))
  redis.call('HDEL', K('life'), unpack(gone))
end
-- A node's last proof of life is its last renewal: its lease's end less a
-- lease (every node's is the same, Config.Timeout), and never after now.
local function die(node, expiry)
  redis.call('ZREM', K('alive'), node)
  redis.call('SADD', K('dead'), node)
  redis.call('HSET', K('proof'), node, math.min(now, tonumber(expiry) - ttl))
end
local expired = redis.call('ZRANGEBYSCORE', K('alive'), '-inf', now, 'WITHSCORES')
for i = 1, #expired, 2 do die(expired[i], expired[i + 1]) end
-- A node is dead everywhere once its liveness ran out in one shard: it
-- renews every shard in one round, so the others run out within moments,
-- and a shard that took it for dead a claim later would make its edges
-- out of order with the others' (a join after its user's offline).
for node in string.gmatch(argc >= 15 and ARGV[15] or '', '[^,]+') do
  local expiry = redis.call('ZSCORE', K('alive'), node)
  if expiry then die(node, expiry) end
end
local budget = tonumber(ARGV[4])
local phase, ripeList = string.match(ARGV[11] or 'a', '^(%a)( ?.*)$')
local ripe = nil -- nil: every node
if ripeList ~= '' then
  ripe = {}
  for node in string.gmatch(ripeList, '[^, ]+') do ripe[node] = true end
end
local function membersOnly(node) return phase ~= 'a' or (ripe ~= nil and not ripe[node]) end
for _, node in ipairs(redis.call('SMEMBERS', K('dead'))) do
  budget = reap(node, budget, membersOnly(node))
  if budget <= 0 then break end
end
trimSeen()
local more = 0
local dead = redis.call('SMEMBERS', K('dead'))
for _, node in ipairs(dead) do
  if not membersOnly(node) or #recordsOf('m', node, 1) > 0 then
    more = 1
    break
  end
end
return reply(head(0, 0, more, dead))
