-- Ends a lease without an attempt, due again at ARGV[3].
-- KEYS: the delivery's hash, the endpoint's due set, the shard's ready
-- set. ARGV[4] is the endpoint.
local d, due, ready = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]
if redis.call('HGET', d, 'lease') ~= ARGV[2] then return 0 end
redis.call('HDEL', d, 'lease')
redis.call('HSET', d, 'due_at', ARGV[3])
redis.call('ZADD', due, ARGV[3], id)
set_head(ready, due, ARGV[4])
return 1
