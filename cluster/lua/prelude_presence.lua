-- prelude_presence.lua follows prelude_records.lua in the scripts that
-- write: users' and members' presence and their edges (setUser,
-- setMember), reaping a dead node's records (reap) and a node's standing
-- in the shard (standing). KEYS: the shard's (prelude_keys.lua).

-- setUser sets node's connection count for uid, and how many of them are
-- away, and emits the user's edges: online when its first node arrives,
-- offline when its last one goes, then away or active when the user's
-- activity (online, every connection on every node away) changes while it
-- is online.
local function setUser(node, uid, n, a)
  if n <= 0 then n, a = 0, 0 end
  a = math.max(0, math.min(a, n))
  local rec = node .. ' ' .. uid
  local old = num(redis.call('HGET', K('u'), rec))
  local olda = num(redis.call('HGET', K('ua'), rec))
  if n == old and a == olda then return end
  local conns0 = num(redis.call('HGET', K('conns'), uid))
  local away0 = num(redis.call('HGET', K('away'), uid))
  if n ~= old then
    if n > 0 then redis.call('HSET', K('u'), rec, n) else redis.call('HDEL', K('u'), rec) end
    if old == 0 then redis.call('ZADD', K('ui'), 0, rec) elseif n == 0 then redis.call('ZREM', K('ui'), rec) end
  end
  local conns1 = conns0
  if n ~= old then
    conns1 = redis.call('HINCRBY', K('conns'), uid, n - old)
    if conns1 <= 0 then redis.call('HDEL', K('conns'), uid) end
  end
  local away1 = away0
  if a ~= olda then
    if a > 0 then redis.call('HSET', K('ua'), rec, a) else redis.call('HDEL', K('ua'), rec) end
    away1 = redis.call('HINCRBY', K('away'), uid, a - olda)
    if away1 <= 0 then redis.call('HDEL', K('away'), uid) end
  end
  if old == 0 and n > 0 then
    if redis.call('HINCRBY', K('nodes'), uid, 1) == 1 then
      redis.call('ZADD', K('online'), 0, uid)
      -- A record outlives its user by the last-seen TTL only: one older
      -- that no trim reached yet is not the returning user's, and the
      -- nodes that still know it hear so before the online edge.
      if not seenWithin(uid) and dropRecord(uid) then
        publish(P('pu:' .. uid), {r = '{}', h = 0, at = now})
      end
      publish(P('pu:' .. uid), {on = 1})
      produce('online', uid, '')
    end
  elseif n == 0 and old > 0 then
    if redis.call('HINCRBY', K('nodes'), uid, -1) <= 0 then
      redis.call('HDEL', K('nodes'), uid)
      redis.call('ZREM', K('online'), uid)
      -- A record dropped quietly is no offline: no last seen, and a
      -- restore must not take it for one (see wentOffline).
      if not quiet then redis.call('ZADD', K('seen'), stamp(), uid) end
      offlines = offlines + 1
      publish(P('pu:' .. uid), {on = 0, at = stamp()})
      produce('offline', uid, '')
    end
  end
  if conns1 > 0 then
    local was = conns0 > 0 and away0 >= conns0
    local is = away1 >= conns1
    if is ~= was then
      if is then
        publish(P('pu:' .. uid), {a = 1})
        produce('away', uid, '')
      else
        publish(P('pu:' .. uid), {a = 2})
        produce('active', uid, '')
      end
    end
  end
end

