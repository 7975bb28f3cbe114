-- Merges an attempt into the endpoint's health (KEYS[1]): ARGV[1] is the
-- failed attempt's time, or empty for a success, which clears
-- failing_since. A failure keeps the earlier time. Returns the health.
local h = KEYS[1]
if ARGV[1] == '' then
  redis.call('HDEL', h, 'failing_since')
else
  local since = tonumber(redis.call('HGET', h, 'failing_since') or '')
  if since == nil or tonumber(ARGV[1]) < since then
    redis.call('HSET', h, 'failing_since', ARGV[1])
  end
end
return redis.call('HMGET', h, 'failing_since', 'disabled', 'disabled_after_ms')
