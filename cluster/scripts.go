package cluster

import "github.com/redis/go-redis/v9"

// Every script runs on the keys of one shard, all under the shard's hash tag
// T = {prefix:N}, so it touches a single cluster slot. Every key a script
// touches is one of its KEYS, as the scripting contract asks (proxies and
// Redis-compatible stores route and lock by KEYS): a shard has a fixed set
// of keys, shardKeyNames, passed in that order to every script of the
// shard, so KEYS[1] is T:alive, which routes the call. Records of a node
// or a channel are members of the shard's keys, not keys of their own, so
// a claim finds a dead node's records without naming keys it cannot know
// beforehand; node names, channels and uids have no space, so "node ..."
// and "channel ..." records range by prefix (ZRANGE BYLEX):
//
//	T:alive   ZSET  node -> liveness expiry (ms, Redis clock); renewed per node, never per user
//	T:dead    SET   nodes whose liveness expired and whose records are being reaped
//	T:proof   HASH  dead node -> its last proof of life (ms): when its users went offline
//	T:clock   HASH  last = time of the last claim, pause = no claims before,
//	                restore = end of the restore window after Redis lost records,
//	                lost = when that window opened
//	T:ver     HASH  node -> the newest write of the node this shard has seen
//	T:reaped  ZSET  node -> when its life's records were all reaped (kept for the last-seen TTL)
//	T:life    HASH  node -> the node's life in this shard (see standing)
//	T:done    HASH  "node v" -> the reply of the node's call v, kept a while, so a call run twice answers once (see recall)
//	T:dk      ZSET  "node v", score 0: T:done's fields in order, per node
//	T:ob      ZSET  "node id", score 0: edges the node made and has not delivered yet (the outbox)
//	T:oe      HASH  id -> such an edge, [kind, uid, channel, ms]
//	T:u       HASH  "node uid" -> connections the node holds, for users of this shard
//	T:ua      HASH  "node uid" -> how many of those are away (absent: none)
//	T:ui      ZSET  "node uid", score 0: T:u's records by node
//	T:m       ZSET  "node channel uid", score 0: the nodes' memberships, for channels of this shard
//	T:ma      SET   "node channel uid": those of them the node says are away
//	T:nodes   HASH  uid -> nodes holding the user (the online edge counter)
//	T:conns   HASH  uid -> connections summed over nodes
//	T:away    HASH  uid -> away connections summed over nodes; away when it equals T:conns
//	T:online  ZSET  online users, score 0 (listed in order with ZRANGE BYLEX)
//	T:seen    ZSET  uid -> when it last went offline (ms, Redis clock), kept for the last-seen TTL
//	T:mn      HASH  "channel uid" -> nodes holding the membership (the join edge counter)
//	T:mna     HASH  "channel uid" -> those of them that say away; away when it equals T:mn
//	T:c       ZSET  "channel uid", score 0: the channels' members
//	T:ca      ZSET  "channel uid", score 0: the members who are away
//	T:seq     STRING the shard's edge counter: orders edges against snapshots; starts at 10 x ms
//	T:ri, T:rm, T:rn, T:rh, T:hid, T:mr  users' records, and members' copies of them: see luaRecordHelpers
//
// and, declared alone by the scripts that publish a message,
//
//	T:msg:<id> STRING a published message's ID, so a retried or settled publish is not delivered twice
//
// Edges are published, inside the script that makes them, on the sharded
// Pub/Sub channels T:pu:<uid> and T:pc:<channel> (channels, not keys; named
// from the tag in ARGV[1]), which only the nodes following that user or
// channel subscribe to: {s, on} for online or offline and {s, a} for away
// (a=1) or active (a=2) on a user's; {s, u, j} for a join or leave and
// {s, u, a} for a member's activity on a channel's.
//
// Expiry uses the Redis server's clock (TIME), so nodes' clocks never matter.
// Scripts are effect-replicated, as always since Redis 7, which sharded
// Pub/Sub needs anyway.
var luaPrelude = luaKeys + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tag = ARGV[1]
local function P(s) return tag .. ':' .. s end