-- setMember records whether node holds a membership of uid in channel, and
-- whether it says the member is away there, and emits the join or leave
-- edge when the first node arrives or the last goes, then the member's
-- activity edge when it changes while a member: away when every node
-- holding the membership says so.
local function setMember(node, channel, uid, on, away, rv, rh, rj)
  if not on then away = false end
  local rec = channel .. ' ' .. uid
  if on and rv and rv > 0 then keepMemberRecord(rec, rv, rh, rj) end
  local nrec = node .. ' ' .. rec
  local had = redis.call('ZSCORE', K('m'), nrec) ~= false
  local hadAway = redis.call('SISMEMBER', K('ma'), nrec) == 1
  if had == on and hadAway == away then return end
  local mn0 = num(redis.call('HGET', K('mn'), rec))
  local mna0 = num(redis.call('HGET', K('mna'), rec))
  local mn1, mna1 = mn0, mna0
  if on and not had then
    redis.call('ZADD', K('m'), 0, nrec)
    mn1 = redis.call('HINCRBY', K('mn'), rec, 1)
  elseif had and not on then
    redis.call('ZREM', K('m'), nrec)
    mn1 = redis.call('HINCRBY', K('mn'), rec, -1)
    if mn1 <= 0 then redis.call('HDEL', K('mn'), rec) end
  end
  if away and not hadAway then
    redis.call('SADD', K('ma'), nrec)
    mna1 = redis.call('HINCRBY', K('mna'), rec, 1)
  elseif hadAway and not away then
    redis.call('SREM', K('ma'), nrec)
    mna1 = redis.call('HINCRBY', K('mna'), rec, -1)
    if mna1 <= 0 then redis.call('HDEL', K('mna'), rec) end
  end
  if mn0 == 0 and mn1 > 0 then
    redis.call('ZADD', K('c'), 0, rec)
    publish(P('pc:' .. channel), joinEvent(rec, uid))
    produce('join', uid, channel)
  elseif mn0 > 0 and mn1 <= 0 then
    redis.call('ZREM', K('c'), rec)
    redis.call('HDEL', K('mr'), rec)
    publish(P('pc:' .. channel), {u = uid, j = 0})
    produce('leave', uid, channel)
  end
  -- A leave takes the member's activity with it: no active edge.
  local was = mn0 > 0 and mna0 >= mn0
  local is = mn1 > 0 and mna1 >= mn1
  if is ~= was then
    if is then redis.call('ZADD', K('ca'), 0, rec) else redis.call('ZREM', K('ca'), rec) end
    if mn1 > 0 then
      local a = 2
      if is then a = 1 end
      publish(P('pc:' .. channel), {u = uid, a = a})
    end
  end
end

-- trimSeen drops offline times older than seenTTL, at most a few per
-- offline edge of this call and none without one: T:seen stays bounded by
-- the users who went offline within the TTL (plus a backlog that only
-- shrinks), and a call never pays for a mass expiry at once.
local function trimSeen()
  if offlines == 0 then return end
  local old = redis.call('ZRANGEBYSCORE', K('seen'), '-inf', '(' .. (now - seenTTL), 'LIMIT', 0, 2 * offlines + 16)
  if #old > 0 then redis.call('ZREM', K('seen'), unpack(old)) end
  for _, uid in ipairs(old) do
    if num(redis.call('HGET', K('conns'), uid)) <= 0 then dropRecord(uid) end
  end
end

