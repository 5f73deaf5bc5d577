-- prelude_records.lua follows prelude_write.lua or prelude_read.lua (it
-- uses their K, now, num and seenTTL): users' records. KEYS: the shard's
-- (prelude_keys.lua).
--
-- Users' records (info, mode, note) live in Redis next to presence, under
-- the same hash tags. A user's record is in its own shard:
--
--  T:ri   HASH  uid -> info, compact JSON as the application gave it
--  T:rm   HASH  uid -> mode, "dnd" or "invisible" (absent: online)
--  T:rn   HASH  uid -> note, JSON {text, emoji, until}
--  T:rh   HASH  uid -> when it turned invisible (ms, Redis clock), while it is
--  T:hid  ZSET  the invisible users, online or not, score 0
--
-- and each channel's shard keeps a copy of its members' records, for its
-- snapshots and join edges, which cannot read another shard's keys:
--
--  T:mr   HASH  "channel uid" -> "version hiddenAt record" for members that have one
--
-- A record's version is its user's shard's T:seq when it changed, so the
-- versions of one user's record only grow, and a copy or a delivery older
-- than what a node has is told apart. A copy goes with its membership.
--
-- A record lives while its user is online and for the last-seen TTL after:
-- it is live while T:conns counts the user or T:seen has it within the TTL,
-- the same bound as last seen. trimSeen drops it with the offline time, and
-- the online edge of a user that came back later drops one no trim reached.
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
