-- record.lua changes users' records, in order. Each change reads and
-- writes the record in one atomic step, so of several nodes that change one
-- record at once, the last applied wins whole, and of the nodes that expire
-- one note, only the first finds it still there: exactly one clears it.
-- After prelude_keys, prelude_write, prelude_records and prelude_presence.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   last-seen TTL ms
-- ARGV[3]   the node's clock ms
-- ARGV[4...] changes, each one of
--   "i", uid, info                          the user's info
--   "s", uid, mode, 1|0, note               a set: mode "" keeps the mode, "online" clears it;
--                                           the note ("" clears it) if 1
--   "x", uid, until                         clear the note if it runs out at until and until passed
--   "p", uid, info, mode, note, hidden-at   put back a record Redis lost, unless the user has one
-- ARGV[last] the log's (see appendLog in prelude_write.lua)
--
-- A change that changes the record publishes it on the user's topic, {s,
-- r, h, at}: s is its version. A set or an expiry that changes it is an
-- update edge, appended to the log. Returns, per change that changed the
-- record: its place among the changes (1, 2, ...), the record's JSON, when
-- it turned invisible (ms, 0), its version, the time of the change (ms),
-- and its log entry ID ('' for an info or a put back: no edge); then
-- the shard's clock, if the call carried the node's (see withClock).

seenTTL = tonumber(ARGV[2])
local clock = math.max(now, tonumber(ARGV[3]))
local out = {}
local i, n = 4, 0
while i <= argc do
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
    local id = ''
    if op == 's' or op == 'x' then id = appendLog('update', uid, '', now, j) end
    out[#out + 1] = n
    out[#out + 1] = j
    out[#out + 1] = nh
    out[#out + 1] = v
    out[#out + 1] = now
    out[#out + 1] = id
  end
end
return withClock(out)
