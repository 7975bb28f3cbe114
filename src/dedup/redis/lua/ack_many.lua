-- Acks many entries of one shard, each if its delivery still holds it (see
-- ack.lua): ARGV[1] the group, then pairs of entry id and token. Returns
-- 1 for each entry acked, 0 for each lost, in order. One `HMGET`, `XACK`,
-- `XDEL` and `HDEL` for the whole batch, in chunks under Lua's unpack
-- limit: most of an ack's time is spent per command.
local stream, attempts, group = KEYS[1], KEYS[2], ARGV[1]
local acked, held, seen = {}, {}, {}
for first = 2, #ARGV, 2000 do
  local eids = {}
  for i = first, math.min(first + 1998, #ARGV - 1), 2 do eids[#eids + 1] = ARGV[i] end
  local tokens = redis.call('HMGET', attempts, unpack(eids))
  for j, eid in ipairs(eids) do
    -- The same delivery twice in one call is acked once, as two calls would.
    if tokens[j] == ARGV[first + 2 * (j - 1) + 1] and not seen[eid] then
      seen[eid] = true
      held[#held + 1] = eid
      acked[#acked + 1] = 1
    else
      acked[#acked + 1] = 0
    end
  end
  if #held > 0 then
    redis.call('XACK', stream, group, unpack(held))
    redis.call('XDEL', stream, unpack(held))
    redis.call('HDEL', attempts, unpack(held))
    held = {}
  end
end
return acked
