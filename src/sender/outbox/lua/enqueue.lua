-- Stores a new delivery unless the endpoint has one with this id.
-- KEYS: the delivery's hash, the endpoint's due set, its pending set, the
-- shard's ready set and its set of endpoints.
local d, due, pending, ready, endpoints = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, endpoint = ARGV[1], ARGV[5]
if redis.call('EXISTS', d) == 1 then return 0 end
redis.call('HSET', d, 'body', ARGV[2], 'state', 0, 'tries', 0, 'attempts', 0,
  'due_at', ARGV[3], 'waited_ms', 0, 'reason', 0, 'created_at', ARGV[4])
redis.call('ZADD', due, ARGV[3], id)
redis.call('ZADD', pending, ARGV[4], id)
redis.call('SADD', endpoints, endpoint)
set_head(ready, due, endpoint)
return 1
