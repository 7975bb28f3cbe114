-- Stores a new delivery unless the endpoint has one with this id.
local base, id = KEYS[1], ARGV[1]
local d = base .. 'd:' .. id
if redis.call('EXISTS', d) == 1 then return 0 end
redis.call('HSET', d, 'body', ARGV[2], 'state', 0, 'tries', 0, 'attempts', 0,
  'due_at', ARGV[3], 'waited_ms', 0, 'reason', 0, 'created_at', ARGV[4])
redis.call('ZADD', base .. 'due', ARGV[3], id)
redis.call('ZADD', base .. 's:0', ARGV[4], id)
return 1
