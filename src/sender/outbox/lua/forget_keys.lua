-- Forgets up to ARGV[2] of the endpoint's idempotency keys that expired by
-- ARGV[1]. Returns how many.
-- KEYS: the endpoint's hash of keys and ids, its keys by expiry.
local names = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #names == 0 then return 0 end
redis.call('HDEL', KEYS[1], unpack(names))
redis.call('ZREM', KEYS[2], unpack(names))
return #names
