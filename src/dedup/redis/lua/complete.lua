-- While a tail reads the shard (KEYS[2] set), the completion of id ARGV[3]
-- is logged in KEYS[3] for it.
if redis.call('GET', KEYS[1]) ~= 'lease:' .. ARGV[1] then return 0 end
redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', '10000', '*', 's', 'done', 'a', ARGV[3])
end
return 1
