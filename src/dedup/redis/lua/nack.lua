-- Gives an entry back: to the delayed set for `retry_in` ms on the
-- server's clock, or to the dead letters after its last attempt (a max of
-- 0 dead-letters it now) with the reason ARGV[6]. -1: no longer held; 0:
-- will retry; 1: dead-lettered. While a tail reads the shard (KEYS[5]
-- set), the outcome is logged in KEYS[6] for it.
local stream, attempts, delayed, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function logged(outcome, id)
  if redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('XADD', KEYS[6], 'MAXLEN', '~', '10000', '*', 's', outcome, 'a', id)
  end
end
local group, eid, token, max = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[5])
local time = redis.call('TIME')
local retry_at = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + tonumber(ARGV[4])
if redis.call('HGET', attempts, eid) ~= token then return -1 end
local entries = redis.call('XRANGE', stream, eid, eid)
redis.call('XACK', stream, group, eid)
redis.call('XDEL', stream, eid)
redis.call('HDEL', attempts, eid)
if #entries == 0 then return -1 end
local list, f = entries[1][2], {}
for i = 1, #list, 2 do f[list[i]] = list[i + 1] end
local n = tostring(tonumber(f['attempts']) + tonumber(string.match(token, '^%d+')))
if tonumber(n) >= max then
  redis.call('XADD', dead, '*', 'id', f['id'], 'body', f['body'], 'signed_at', f['signed_at'],
    'attempts', n, 'meta', f['meta'] or '', 'reason', ARGV[6])
  logged('dead', f['id'])
  return 1
end
redis.call('ZADD', delayed, retry_at,
  cmsgpack.pack({f['id'], f['body'], f['signed_at'], n, f['meta'] or ''}))
logged('retry', f['id'])
return 0
