-- Stores a new delivery unless the endpoint has one with this id.
-- KEYS: the delivery's hash, the endpoint's due set, its pending set.
local d, due, pending = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]
if redis.call('EXISTS', d) == 1 then return 0 end
redis.call('HSET', d, 'body', ARGV[2], 'state', 0, 'tries', 0, 'attempts', 0,
  'due_at', ARGV[3], 'waited_ms', 0, 'reason', 0, 'created_at', ARGV[4])
redis.call('ZADD', due, ARGV[3], id)
redis.call('ZADD', pending, ARGV[4], id)
return 1
