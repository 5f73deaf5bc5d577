-- channel.lua reads a channel's members, which of them are away, and the
-- copies of their records, with the shard's edge counter in one atomic
-- step, so edges after the snapshot are told from those in it. After
-- prelude_keys, prelude_read, prelude_records and prelude_read_window.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   channel
--
-- Returns {seq, {member, ...}, {away member, ...}, ms left of the shard's
-- restore window, {member, "version hidden-at record", ...}}.

local seq = tonumber(redis.call('GET', K('seq')) or '0')
local function of(key)
  local r = redis.call('ZRANGEBYLEX', K(key), '[' .. ARGV[2] .. ' ', '(' .. ARGV[2] .. '!')
  for i, rec in ipairs(r) do r[i] = string.sub(rec, #ARGV[2] + 2) end
  return r
end
local members = of('c')
local recs = {}
for _, uid in ipairs(members) do
  local copy = redis.call('HGET', K('mr'), ARGV[2] .. ' ' .. uid)
  if copy then
    recs[#recs + 1] = uid
    recs[#recs + 1] = copy
  end
end
return {seq, members, of('ca'), left, recs}
