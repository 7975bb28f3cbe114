-- Records a namespace's shard count on first use and returns the count on
-- record. A namespace with no record that already has keys of the layout
-- from before shards (its unsharded stream KEYS[2], or any key the caller
-- found and flagged with ARGV[2] = '1', such as lease-mode claims) is
-- recorded as one shard, so that upgraded stores keep finding them.
local recorded = redis.call('GET', KEYS[1])
if recorded then return tonumber(recorded) end
if ARGV[2] == '1' or redis.call('EXISTS', KEYS[2]) == 1 then
  recorded = '1'
else
  recorded = ARGV[1]
end
redis.call('SET', KEYS[1], recorded)
return tonumber(recorded)
