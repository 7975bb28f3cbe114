-- A heartbeat for a lease this delivery still holds.
if redis.call('GET', KEYS[1]) ~= 'lease:' .. ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
