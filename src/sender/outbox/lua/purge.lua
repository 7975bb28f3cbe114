-- Deletes the endpoint's deliveries that ended (delivered or gone)
-- before ARGV[1], with their attempts.
local base = KEYS[1]
local ids = redis.call('ZRANGEBYSCORE', base .. 'finished', '-inf', '(' .. ARGV[1])
for _, id in ipairs(ids) do
  local d = base .. 'd:' .. id
  local n = tonumber(redis.call('HGET', d, 'attempts') or '0') or 0
  for i = 1, n do redis.call('DEL', base .. 'a:' .. id .. ':' .. i) end
  local state = redis.call('HGET', d, 'state')
  if state then redis.call('ZREM', base .. 's:' .. state, id) end
  redis.call('DEL', d)
  redis.call('ZREM', base .. 'finished', id)
end
return #ids
