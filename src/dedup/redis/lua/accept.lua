-- Claims the id and appends the event to the inbox stream, or does
-- nothing if the id is claimed. If the append fails, the claim is deleted
-- again before the script ends, so nothing is kept.
-- ARGV[6] = '1' (replica acks): a duplicate rewrites its claim as it is,
-- so that every path writes and the `WAIT` that follows has this node's
-- copy of the claim to wait for.
-- KEYS[3] is the shard's idle mark, set by a take that found no new entry:
-- the first accept after it publishes on ARGV[7], so that workers waiting
-- in other processes take at once; accepts into a shard being drained
-- publish nothing.
-- KEYS[4] is set while a tail reads the shard (tail.lua): then the accept
-- is logged in KEYS[5] for it.
if not redis.call('SET', KEYS[1], 'done', 'NX', 'PX', ARGV[1]) then
  if ARGV[6] == '1' then
    redis.call('SET', KEYS[1], redis.call('GET', KEYS[1]), 'KEEPTTL')
  end
  return 0
end
local added = redis.pcall('XADD', KEYS[2], '*',
  'id', ARGV[2], 'body', ARGV[3], 'signed_at', ARGV[4], 'attempts', '0', 'meta', ARGV[5])
if type(added) == 'table' and added.err then
  redis.call('DEL', KEYS[1])
  return added
end
if redis.call('DEL', KEYS[3]) == 1 then redis.call('PUBLISH', ARGV[7], '') end
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', '10000', '*', 'a', ARGV[2], 'e', added, 'm', ARGV[5])
  redis.call('PEXPIRE', KEYS[5], 30000)
end
return 1
