-- prelude_read_window.lua ends the read prelude, after prelude_records.lua.
-- KEYS: the shard's (prelude_keys.lua).
--
-- left is the ms left of the shard's restore window: a snapshot read
-- inside it may miss what a node has not restored yet.
local left = math.max(0, num(redis.call('HGET', K('clock'), 'restore')) - now)
