if redis.call('GET', KEYS[1]) ~= 'lease:' .. ARGV[1] then return 0 end
redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
return 1
