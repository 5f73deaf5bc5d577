-- settle.lua settles a message whose answer was lost: unless it was
-- published, its ID is marked so that it never will be. It runs alone.
--
-- KEYS[1]   T:msg:<id>
-- ARGV[1]   ID lifetime ms
--
-- Returns 1 if the message was published, 0 if not.

local id = redis.call('GET', KEYS[1])
if id == '1' then return 1 end
if not id then redis.call('SET', KEYS[1], '0', 'PX', ARGV[1]) end
return 0
