-- hidden.lua lists the shard's invisible users that are online, in order:
-- O(the shard's invisible users), whatever the number online. After
-- prelude_keys, prelude_read, prelude_records and prelude_read_window.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
--
-- Returns the uids.

local out = {}
for _, uid in ipairs(redis.call('ZRANGE', K('hid'), 0, -1)) do
  if num(redis.call('HGET', K('conns'), uid)) > 0 then out[#out + 1] = uid end
end
return out
