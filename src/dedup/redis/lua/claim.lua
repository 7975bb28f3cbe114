-- 1: fresh lease; 2: done; 3: in progress, with the lease's remaining ms.
local value = redis.call('GET', KEYS[1])
if not value then
  redis.call('SET', KEYS[1], 'lease:' .. ARGV[1], 'PX', ARGV[2])
  return {1, 0}
end
if value == 'done' then return {2, 0} end
return {3, redis.call('PTTL', KEYS[1])}
