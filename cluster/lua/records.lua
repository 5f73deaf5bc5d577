-- records.lua reads users' records. After prelude_keys, prelude_read,
-- prelude_records and prelude_read_window.
--
-- KEYS: the shard's (prelude_keys.lua).
-- ARGV[1]   tag
-- ARGV[2]   last-seen TTL ms
-- ARGV[3...] uids
--
-- Returns the record JSON of each uid, "" for none.

seenTTL = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local info, mode, note = readRecord(ARGV[i])
  local j = ''
  if info ~= '' or mode ~= '' or note ~= '' then j = recordJSON(info, mode, note) end
  out[#out + 1] = j
end
return out
