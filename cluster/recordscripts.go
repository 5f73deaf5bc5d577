package cluster

import "github.com/redis/go-redis/v9"

// Users' records (info, mode, note) live in Redis next to presence, under
// the same hash tags. A user's record is in its own shard:
//
//	T:ri   HASH  uid -> info, compact JSON as the application gave it
//	T:rm   HASH  uid -> mode, "dnd" or "invisible" (absent: online)
//	T:rn   HASH  uid -> note, JSON {text, emoji, until}
//	T:rh   HASH  uid -> when it turned invisible (ms, Redis clock), while it is
//	T:hid  ZSET  the invisible users, online or not, score 0
//
// and each channel's shard keeps a copy of its members' records, for its
// snapshots and join edges, which cannot read another shard's keys:
//
//	T:mr   HASH  "channel uid" -> "version hiddenAt record" for members that have one
//
// A record's version is its user's shard's T:seq when it changed, so the
// versions of one user's record only grow, and a copy or a delivery older
// than what a node has is told apart. A copy goes with its membership.
//
// A record lives while its user is online and for the last-seen TTL after:
// it is live while T:conns counts the user or T:seen has it within the TTL,
// the same bound as last seen. trimSeen drops it with the offline time, and
// the online edge of a user that came back later drops one no trim reached.
var luaRecordHelpers = `
local function str(v) if v then return v end return '' end

local function seenWithin(uid)
  local at = redis.call('ZSCORE', K('seen'), uid)
  return at ~= false and now - tonumber(at) <= seenTTL
end

local function recordLive(uid)
  return num(redis.call('HGET', K('conns'), uid)) > 0 or seenWithin(uid)
end

-- readRecord returns uid's info, mode and note ('' when absent) and when
-- it turned invisible (0), all empty when its record is not live.
local function readRecord(uid)
  if not recordLive(uid) then return '', '', '', 0 end
  return str(redis.call('HGET', K('ri'), uid)), str(redis.call('HGET', K('rm'), uid)),
    str(redis.call('HGET', K('rn'), uid)), num(redis.call('HGET', K('rh'), uid))
end

-- recordJSON writes a record as protocol.Record reads it; info and note
-- are JSON already, mode one of two words.
local function recordJSON(info, mode, note)
  local parts = {}
  if info ~= '' then parts[#parts + 1] = '"info":' .. info end
  if mode ~= '' then parts[#parts + 1] = '"mode":"' .. mode .. '"' end
  if note ~= '' then parts[#parts + 1] = '"note":' .. note end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- dropRecord drops uid's record and reports whether it had one.
local function dropRecord(uid)
  local had = redis.call('HDEL', K('ri'), uid) + redis.call('HDEL', K('rm'), uid) + redis.call('HDEL', K('rn'), uid)
  redis.call('HDEL', K('rh'), uid)
  redis.call('ZREM', K('hid'), uid)
  return had > 0
end

local function hset(key, uid, v)
  if v == '' or v == 0 then redis.call('HDEL', K(key), uid) else redis.call('HSET', K(key), uid, v) end
end

local function memberRecordVersion(rec)
  local old = redis.call('HGET', K('mr'), rec)
  if not old then return 0 end
  return tonumber(string.match(old, '^(%d+)')) or 0
end

-- keepMemberRecord keeps rj, version rv, as the copy of the record of the
-- member rec ("channel uid") unless the copy is as new; it reports
-- whether it did.
local function keepMemberRecord(rec, rv, rh, rj)
  if memberRecordVersion(rec) >= rv then return false end
  redis.call('HSET', K('mr'), rec, string.format('%.0f', rv) .. ' ' .. rh .. ' ' .. rj)
  return true
end

-- joinEvent is the join edge of rec, carrying the member's record if the
-- shard has a copy: a node that follows the channel and not the user must
-- know an invisible member before it sees it join.
local function joinEvent(rec, uid)
  local ev = {u = uid, j = 1}
  local copy = redis.call('HGET', K('mr'), rec)
  if copy then
    local v, h, j = string.match(copy, '^(%d+) (%d+) (.*)$')
    if v then ev.rv, ev.h, ev.r = tonumber(v), tonumber(h), j end
  end
  return ev
end
`

