-- time.lua returns Redis's time in ms. It runs alone.
--
-- KEYS[1]   T:alive of a shard: it routes the call to the shard's server,
--           whose clock is the one its messages are published by.
-- ARGV: none.

local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
