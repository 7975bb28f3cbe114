-- Disables the endpoint (KEYS[1]) with code ARGV[1] and limit ARGV[2]
-- unless it is disabled already; with ARGV[3] (the latest failing_since
-- that qualifies) only while it has failed that long. KEYS[2] is the
-- shard's set of disabled endpoints, ARGV[4] the endpoint.
local h = KEYS[1]
if redis.call('HEXISTS', h, 'disabled') == 1 then return 0 end
if ARGV[3] ~= '' then
  local since = tonumber(redis.call('HGET', h, 'failing_since') or '')
  if since == nil or since > tonumber(ARGV[3]) then return 0 end
end
redis.call('HSET', h, 'disabled', ARGV[1])
redis.call('SADD', KEYS[2], ARGV[4])
if ARGV[2] == '' then
  redis.call('HDEL', h, 'disabled_after_ms')
else
  redis.call('HSET', h, 'disabled_after_ms', ARGV[2])
end
return 1
