-- Reads the endpoint's health and, unless it is disabled, leases the
-- earliest due deliveries (at most ARGV[2]): the lease token goes on the
-- delivery and its score in the due set becomes the lease's end, so a
-- delivery whose dispatcher died is due again when the lease ends.
-- Returns the health and the leased deliveries.
local base = KEYS[1]
local health = redis.call('HMGET', base .. 'health', 'failing_since', 'disabled', 'disabled_after_ms')
local out = {}
local limit = tonumber(ARGV[2])
if health[2] or limit == 0 then return {health, out} end
local ids = redis.call('ZRANGEBYSCORE', base .. 'due', '-inf', ARGV[1], 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
  local d = base .. 'd:' .. id
  redis.call('HSET', d, 'lease', ARGV[3])
  redis.call('ZADD', base .. 'due', ARGV[4], id)
  local f = redis.call('HMGET', d, 'body', 'tries', 'attempts', 'due_at', 'waited_ms', 'reason')
  out[#out + 1] = {id, f[1], f[2], f[3], f[4], f[5], f[6]}
end
return {health, out}
