-- A heartbeat for a taken entry this delivery still holds, while its
-- visibility has not lapsed (ARGV[4], ms): its idle time, which
-- `XAUTOCLAIM` measures against the visibility timeout, starts again from
-- zero (`JUSTID` leaves the delivery count alone). A late heartbeat is
-- refused even when no other worker has reclaimed the entry yet.
if redis.call('HGET', KEYS[2], ARGV[2]) ~= ARGV[3] then return 0 end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then return 0 end
if tonumber(pending[1][3]) >= tonumber(ARGV[4]) then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], pending[1][2], 0, ARGV[2], 'JUSTID')
return 1
