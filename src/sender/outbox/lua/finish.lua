-- Records an attempt and what follows it, if the lease still holds, and
-- merges the attempt into the endpoint's health: ARGV[17] is empty for no
-- change, 'success' (clears failing_since) or a failed attempt's time (the
-- earlier failing_since is kept). Returns the health, or nil if the lease
-- was lost.
-- KEYS: the delivery's hash, the endpoint's due set, its pending set, the
-- set of the state ARGV[3], its finished set, the attempt's hash, its
-- health, the shard's ready set. ARGV[18] is the endpoint.
local d, due, pending, ended, finished, attempt, h, ready =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local id = ARGV[1]
if redis.call('HGET', d, 'lease') ~= ARGV[2] then return false end
local state = tonumber(ARGV[3])
redis.call('HDEL', d, 'lease')
redis.call('HINCRBY', d, 'tries', 1)
redis.call('HINCRBY', d, 'attempts', 1)
if state == 0 then
  redis.call('HSET', d, 'due_at', ARGV[4], 'waited_ms', ARGV[5], 'reason', ARGV[6])
  redis.call('ZADD', due, ARGV[4], id)
else
  local created = redis.call('HGET', d, 'created_at')
  redis.call('HSET', d, 'state', state, 'finished_at', ARGV[7])
  redis.call('ZREM', due, id)
  redis.call('ZREM', pending, id)
  redis.call('ZADD', ended, created, id)
  if state == 1 or state == 2 then redis.call('ZADD', finished, ARGV[7], id) end
end
set_head(ready, due, ARGV[18])
redis.call('HSET', attempt, 'sent_at', ARGV[9],
  'waited_ms', ARGV[10], 'reason', ARGV[11], 'held_ms', ARGV[12], 'status', ARGV[13],
  'error', ARGV[14], 'duration_us', ARGV[15], 'excerpt', ARGV[16])
if ARGV[17] == 'success' then
  redis.call('HDEL', h, 'failing_since')
elseif ARGV[17] ~= '' then
  local since = tonumber(redis.call('HGET', h, 'failing_since') or '')
  if since == nil or tonumber(ARGV[17]) < since then
    redis.call('HSET', h, 'failing_since', ARGV[17])
  end
end
return redis.call('HMGET', h, 'failing_since', 'disabled', 'disabled_after_ms')
