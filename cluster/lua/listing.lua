-- listing.lua counts and pages a sorted set of the shard (T:online, or
-- T:c for a channel's members) with where the shard's log stands, in one
-- step: the listing holds every edge of the shard's log up to that
-- position and none after it. After prelude_keys and prelude_log.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   the set's name in KEYS: 'online' or 'c'
-- ARGV[2]   the least record counted (ZLEXCOUNT's min)
-- ARGV[3]   the greatest, for the count and the page (max)
-- ARGV[4]   the page's min (ZRANGE BYLEX)
-- ARGV[5]   limit: records at most in the page; 0 for the count alone
-- ARGV[6]   the reading node
-- ARGV[7]   its writes that landed in the shard (see standing)
--
-- Returns {epoch, last-generated ID, entries added ever, count, {record, ...},
-- 1 if the listing is not exact yet}. After Redis lost its data, the nodes
-- put back what they held quietly (no edge: see standing), so a listing
-- holds the edges up to its position only once they did: not while the
-- restore window is open, nor before the first node found the loss (the
-- reading node's own writes are missing too, as it renews in every shard).

local key = K(ARGV[1])
local pos = logPosition()
local page = {}
local limit = tonumber(ARGV[5])
if limit > 0 then
  page = redis.call('ZRANGE', key, ARGV[4], ARGV[3], 'BYLEX', 'LIMIT', 0, limit)
end
local unsettled = 0
if now < tonumber(redis.call('HGET', K('clock'), 'restore') or '0') or
    tonumber(redis.call('HGET', K('ver'), ARGV[6]) or '0') < tonumber(ARGV[7]) then
  unsettled = 1
end
return {pos[1], pos[2], pos[3], redis.call('ZLEXCOUNT', key, ARGV[2], ARGV[3]), page, unsettled}
