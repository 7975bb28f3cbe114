-- Makes a dead or gone delivery pending again from the schedule's start.
-- KEYS: the delivery's hash, the endpoint's due set, its finished set, and
-- its sets of the states pending, gone and dead, the shard's ready set.
-- ARGV[3] is the endpoint.
local d, due, finished = KEYS[1], KEYS[2], KEYS[3]
local sets = {[0] = KEYS[4], [2] = KEYS[5], [3] = KEYS[6]}
local id = ARGV[1]
local state = tonumber(redis.call('HGET', d, 'state') or '')
if state ~= 2 and state ~= 3 then return 0 end
redis.call('HSET', d, 'state', 0, 'tries', 0, 'due_at', ARGV[2], 'waited_ms', 0, 'reason', 0)
redis.call('HDEL', d, 'finished_at', 'lease')
redis.call('ZREM', sets[state], id)
redis.call('ZADD', sets[0], redis.call('HGET', d, 'created_at'), id)
redis.call('ZREM', finished, id)
redis.call('ZADD', due, ARGV[2], id)
set_head(KEYS[7], due, ARGV[3])
return 1
