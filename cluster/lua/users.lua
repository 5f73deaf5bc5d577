-- users.lua reads whether users are online and away, when those offline
-- went, and their records, with the edge counter. After prelude_keys,
-- prelude_read, prelude_records and prelude_read_window.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   last-seen TTL ms
-- ARGV[3...] uids
--
-- Returns {seq, ms left of the restore window, then per uid: 0 (offline),
-- 1 (online, active) or 2 (online, away), last seen ms (0: none or
-- online), hidden-at ms, record JSON ("": none)}.

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