-- produced collects this call's edges for the caller, in the order they
-- were made: kind, uid, channel ('' for a user's), time (ms), outbox id
-- ('' without the outbox), ...
local produced = {}
-- quiet puts back state whose edges were produced before Redis lost it:
-- the other nodes' views still hear it (publish), nobody produces it again.
local quiet = false
-- restoring puts back what had landed of a node's after Redis lost it
-- (mode "r") once the restore window has passed: quietly, but for a user
-- that went offline since the loss (see wentOffline), whose online and
-- join edges are owed again. Inside the window a restore is quiet.
local restoring = false

-- seenTTL is how long T:seen keeps an offline time (ms); each script sets
-- it from its arguments. offlines counts this call's offline edges, which
-- pay for trimming T:seen (trimSeen).
local seenTTL = 86400000
local offlines = 0

-- T:seq starts at ten times the Redis time in ms, so that once Redis lost
-- it the counter still goes on from above what nodes hold (unless a shard
-- averaged ten edges per ms), and their filters let the new edges pass;
-- it stays within the 14 digits cjson writes exactly.
--
-- hushed drops stale records without a word: Redis kept an older state
-- than the node's (a replica that missed writes took over), and the node
-- puts back what it holds right after. Publishing the drop would show the
-- other nodes an offline and an online for a user who never left; they
-- read the topics again instead, as a failover ended their subscriptions.
local hushed = false
local function nextSeq()
  local s = redis.call('INCR', K('seq'))
  if s == 1 then
    s = now * 10
    redis.call('SET', K('seq'), string.format('%.0f', s))
  end
  return s
end

local function publish(channel, msg)
  msg.s = nextSeq()
  if not hushed then redis.call('SPUBLISH', channel, cjson.encode(msg)) end
  return msg.s
end

-- The outbox, when the script is given its keys (Config.Outbox): every
-- edge made is also kept in the shard, under the node whose call made it
-- (owner, ARGV[2]), until that node says it was delivered
-- (Engine.Delivered): T:ob "node id", T:oe id -> the edge. A claim hands a
-- dead node's kept edges to the claimer (takeOver), so an edge outlives
-- the node that made it, under the same id: a receiver can tell a second
-- delivery from a new edge.
local outbox = KEY['ob'] ~= nil
local owner = ARGV[2]
local function emit(kind, uid, channel, at, id)
  produced[#produced + 1] = kind
  produced[#produced + 1] = uid
  produced[#produced + 1] = channel
  produced[#produced + 1] = at
  produced[#produced + 1] = id
end

-- wentAt is when the users being reaped were last seen, if not now: a
-- dead node's users went away at its last proof of life (T:proof, see
-- reap), not when a claim found it dead, about a timeout later. It dates
-- their last seen only: the edges keep the time they were made, so that a
-- user's edges stay in time order with those of its other nodes.
local wentAt = nil
local function stamp() return wentAt or now end

-- wentOffline reports whether uid's offline edge was made since the
-- shard last found a loss (T:clock lost): T:seen has every offline time.
-- Inside the restore window no change is applied, so none was; after
-- it, a node that restores late may find that another node's change
-- made the user's offline meanwhile.
local function wentOffline(uid)
  local seen = redis.call('ZSCORE', K('seen'), uid)
  return seen ~= false and tonumber(seen) >= num(redis.call('HGET', K('clock'), 'lost'))
end

local function produce(kind, uid, channel)
  if quiet or (restoring and not wentOffline(uid)) then return end
  local id = ''
  if outbox then
    id = string.format('%.0f', nextSeq())
    redis.call('ZADD', K('ob'), 0, owner .. ' ' .. id)
    redis.call('HSET', K('oe'), id, cjson.encode({kind, uid, channel, now}))
  end
  emit(kind, uid, channel, now, id)
end

-- keeps reports whether node has edges kept in the outbox.
local function keeps(node)
  return outbox and #redis.call('ZRANGEBYLEX', K('ob'), '[' .. node .. ' ', '(' .. node .. '!', 'LIMIT', 0, 1) > 0
end

-- takeOver hands up to budget of node's kept edges to owner, the claimer,
-- and returns what is left of budget. Only a node whose lease ran out: one
-- that leaves delivers its own.
local function takeOver(node, budget)
  if not outbox or budget <= 0 or redis.call('ZSCORE', K('alive'), node) then return budget end
  for _, rec in ipairs(redis.call('ZRANGEBYLEX', K('ob'), '[' .. node .. ' ', '(' .. node .. '!', 'LIMIT', 0, budget)) do
    local id = string.sub(rec, #node + 2)
    redis.call('ZREM', K('ob'), rec)
    local raw = redis.call('HGET', K('oe'), id)
    if raw then
      redis.call('ZADD', K('ob'), 0, owner .. ' ' .. id)
      local e = cjson.decode(raw)
      emit(e[1], e[2], e[3], e[4], id)
    end
    budget = budget - 1
  end
  return budget
end

local function num(v) return tonumber(v or '0') or 0 end

-- A call may run while its reply is lost (a timeout, a broken connection:
-- Redis runs what it read, however late), and a client may send the same
-- call again. So a node numbers its calls (v, rising per shard) and the
-- shard keeps the replies of the node's recent calls that made edges, from
-- the lowest one whose reply the node may still lack (from): T:done,
-- "node v" -> JSON {h = head, e = edges}, one field per call (a burst of
-- calls then costs each call its own reply, not all the others'), and
-- T:dk, "node v" by v (padded, so that lexical order is numeric order),
-- to find those below from, or in a range. A call whose number has a
-- reply there ran already: it answers that reply again and changes
-- nothing. One numbered at or below the newest the shard has seen of the
-- node (T:ver) without a reply there ran already without an edge, or was
-- overtaken by a later call: it changes nothing (its node writes what it
-- held again, as for any write not applied, which makes no edge if it had
-- landed). And a call lists the numbers whose replies its node lost
-- (unknown, comma-separated): their edges come first in its reply, so an
-- edge made by a call whose reply was lost reaches its node's Relay as produced all
-- the same, once. An entry "lo-hi" of unknown stands for every number from lo to hi:
-- its node heard no call there answered but renewals, which keep no edge,
-- so every reply kept in that range is a lost one. A call numbered 0 (a
-- test's, or one run by hand), or from -1 (a renewal, which makes no edge
-- and is the same run twice), keeps and finds nothing.
local own, callNode, callV, callFrom = 0, nil, 0, 0

local function doneField(node, v) return node .. ' ' .. string.format('%015d', v) end

-- dropAll runs cmd on key with every one of list, a few hundred at a time
-- (Lua's unpack has a limit).
local function dropAll(cmd, key, list)
  for i = 1, #list, 500 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 499, #list)))
  end
end

-- forgetCalls drops node's kept replies numbered below from (all if nil).
local function forgetCalls(node, from)
  local upTo = '(' .. node .. '!'
  if from then upTo = '(' .. doneField(node, from) end
  local old = redis.call('ZRANGEBYLEX', K('dk'), '[' .. node .. ' ', upTo)
  if #old > 0 then
    dropAll('HDEL', K('done'), old)
    dropAll('ZREM', K('dk'), old)
  end
end

-- verOf reads node's T:ver once per call; check updates it.
local vers = {}
local function verOf(node)
  if vers[node] == nil then vers[node] = num(redis.call('HGET', K('ver'), node)) end
  return vers[node]
end

local function recall(node, v, from, unknown)
  callNode, callV, callFrom = node, v, from
  if v <= 0 or from < 0 then return 'new' end
  for u in string.gmatch(unknown or '', '[^,]+') do
    local fields
    local lo, hi = string.match(u, '^(%d+)-(%d+)$')
    if lo then
      fields = redis.call('ZRANGEBYLEX', K('dk'), '[' .. doneField(node, tonumber(lo)), '[' .. doneField(node, tonumber(hi)))
    else
      fields = {doneField(node, tonumber(u))}
    end
    for _, f in ipairs(fields) do
      local raw = redis.call('HGET', K('done'), f)
      if raw then
        for _, x in ipairs(cjson.decode(raw).e) do produced[#produced + 1] = x end
      end
    end
  end
  own = #produced
  local raw = redis.call('HGET', K('done'), doneField(node, v))
  if raw then return 'replay', cjson.decode(raw) end
  if v <= verOf(node) then return 'stale' end
  return 'new'
end

-- reply returns head and then the edges of this call (those of lost
-- replies first), keeping head and this call's own edges in T:done if it
-- made any, or if keep (a reply the node must hear even if it ran twice:
-- Redis lost the node's writes).
local function reply(head, keep)
  local e = {}
  for i = own + 1, #produced do e[#e + 1] = produced[i] end
  -- Only a call that keeps a reply forgets the old ones: nothing is kept
  -- but by such calls, and calls at rest (claims that find nothing) pay
  -- nothing.
  if callV > 0 and callFrom >= 0 and (#e > 0 or keep) then
    forgetCalls(callNode, callFrom)
    local f = doneField(callNode, callV)
    redis.call('HSET', K('done'), f, cjson.encode({h = head, e = e}))
    redis.call('ZADD', K('dk'), 0, f)
  end
  local out = {}
  for _, x in ipairs(head) do out[#out + 1] = x end
  for _, x in ipairs(produced) do out[#out + 1] = x end
  return out
end

-- replayed answers a call that ran already: the reply it made then, after
-- the edges of the lost replies this call lists.
local function replayed(c)
  local out = {}
  for _, x in ipairs(c.h) do out[#out + 1] = x end
  for _, x in ipairs(produced) do out[#out + 1] = x end
  for _, x in ipairs(c.e) do out[#out + 1] = x end
  return out
end

-- unapplied answers a stale call: head, and the edges of lost replies.
local function unapplied(head)
  local out = {}
  for _, x in ipairs(head) do out[#out + 1] = x end
  for _, x in ipairs(produced) do out[#out + 1] = x end
  return out
end
` + luaRecordHelpers + `

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
-- back (see remark in claimScript) before the node's records can be taken
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
  dropQuietly(node)
  return 'lost', held, till
end
`

// setScript renews the node's liveness in the shard, then applies its
// records. ARGV: tag, node, ttl ms, last-seen TTL ms, the node's landed
// writes, this write's number, restore window ms, mode ("w" write, "a"
// this node's records written again in a new life, after its last one
// ended, "r" restore: what had landed before a loss), the node's life (in
// mode "a", the life it begins), from and unknown (see recall), then a
// list of "u", uid, n, away (n connections of which away are away; n 0
// drops the record) and "m", channel, uid, 1|0, away 1|0, or "M" and those
// and the member's record as this node knows it: version, hidden-at ms,
// record JSON (see keepMemberRecord).
// Returns {1 if the node's life ended (it owes), state, ms left of the
// restore window, the life Redis holds of the node, then kind, uid,
// channel, ms, outbox id per edge made}; state is 0 applied, 1 not applied
// (the restore window is open), 2 not applied (Redis lost the node's
// writes: it must restore first), 3 restored, 4 not applied (stale: a
// later call of the node ran first), 5 not applied (the node's life ended:
// it must write its records again in a new life; see standing).
// A restore is quiet, and after the window too but for users that went
// offline since the loss.
var setScript = redis.NewScript(luaPrelude + `
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
if state == 1 or state == 2 or state == 5 then i = #ARGV + 1 end
while i <= #ARGV do
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
`)

// publishScript publishes a message once, and only until its last moment.
// Its ID records the outcome: "1" once published, "0" once settled unpublished
// (settleScript), so a call run again (go-redis retries on a broken
// connection) or after settling publishes nothing and reports the truth; a
// call Redis runs too late (after a stall) publishes nothing either, as its
// sender has given up on it.
// KEYS[1] = T:msg:<id>; ARGV: Pub/Sub channel, message, ID lifetime ms, last
// moment (ms, Redis clock). Returns {1 if published (now or before), 0 if
// settled unpublished, -1 if too late; Redis's time in ms}.
var publishScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = redis.call('GET', KEYS[1])
if id == '1' then return {1, now} end
if id then return {0, now} end
if now > tonumber(ARGV[4]) then return {-1, now} end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[3])
redis.call('SPUBLISH', ARGV[1], ARGV[2])
return {1, now}
`)

// settleScript settles a message whose answer was lost: unless it was
// published, its ID is marked so that it never will be.
// KEYS[1] = T:msg:<id>; ARGV: ID lifetime ms. Returns 1 if the message was
// published, 0 if not.
var settleScript = redis.NewScript(`
local id = redis.call('GET', KEYS[1])
if id == '1' then return 1 end
if not id then redis.call('SET', KEYS[1], '0', 'PX', ARGV[1]) end
return 0
`)

// timeScript returns Redis's time in ms; KEYS[1] routes it to a shard's
// server, whose clock is the one its messages are published by.
var timeScript = redis.NewScript(`
local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`)
