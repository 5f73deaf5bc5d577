-- prelude_write.lua follows prelude_keys.lua in the scripts that write
-- (set, claim, leave, record, member_record), before prelude_records.lua
-- and prelude_presence.lua: Redis's clock, the edges a call makes and
-- publishes, the outbox and the replies kept per call (recall).
-- KEYS: the shard's (prelude_keys.lua). ARGV[1]: the shard's tag T, which
-- names its Pub/Sub channels; ARGV[2]: in the scripts that make edges (set,
-- claim, leave), the calling node, which owns them in the outbox. The last
-- ARGV, in the engine's calls of the scripts that make edges (set, claim,
-- leave, record), is the log's, "log <max> <keep> <clock>" (see
-- appendLog); argc is how many come before it, the ARGV each script's
-- header names.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tag = ARGV[1]
local function P(s) return tag .. ':' .. s end
local function num(v) return tonumber(v or '0') or 0 end

-- produced collects this call's edges for the caller, in the order they
-- were made: kind, uid, channel ('' for a user's), time (ms), the ID of its
-- entry in the log (see appendLog), ...
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

-- The log: every edge produced is appended to the shard's stream T:log by
-- the call that makes it, under an ID the call chooses, "<ms>-<n>".
-- Entries: k = kind, u = uid, c = channel (a join's or a leave's), t = the
-- edge's time (ms), r = the new record (an update's).
--
-- The IDs are a Lamport clock, so that a reader who merges the shards'
-- logs by ID (ms, then n, then shard) reads every edge after the edges it
-- depends on, in whatever shard they are: a user's leaves before its
-- offline, its online before its joins. Each shard keeps a clock (T:clock
-- lc, an ID), never below its log's last ID; each node keeps one too, the
-- highest ID it has heard. A call carries its node's clock, raises the
-- shard's to it, gives each edge an ID above both (Redis's time, if that
-- is higher still) and answers the shard's clock last, which raises the
-- node's. So an edge made after a call that made or read another (in the
-- same shard, or by the same node) has the higher ID. The node writes a
-- change that depends on another only once the other's call answered
-- (see waves in changes.go), and a claim reaps memberships before users.
--
-- The log's argument, the last of ARGV in the engine's calls, is
-- "log <max> <keep> <clock>": the stream keeps about max entries (XADD
-- MAXLEN ~) and none older than keep ms (XTRIM MINID ~, once per call).
-- A call without it (a test's, or one run by hand) trims nothing, and its
-- reply ends with its edges.
local argc = #ARGV
local logMax, logKeep, clocked = 0, 0, false
local clockMs, clockN = 0, 0 -- the highest ID this call knows of
local function idParts(id)
  local ms, n = string.match(id or '', '^(%d+)-(%d+)$')
  return tonumber(ms or '0'), tonumber(n or '0')
end
local function raise(ms, n)
  if ms > clockMs or (ms == clockMs and n > clockN) then clockMs, clockN = ms, n end
end
do
  local m, k, c = string.match(ARGV[argc] or '', '^log (%d+) (%d+) (%d+-%d+)$')
  if m then
    logMax, logKeep, argc, clocked = tonumber(m), tonumber(k), argc - 1, true
    raise(idParts(c))
  end
end

-- keptClock is the shard's clock as T:clock holds it, read once per call
-- (nil before, '' if none).
local keptClock = nil
local function shardClock()
  if keptClock == nil then
    keptClock = redis.call('HGET', K('clock'), 'lc') or ''
    raise(idParts(keptClock))
  end
end

-- appended tells whether this call appended yet: its first append reads
-- the stream's last ID (XINFO STREAM's last-generated-id, which trims
-- keep), sets the epoch and trims.
local appended = false
local function nextLogID()
  shardClock()
  if not appended then
    appended = true
    local info = redis.pcall('XINFO', 'STREAM', K('log'))
    if type(info) == 'table' and not info.err then
      for i = 1, #info - 1, 2 do
        if info[i] == 'last-generated-id' then raise(idParts(info[i + 1])) end
      end
    end
    -- The stream's life: a Redis that lost it has lost this too, and the
    -- first append after names another.
    redis.call('HSETNX', K('clock'), 'epoch', t[1] .. string.format('%06d', tonumber(t[2])))
    if logKeep > 0 then
      redis.call('XTRIM', K('log'), 'MINID', '~', string.format('%.0f', math.max(0, now - logKeep)))
    end
  end
  if now > clockMs then clockMs, clockN = now, 0 else clockN = clockN + 1 end
  return string.format('%.0f-%.0f', clockMs, clockN)
end

-- withClock ends a reply with the shard's clock, raised to this call's,
-- when the call carried the node's.
local function withClock(out)
  if not clocked then return out end
  shardClock()
  local c = string.format('%.0f-%.0f', clockMs, clockN)
  if c ~= keptClock then
    redis.call('HSET', K('clock'), 'lc', c)
    keptClock = c
  end
  out[#out + 1] = c
  return out
end

local function xadd(id, ...)
  if logMax > 0 then return redis.call('XADD', K('log'), 'MAXLEN', '~', logMax, id, ...) end
  return redis.call('XADD', K('log'), id, ...)
end

-- appendLog appends an edge made at ms at to the log and returns its ID;
-- record is an update's new record (JSON), nil for the others.
local function appendLog(kind, uid, channel, at, record)
  local id = nextLogID()
  local ms = string.format('%.0f', at)
  if record then
    xadd(id, 'k', kind, 'u', uid, 't', ms, 'r', record)
  elseif channel ~= '' then
    xadd(id, 'k', kind, 'u', uid, 'c', channel, 't', ms)
  else
    xadd(id, 'k', kind, 'u', uid, 't', ms)
  end
  return id
end

local function produce(kind, uid, channel)
  if quiet or (restoring and not wentOffline(uid)) then return end
  local id = appendLog(kind, uid, channel, now)
  if outbox then
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
-- edge made by a call whose reply was lost is produced on its node all
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
  return withClock(out)
end

-- replayed answers a call that ran already: the reply it made then, after
-- the edges of the lost replies this call lists.
local function replayed(c)
  local out = {}
  for _, x in ipairs(c.h) do out[#out + 1] = x end
  for _, x in ipairs(produced) do out[#out + 1] = x end
  for _, x in ipairs(c.e) do out[#out + 1] = x end
  return withClock(out)
end

-- unapplied answers a stale call: head, and the edges of lost replies.
local function unapplied(head)
  local out = {}
  for _, x in ipairs(head) do out[#out + 1] = x end
  for _, x in ipairs(produced) do out[#out + 1] = x end
  return withClock(out)
end
