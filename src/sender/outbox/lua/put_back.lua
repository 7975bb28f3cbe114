-- Ends a lease without an attempt, due again at ARGV[3].
local base, id = KEYS[1], ARGV[1]
local d = base .. 'd:' .. id
if redis.call('HGET', d, 'lease') ~= ARGV[2] then return 0 end
redis.call('HDEL', d, 'lease')
redis.call('HSET', d, 'due_at', ARGV[3])
redis.call('ZADD', base .. 'due', ARGV[3], id)
return 1
