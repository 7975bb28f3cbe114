-- Records an attempt and what follows it, if the lease still holds, and
-- merges the attempt into the endpoint's health: ARGV[17] is empty for no
-- change, 'success' (clears failing_since) or a failed attempt's time (the
-- earlier failing_since is kept). Returns the health, or nil if the lease
-- was lost.
local base, id = KEYS[1], ARGV[1]
local d = base .. 'd:' .. id
if redis.call('HGET', d, 'lease') ~= ARGV[2] then return false end
local state = tonumber(ARGV[3])
redis.call('HDEL', d, 'lease')
redis.call('HINCRBY', d, 'tries', 1)
redis.call('HINCRBY', d, 'attempts', 1)
if state == 0 then
  redis.call('HSET', d, 'due_at', ARGV[4], 'waited_ms', ARGV[5], 'reason', ARGV[6])
  redis.call('ZADD', base .. 'due', ARGV[4], id)
else
  local created = redis.call('HGET', d, 'created_at')
  redis.call('HSET', d, 'state', state, 'finished_at', ARGV[7])
  redis.call('ZREM', base .. 'due', id)
  redis.call('ZREM', base .. 's:0', id)
  redis.call('ZADD', base .. 's:' .. state, created, id)
  if state == 1 or state == 2 then redis.call('ZADD', base .. 'finished', ARGV[7], id) end
end
redis.call('HSET', base .. 'a:' .. id .. ':' .. ARGV[8], 'sent_at', ARGV[9],
  'waited_ms', ARGV[10], 'reason', ARGV[11], 'held_ms', ARGV[12], 'status', ARGV[13],
  'error', ARGV[14], 'duration_us', ARGV[15], 'excerpt', ARGV[16])
local h = base .. 'health'
if ARGV[17] == 'success' then
  redis.call('HDEL', h, 'failing_since')
elseif ARGV[17] ~= '' then
  local since = tonumber(redis.call('HGET', h, 'failing_since') or '')
  if since == nil or tonumber(ARGV[17]) < since then
    redis.call('HSET', h, 'failing_since', ARGV[17])
  end
end
return redis.call('HMGET', h, 'failing_since', 'disabled', 'disabled_after_ms')
