-- log.lua reads the shard's log of edges (T:log) after a position, with
-- where the log stands, in one step. After prelude_keys and prelude_log.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   from: the ID of the last entry read ('' for none: from the
--           first entry kept)
-- ARGV[2]   count: entries at most; 0 for the position alone
-- ARGV[3]   frontier ms: only entries whose ID's ms is below it; '' for
--           Redis's time less ARGV[4]
-- ARGV[4]   settle ms
--
-- Returns {Redis's time ms, then logPosition's six values, 1 if the entry
-- ARGV[1] is kept (else 0), then the entries after it, each {id, {field,
-- value, ...}}}.

local out = {now}
for _, v in ipairs(logPosition()) do out[#out + 1] = v end
local from, there = '-', 0
if ARGV[1] ~= '' then
  if #redis.call('XRANGE', K('log'), ARGV[1], ARGV[1]) > 0 then there = 1 end
  from = '(' .. ARGV[1]
end
out[#out + 1] = there
local count = tonumber(ARGV[2])
if count > 0 then
  local frontier = tonumber(ARGV[3]) or now - tonumber(ARGV[4])
  local stop = '(' .. string.format('%.0f', frontier) .. '-0'
  for _, e in ipairs(redis.call('XRANGE', K('log'), from, stop, 'COUNT', count)) do out[#out + 1] = e end
end
return out
