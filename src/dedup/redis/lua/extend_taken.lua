-- A heartbeat for a taken entry this delivery still holds: its idle time,
-- which `XAUTOCLAIM` measures against the visibility timeout, starts
-- again from zero (`JUSTID` leaves the delivery count alone).
if redis.call('HGET', KEYS[2], ARGV[2]) ~= ARGV[3] then return 0 end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], pending[1][2], 0, ARGV[2], 'JUSTID')
return 1
