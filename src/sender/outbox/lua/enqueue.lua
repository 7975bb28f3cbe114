-- Stores a new delivery unless the endpoint has one with this id.
-- KEYS: the delivery's hash, the endpoint's due set, its pending set, the
-- shard's ready set and its set of endpoints. The last ARGV is the trace
-- the delivery was sent in, or empty.
local d, due, pending, ready, endpoints = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, endpoint, trace = ARGV[1], ARGV[5], ARGV[#ARGV]
if redis.call('EXISTS', d) == 1 then return 0 end
redis.call('HSET', d, 'body', ARGV[2], 'state', 0, 'tries', 0, 'attempts', 0,
  'due_at', ARGV[3], 'waited_ms', 0, 'reason', 0, 'created_at', ARGV[4])
if trace ~= '' then redis.call('HSET', d, 'trace', trace) end
redis.call('ZADD', due, ARGV[3], id)
redis.call('ZADD', pending, ARGV[4], id)
redis.call('SADD', endpoints, endpoint)
set_head(ready, due, endpoint)
return 1
