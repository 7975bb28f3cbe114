-- Acks many entries of one shard, each if its delivery still holds it (see
-- ack.lua): ARGV[1] the group, then pairs of entry id and token. Returns
-- 1 for each entry acked, 0 for each lost, in order.
local stream, attempts, group = KEYS[1], KEYS[2], ARGV[1]
local acked = {}
for i = 2, #ARGV, 2 do
  local eid, token = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', attempts, eid) == token then
    redis.call('XACK', stream, group, eid)
    redis.call('XDEL', stream, eid)
    redis.call('HDEL', attempts, eid)
    acked[#acked + 1] = 1
  else
    acked[#acked + 1] = 0
  end
end
return acked
