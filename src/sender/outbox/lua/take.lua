-- For each endpoint named in ARGV (ARGV[2..]: its name, the time now, the
-- lease's end, a count n and n ids), reads its health and, unless it is
-- disabled, leases those of the n deliveries that are still due now (the
-- caller read them from the due set; another dispatcher may have leased
-- or finished some since): the lease token ARGV[1] goes on the delivery
-- and its score in the due set becomes the lease's end, so a delivery
-- whose dispatcher died is due again when the lease ends.
-- Returns, for each endpoint, its name, health and leased deliveries.
-- KEYS: the shard's ready set, then for each endpoint its health, its due
-- set and the n deliveries' hashes.
local ready, token = KEYS[1], ARGV[1]
local k, a, out = 2, 2, {}
while a <= #ARGV do
  local endpoint, now, until_ms, n = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2], tonumber(ARGV[a + 3])
  local h, due = KEYS[k], KEYS[k + 1]
  local health = redis.call('HMGET', h, 'failing_since', 'disabled', 'disabled_after_ms')
  local rows = {}
  if not health[2] then
    for i = 1, n do
      local id, d = ARGV[a + 3 + i], KEYS[k + 1 + i]
      local score = tonumber(redis.call('ZSCORE', due, id) or '')
      if score ~= nil and score <= now then
        redis.call('HSET', d, 'lease', token)
        redis.call('ZADD', due, until_ms, id)
        local f = redis.call('HMGET', d, 'body', 'tries', 'attempts', 'due_at', 'waited_ms',
          'reason', 'created_at', 'trace')
        -- false, not nil, keeps the row's length: a nil reply to Rust.
        rows[#rows + 1] = {id, f[1], f[2], f[3], f[4], f[5], f[6], f[7] or '0', f[8] or false}
      end
    end
    if #rows > 0 then set_head(ready, due, endpoint) end
  end
  out[#out + 1] = {endpoint, health, rows}
  k, a = k + 2 + n, a + 4 + n
end
return out