// recordScript changes users' records, in order. Each change reads and
// writes the record in one atomic step, so of several nodes that change one
// record at once, the last applied wins whole, and of the nodes that expire
// one note, only the first finds it still there: exactly one clears it.
// ARGV: tag, last-seen TTL ms, the node's clock ms, then changes:
//
//	"i", uid, info                          the user's info
//	"s", uid, mode, 1|0, note               a set: mode "" keeps the mode, "online" clears it;
//	                                        the note ("" clears it) if 1
//	"x", uid, until                         clear the note if it runs out at until and until passed
//	"p", uid, info, mode, note, hidden-at   put back a record Redis lost, unless the user has one
//
// A change that changes the record publishes it on the user's topic, {s,
// r, h, at}: s is its version. Returns, per change that changed the record:
// its place among the changes (1, 2, ...), the record's JSON, when it
// turned invisible (ms, 0), its version, and the time of the change (ms).
var recordScript = redis.NewScript(luaPrelude + `
seenTTL = tonumber(ARGV[2])
local clock = math.max(now, tonumber(ARGV[3]))
local out = {}
local i, n = 4, 0
while i <= #ARGV do
  local op, uid = ARGV[i], ARGV[i + 1]
  n = n + 1
  if not recordLive(uid) then dropRecord(uid) end
  local info, mode, note, hid = readRecord(uid)
  local ni, nm, nn, nh = info, mode, note, hid
  if op == 'i' then
    ni = ARGV[i + 2]
    i = i + 3
  elseif op == 's' then
    local m = ARGV[i + 2]
    if m == 'online' then nm = '' elseif m ~= '' then nm = m end
    if ARGV[i + 3] == '1' then nn = ARGV[i + 4] end
    i = i + 5
  elseif op == 'x' then
    local u = tonumber(ARGV[i + 2])
    if note ~= '' then
      local ok, d = pcall(cjson.decode, note)
      if ok and type(d) == 'table' and tonumber(d['until']) == u and u <= clock then nn = '' end
    end
    i = i + 3
  else
    if info == '' and mode == '' and note == '' then
      ni, nm, nn, nh = ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], tonumber(ARGV[i + 5]) or 0
    end
    i = i + 6
  end
  if nm ~= 'invisible' then
    nh = 0
  elseif (op ~= 'p' and mode ~= 'invisible') or nh == 0 then
    nh = now
  end
  if ni ~= info or nm ~= mode or nn ~= note then
    hset('ri', uid, ni)
    hset('rm', uid, nm)
    hset('rn', uid, nn)
    hset('rh', uid, nh)
    if nm == 'invisible' then redis.call('ZADD', K('hid'), 0, uid) else redis.call('ZREM', K('hid'), uid) end
    local j = recordJSON(ni, nm, nn)
    local v = publish(P('pu:' .. uid), {r = j, h = nh, at = now})
    out[#out + 1] = n
    out[#out + 1] = j
    out[#out + 1] = nh
    out[#out + 1] = v
    out[#out + 1] = now
  end
end
return out
`)

// memberRecordScript copies a user's changed record to the channels of the
// shard it is a member of, and publishes it on their topics, {s, u, r, rv,
// h, at}. Every node that holds a membership of the user asks, so the copy
// and its check are one atomic step: each version reaches each channel's
// topic once, whichever node comes first, and an older one never after a
// newer. A channel the user is not a member of (yet) is skipped: its join
// carries the record.
// ARGV: tag, uid, version, hidden-at ms, ms of the change, record JSON,
// channel, ...
var memberRecordScript = redis.NewScript(luaPrelude + `
local uid, rv, rh, at, rj = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6]
for i = 7, #ARGV do
  local rec = ARGV[i] .. ' ' .. uid
  if redis.call('ZSCORE', K('c'), rec) and keepMemberRecord(rec, rv, rh, rj) then
    publish(P('pc:' .. ARGV[i]), {u = uid, r = rj, rv = rv, h = tonumber(rh), at = at})
  end
end
return 1
`)

