-- 1: fresh lease; 2: done; 3: in progress, with the lease's remaining ms.
-- While a tail reads the shard (KEYS[2] set), a fresh lease on id ARGV[3]
-- is logged in KEYS[3] for it (tail.lua).
local value = redis.call('GET', KEYS[1])
if not value then
  redis.call('SET', KEYS[1], 'lease:' .. ARGV[1], 'PX', ARGV[2])
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', '10000', '*', 'a', ARGV[3], 'l', '1')
    redis.call('PEXPIRE', KEYS[3], 30000)
  end
  return {1, 0}
end
if value == 'done' then return {2, 0} end
return {3, redis.call('PTTL', KEYS[1])}
