-- prelude_read.lua is what the scripts that only read (channel, users,
-- status, records, hidden) need of prelude_write.lua: Redis's clock and
-- num; seenTTL is set by each. It follows prelude_keys.lua, before
-- prelude_records.lua and prelude_read_window.lua. KEYS: the shard's
-- (prelude_keys.lua).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seenTTL = 0
local function num(v) return tonumber(v or '0') or 0 end