// luaReadPrelude is what the scripts that only read need of luaPrelude:
// the keys, Redis's clock and the record helpers; seenTTL is set by each.
var luaReadPrelude = luaKeys + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seenTTL = 0
local function num(v) return tonumber(v or '0') or 0 end
` + luaRecordHelpers + `
-- left is the ms left of the shard's restore window: a snapshot read
-- inside it may miss what a node has not restored yet.
local left = math.max(0, num(redis.call('HGET', K('clock'), 'restore')) - now)
`

// channelScript reads a channel's members, which of them are away, and the
// copies of their records, with the shard's edge counter in one atomic
// step, so edges after the snapshot are told from those in it.
// ARGV: tag, channel. Returns {seq, {member, ...}, {away member, ...}, ms
// left of the shard's restore window, {member, "version hidden-at record",
// ...}}.
var channelScript = redis.NewScript(luaReadPrelude + `
local seq = tonumber(redis.call('GET', K('seq')) or '0')
local function of(key)
  local r = redis.call('ZRANGEBYLEX', K(key), '[' .. ARGV[2] .. ' ', '(' .. ARGV[2] .. '!')
  for i, rec in ipairs(r) do r[i] = string.sub(rec, #ARGV[2] + 2) end
  return r
end
local members = of('c')
local recs = {}
for _, uid in ipairs(members) do
  local copy = redis.call('HGET', K('mr'), ARGV[2] .. ' ' .. uid)
  if copy then
    recs[#recs + 1] = uid
    recs[#recs + 1] = copy
  end
end
return {seq, members, of('ca'), left, recs}
`)

// usersScript reads whether users are online and away, when those offline
// went, and their records, with the edge counter. ARGV: tag, last-seen TTL
// ms, uid, ... Returns {seq, ms left of the restore window, then per uid: 0
// (offline), 1 (online, active) or 2 (online, away), last seen ms (0: none
// or online), hidden-at ms, record JSON ("": none)}.
var usersScript = redis.NewScript(luaReadPrelude + `
seenTTL = tonumber(ARGV[2])
local out = {tonumber(redis.call('GET', K('seq')) or '0'), left}
for i = 3, #ARGV do
  local uid = ARGV[i]
  local conns = num(redis.call('HGET', K('conns'), uid))
  local state, seen = 0, 0
  if conns > 0 then
    state = 1
    if num(redis.call('HGET', K('away'), uid)) >= conns then state = 2 end
  elseif seenWithin(uid) then
    seen = tonumber(redis.call('ZSCORE', K('seen'), uid))
  end
  local info, mode, note, hid = readRecord(uid)
  local j = ''
  if info ~= '' or mode ~= '' or note ~= '' then j = recordJSON(info, mode, note) end
  out[#out + 1] = state
  out[#out + 1] = seen
  out[#out + 1] = hid
  out[#out + 1] = j
end
return out
`)

// statusScript reads a user's connections, away connections, when it went
// offline if that is within the last-seen TTL and it is offline, and its
// record. ARGV: tag, uid, last-seen TTL ms. Returns {conns, away, ms or 0,
// hidden-at ms, record JSON or ""}.
var statusScript = redis.NewScript(luaReadPrelude + `
local uid = ARGV[2]
seenTTL = tonumber(ARGV[3])
local conns = num(redis.call('HGET', K('conns'), uid))
local away = num(redis.call('HGET', K('away'), uid))
local seen = 0
if conns <= 0 and seenWithin(uid) then seen = tonumber(redis.call('ZSCORE', K('seen'), uid)) end
local info, mode, note, hid = readRecord(uid)
local j = ''
if info ~= '' or mode ~= '' or note ~= '' then j = recordJSON(info, mode, note) end
return {conns, away, seen, hid, j}
`)

// recordsScript reads users' records. ARGV: tag, last-seen TTL ms, uid, ...
// Returns the record JSON of each uid, "" for none.
var recordsScript = redis.NewScript(luaReadPrelude + `
seenTTL = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local info, mode, note = readRecord(ARGV[i])
  local j = ''
  if info ~= '' or mode ~= '' or note ~= '' then j = recordJSON(info, mode, note) end
  out[#out + 1] = j
end
return out
`)

// hiddenScript lists the shard's invisible users that are online, in
// order: O(the shard's invisible users), whatever the number online.
// ARGV: tag.
var hiddenScript = redis.NewScript(luaReadPrelude + `
local out = {}
for _, uid in ipairs(redis.call('ZRANGE', K('hid'), 0, -1)) do
  if num(redis.call('HGET', K('conns'), uid)) > 0 then out[#out + 1] = uid end
end
return out
`)
