-- Makes a dead or gone delivery pending again from the schedule's start.
local base, id = KEYS[1], ARGV[1]
local d = base .. 'd:' .. id
local state = tonumber(redis.call('HGET', d, 'state') or '')
if state ~= 2 and state ~= 3 then return 0 end
redis.call('HSET', d, 'state', 0, 'tries', 0, 'due_at', ARGV[2], 'waited_ms', 0, 'reason', 0)
redis.call('HDEL', d, 'finished_at', 'lease')
redis.call('ZREM', base .. 's:' .. state, id)
redis.call('ZADD', base .. 's:0', redis.call('HGET', d, 'created_at'), id)
redis.call('ZREM', base .. 'finished', id)
redis.call('ZADD', base .. 'due', ARGV[2], id)
return 1
