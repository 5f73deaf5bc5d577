-- status.lua reads a user's connections, away connections, when it went
-- offline if that is within the last-seen TTL and it is offline, and its
-- record. After prelude_keys, prelude_read, prelude_records and
-- prelude_read_window.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   uid
-- ARGV[3]   last-seen TTL ms
--
-- Returns {conns, away, ms or 0, hidden-at ms, record JSON or ""}.

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
