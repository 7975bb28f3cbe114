-- Deletes the endpoint's deliveries named in ARGV[5..] (pairs of an id and
-- its attempt count, as the caller read them) that are still in the state
-- ARGV[1] and ended (sent, while pending) before ARGV[2], with their
-- attempts; a pending one leased past ARGV[3] (now) is in an attempt and
-- kept. One attempted or replayed since the caller read it is left for
-- the next purge. Returns how many were deleted.
-- KEYS: the state's set, the endpoint's finished set, its due set, the
-- shard's ready set, then for each delivery its hash and its attempts'
-- hashes. ARGV[4] is the endpoint.
local set, finished, due, ready = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local state, cutoff, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local field = 'finished_at'
if state == 0 then field = 'created_at' end
local k, deleted = 5, 0
for i = 5, #ARGV, 2 do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  local d = KEYS[k]
  local f = redis.call('HMGET', d, 'state', field, 'attempts', 'lease')
  local at = tonumber(f[2] or '')
  local leased = false
  if state == 0 and f[4] then
    local lease_end = tonumber(redis.call('ZSCORE', due, id) or '')
    leased = lease_end ~= nil and lease_end > now
  end
  if tonumber(f[1] or '') == state and at ~= nil and at < cutoff
    and tonumber(f[3] or '') == n and not leased then
    for j = 1, n do redis.call('DEL', KEYS[k + j]) end
    redis.call('DEL', d)
    redis.call('ZREM', set, id)
    redis.call('ZREM', finished, id)
    redis.call('ZREM', due, id)
    deleted = deleted + 1
  end
  k = k + 1 + n
end
if state == 0 and deleted > 0 then set_head(ready, due, ARGV[4]) end
return deleted