-- recordsOf returns up to limit (all if nil) of node's records in key (T:ui
-- or T:m), without the node's name.
local function recordsOf(key, node, limit)
  local r
  if limit then
    r = redis.call('ZRANGEBYLEX', K(key), '[' .. node .. ' ', '(' .. node .. '!', 'LIMIT', 0, limit)
  else
    r = redis.call('ZRANGEBYLEX', K(key), '[' .. node .. ' ', '(' .. node .. '!')
  end
  for i, rec in ipairs(r) do r[i] = string.sub(rec, #node + 2) end
  return r
end

local function holdsRecords(node)
  return #recordsOf('ui', node, 1) > 0 or #recordsOf('m', node, 1) > 0
end

-- dropMember drops node's membership record "channel uid".
local function dropMember(node, rec)
  local sep = string.find(rec, ' ', 1, true)
  setMember(node, string.sub(rec, 1, sep - 1), string.sub(rec, sep + 1), false, false)
end

-- reapedNow lists the nodes this call reaped in full, each as "node life",
-- for the claimer to remember (see remark).
local reapedNow = {}

-- reap hands on node's kept edges (takeOver), then drops up to budget of
-- its records, its memberships first, and returns what is left of budget;
-- with membersOnly it drops memberships alone. The node leaves the dead set
-- once it has no record left, nor kept edges to take over.
local function reap(node, budget, membersOnly)
  budget = takeOver(node, budget)
  local proof = redis.call('HGET', K('proof'), node)
  if proof then wentAt = tonumber(proof) end
  if budget > 0 then
    for _, rec in ipairs(recordsOf('m', node, budget)) do
      dropMember(node, rec)
      budget = budget - 1
    end
  end
  if budget > 0 and not membersOnly then
    for _, uid in ipairs(recordsOf('ui', node, budget)) do
      setUser(node, uid, 0, 0)
      budget = budget - 1
    end
  end
  local taken = not keeps(node) or redis.call('ZSCORE', K('alive'), node)
  if not holdsRecords(node) and taken and redis.call('SREM', K('dead'), node) == 1 then
    redis.call('HDEL', K('ver'), node)
    vers[node] = 0
    redis.call('ZADD', K('reaped'), now, node)
    redis.call('HDEL', K('proof'), node)
    reapedNow[#reapedNow + 1] = node .. ' ' .. num(redis.call('HGET', K('life'), node))
  end
  wentAt = nil
  return budget
end

-- dropQuietly drops every record of node without an edge or a word: their
-- edges were made already, or are about to be made again.
local function dropQuietly(node)
  quiet, hushed = true, true
  for _, uid in ipairs(recordsOf('ui', node)) do setUser(node, uid, 0, 0) end
  for _, rec in ipairs(recordsOf('m', node)) do dropMember(node, rec) end
  quiet, hushed = false, false
end

-- A node's liveness in a shard is one explicit state (the table in
-- docs/cluster.md): its life, a number the node carries in every call and
-- Redis keeps in T:life, and whether that life ended: taken for dead
-- (T:dead, being reaped) or reaped in full (T:reaped). A node begins its
-- first life with its first write; a claim ends it, making its users'
-- offline and leave edges; the node learns so from the reply of any call
-- (the life Redis holds) and begins the next life by writing all it holds
-- again with their edges (mode "a", carrying that life + 1). So:
--
--   the node owes its users' edges  <=>  the life it carries ended here;
--   Redis lost the node's writes    <=>  it holds fewer of them than
--     landed (T:ver, the node's own count; 0 before its first), or an
--     older life than the node carries, ended or not.
--
-- Nothing else is read to decide either, so a Redis restarted empty, or a
-- replica that missed the node's return, cannot be taken for a reap, nor a
-- reap for a loss. A claimer that remembers a reap Redis lost writes it
-- back (see remark in claim.lua) before the node's records can be taken
-- for live ones.
--
-- standing answers a call of node carrying life in mode ('w', 'a' or 'r'),
-- landed (the node's count of its writes that landed here) and v (this
-- call's number). It returns one of
--   'owes'  the life ended: the call changes nothing (a fenced write) and
--           the node must write its records again in a new life;
--   'lost'  Redis lost the node's writes: what it holds of the node is
--           dropped quietly and hushed (stale), a restore window opens if
--           none is, and the node must restore;
--   'held'  a restore window is open: liveness renewed, but nothing that
--           can make an edge is applied, and no new life begins;
--   'live'  apply the call; liveness renewed for ttl ms;
-- and the life Redis holds now, and the end of the restore window (ms).
--
-- The first node to find a loss in the shard opens a restore window of
-- window ms. Exactly-once rests on this: inside it every live node puts
-- back quietly what had landed (its edges were produced before the loss)
-- and no record that could make an edge is applied, by any node, so that
-- every node's restore precedes every node's change made meanwhile: a
-- node that applied its user's departure before another node restored
-- the same user would make an offline edge for a user still online.
-- A loss found within late ms after the window is a node that missed
-- it: nobody took it for dead meanwhile (Redis had not heard of it since
-- the loss), so its restore is quiet all the same, but for users whose
-- offline another node's change made after the window (see restoring).
-- One found later opens a window again.
local function standing(node, life, mode, ttl, landed, v, window, late)
  local held = num(redis.call('HGET', K('life'), node))
  local ended = redis.call('SISMEMBER', K('dead'), node) == 1 or redis.call('ZSCORE', K('reaped'), node) ~= false
  local till = num(redis.call('HGET', K('clock'), 'restore'))
  local begins = mode == 'a' and ended and life > held
  if ended and life <= held then return 'owes', held, till end
  local stored = verOf(node)
  local lost = not begins and landed > 0 and (stored < landed or life > held)
  if begins and now < till then return 'held', held, till end
  redis.call('HSET', K('ver'), node, math.max(stored, v))
  vers[node] = math.max(stored, v)
  if life > held then
    redis.call('HSET', K('life'), node, life)
    held = life
  end
  if ended then
    redis.call('SREM', K('dead'), node)
    redis.call('ZREM', K('reaped'), node)
    redis.call('HDEL', K('proof'), node)
  end
  redis.call('ZADD', K('alive'), now + ttl, node)
  if not lost then
    if mode ~= 'r' and now < till then return 'held', held, till end
    return 'live', held, till
  end
  if now >= till + late then
    till = now + window
    redis.call('HSET', K('clock'), 'restore', till, 'lost', now)
  end
  -- What the node puts back comes back quietly, so the log cannot vouch
  -- for a cursor from before: a replica that took over may have the log
  -- up to the cursor and miss what came after it. A new epoch sends every
  -- reader to a snapshot.
  local epoch = t[1] .. string.format('%06d', tonumber(t[2]))
  if epoch == redis.call('HGET', K('clock'), 'epoch') then epoch = epoch .. 'b' end
  redis.call('HSET', K('clock'), 'epoch', epoch)
  dropQuietly(node)
  return 'lost', held, till
end
