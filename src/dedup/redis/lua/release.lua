-- While a tail reads the shard (KEYS[2] set), the release of id ARGV[2]
-- (given back for another delivery to claim) is logged in KEYS[3].
if redis.call('GET', KEYS[1]) ~= 'lease:' .. ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', '10000', '*', 's', 'retry', 'a', ARGV[2])
end
return 1
