-- publish.lua publishes a message once, and only until its last moment.
-- Its ID records the outcome: "1" once published, "0" once settled
-- unpublished (settle.lua), so a call run again (go-redis retries on a
-- broken connection) or after settling publishes nothing and reports the
-- truth; a call Redis runs too late (after a stall) publishes nothing
-- either, as its sender has given up on it. It runs alone, without a
-- prelude.
--
-- KEYS[1]   T:msg:<id>
-- ARGV[1]   Pub/Sub channel
-- ARGV[2]   message
-- ARGV[3]   ID lifetime ms
-- ARGV[4]   last moment (ms, Redis clock)
--
-- Returns {1 if published (now or before), 0 if settled unpublished, -1 if
-- too late; Redis's time in ms; how many subscribers got it, -1 where it
-- was published before}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = redis.call('GET', KEYS[1])
if id == '1' then return {1, now, -1} end
if id then return {0, now, -1} end
if now > tonumber(ARGV[4]) then return {-1, now, -1} end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[3])
local got = redis.call('SPUBLISH', ARGV[1], ARGV[2])
return {1, now, got}
