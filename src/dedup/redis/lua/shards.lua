-- Records a namespace's shard count on first use and returns the count on
-- record. A namespace with no record whose unsharded stream (KEYS[2])
-- already exists was made before shards: it is recorded as one shard.
local recorded = redis.call('GET', KEYS[1])
if recorded then return tonumber(recorded) end
if redis.call('EXISTS', KEYS[2]) == 1 then recorded = '1' else recorded = ARGV[1] end
redis.call('SET', KEYS[1], recorded)
return tonumber(recorded)
