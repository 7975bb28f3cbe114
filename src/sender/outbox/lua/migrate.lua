-- Moving an outbox from the layout before the due index: adds an
-- endpoint's set members (ARGV[2..]: for each of KEYS[1..6] a count n and
-- n score, member pairs; members present already keep their score), then
-- lists the endpoint ARGV[1] in the shard's sets of endpoints and, if its
-- health says so, of disabled endpoints, and sets its place in the ready set.
-- KEYS: the endpoint's due set, its sets of states 0 to 3, its finished
-- set, its health, the shard's ready set, set of disabled endpoints and set
-- of endpoints.
local endpoint, a = ARGV[1], 2
for k = 1, 6 do
  local n = tonumber(ARGV[a])
  for i = 1, n do
    redis.call('ZADD', KEYS[k], 'NX', ARGV[a + 2 * i - 1], ARGV[a + 2 * i])
  end
  a = a + 1 + 2 * n
end
if redis.call('HEXISTS', KEYS[7], 'disabled') == 1 then redis.call('SADD', KEYS[9], endpoint) end
redis.call('SADD', KEYS[10], endpoint)
set_head(KEYS[8], KEYS[1], endpoint)
return 1
