-- Moves due retries back onto the stream, reclaims entries whose worker
-- died, reads new ones, and dead-letters any past its last attempt.
-- Returns `{entry, id, body, signed_at, attempt, token, meta}` for each
-- delivery (`meta` is empty for entries made before it was kept).
-- A delivery's token is `count:nonce`: how often the entry was taken, and
-- this call's nonce (ARGV[6]), unique to it. The count alone could be
-- issued twice: a restart from a snapshot, or a failover to a replica
-- that lagged, rolls it back, and a later take would count to the same
-- number a worker still holds.
local stream, attempts, delayed, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, consumer = ARGV[1], ARGV[2]
local count, visibility, max, nonce = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.pcall('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
for _, packed in ipairs(redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, count)) do
  local e = cmsgpack.unpack(packed)
  redis.call('ZREM', delayed, packed)
  redis.call('XADD', stream, '*', 'id', e[1], 'body', e[2], 'signed_at', e[3], 'attempts', e[4],
    'meta', e[5] or '')
end
local out = {}
local function deliver(entry)
  local eid, list = entry[1], entry[2]
  if not list then return end
  local f = {}
  for i = 1, #list, 2 do f[list[i]] = list[i + 1] end
  local held = redis.call('HGET', attempts, eid)
  local taken = (held and tonumber(string.match(held, '^%d+')) or 0) + 1
  local token = taken .. ':' .. nonce
  redis.call('HSET', attempts, eid, token)
  local n = tonumber(f['attempts']) + taken
  if n > max then
    redis.call('XADD', dead, '*', 'id', f['id'], 'body', f['body'],
      'signed_at', f['signed_at'], 'attempts', tostring(n - 1), 'meta', f['meta'] or '')
    redis.call('XACK', stream, group, eid)
    redis.call('XDEL', stream, eid)
    redis.call('HDEL', attempts, eid)
  else
    out[#out + 1] = {eid, f['id'], f['body'], f['signed_at'], tostring(n), token, f['meta'] or ''}
  end
end
local reclaimed = redis.call('XAUTOCLAIM', stream, group, consumer, visibility, '0-0', 'COUNT', count)
for _, entry in ipairs(reclaimed[2]) do deliver(entry) end
if #out < count then
  local fresh = redis.call('XREADGROUP', 'GROUP', group, consumer,
    'COUNT', count - #out, 'STREAMS', stream, '>')
  if fresh then
    for _, entry in ipairs(fresh[1][2]) do deliver(entry) end
  end
end
return out
