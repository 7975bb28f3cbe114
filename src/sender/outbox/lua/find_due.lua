-- Finds, in one shard, the due deliveries of the endpoints named in ARGV
-- (ARGV[2..]: for each its name, its limit and the time now; ARGV[1] is
-- the latest of those times), without leasing them: up to each one's
-- limit, earliest due first, of those in the shard's ready set (which have
-- something due) and not disabled. Returns the disabled ones' names, and
-- for each endpoint with due deliveries its name and its ids and due
-- times, alternating.
-- KEYS: the shard's ready set, its set of disabled endpoints, then each
-- named endpoint's due set, in the order named.
local ready, off = KEYS[1], KEYS[2]
local due_now, disabled = {}, {}
for _, e in ipairs(redis.call('ZRANGEBYSCORE', ready, '-inf', ARGV[1])) do due_now[e] = true end
for _, e in ipairs(redis.call('SMEMBERS', off)) do disabled[e] = true end
local out_off, out = {}, {}
for i = 1, (#ARGV - 1) / 3 do
  local endpoint, limit, now = ARGV[3 * i - 1], tonumber(ARGV[3 * i]), ARGV[3 * i + 1]
  if disabled[endpoint] then
    out_off[#out_off + 1] = endpoint
  elseif due_now[endpoint] and limit > 0 then
    local found = redis.call('ZRANGEBYSCORE', KEYS[2 + i], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
    if #found > 0 then out[#out + 1] = {endpoint, found} end
  end
end
return {out_off, out}
