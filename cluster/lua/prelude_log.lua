-- prelude_log.lua follows prelude_keys.lua in the scripts that read the
-- shard's log of edges (log.lua, listing.lua). KEYS: the shard's
-- (prelude_keys.lua).
--
-- T:log is a stream of the shard's edges, one entry each, appended by the
-- script that makes the edge, under an ID "ms-n" of its own choosing that
-- grows in the stream; its fields are k (the kind: online, offline, join,
-- leave, away, active, update), u (uid), c (channel, join and leave only),
-- t (the edge's time, ms) and r (update only: the new record's JSON).
-- T:clock's field epoch names the life of the log: set once (HSETNX) by
-- the first call that appends, or reads, and gone with everything else
-- when Redis loses its data, so a cursor made before names an epoch that no
-- longer is.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- logPosition returns where the log stands: {epoch, last-generated ID,
-- entries added ever, entries kept, the first kept entry's ID ('' if
-- none), max-deleted ID}. Reads set the epoch too, so that a cursor made
-- before the first edge names one.
local function logPosition()
  redis.call('HSETNX', K('clock'), 'epoch', t[1] .. string.format('%06d', tonumber(t[2])))
  local epoch = redis.call('HGET', K('clock'), 'epoch')
  if redis.call('EXISTS', K('log')) == 0 then return {epoch, '0-0', 0, 0, '', '0-0'} end
  local info = redis.call('XINFO', 'STREAM', K('log'))
  local f = {}
  for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
  local first = ''
  if f['first-entry'] then first = f['first-entry'][1] end
  return {epoch, f['last-generated-id'], f['entries-added'], f['length'], first, f['max-deleted-entry-id']}
end
