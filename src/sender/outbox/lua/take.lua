-- Reads the endpoint's health and, unless it is disabled, leases those of
-- the deliveries named in ARGV[4..] that are still due at ARGV[1] (the
-- caller read them from the due set; another dispatcher may have leased
-- or finished some since): the lease token goes on the delivery and its
-- score in the due set becomes the lease's end, so a delivery whose
-- dispatcher died is due again when the lease ends.
-- Returns the health and the leased deliveries.
-- KEYS: the endpoint's health, its due set, then each delivery's hash.
local h, due = KEYS[1], KEYS[2]
local health = redis.call('HMGET', h, 'failing_since', 'disabled', 'disabled_after_ms')
local out = {}
if health[2] then return {health, out} end
local now = tonumber(ARGV[1])
for i = 4, #ARGV do
  local id, d = ARGV[i], KEYS[i - 1]
  local score = tonumber(redis.call('ZSCORE', due, id) or '')
  if score ~= nil and score <= now then
    redis.call('HSET', d, 'lease', ARGV[2])
    redis.call('ZADD', due, ARGV[3], id)
    local f = redis.call('HMGET', d, 'body', 'tries', 'attempts', 'due_at', 'waited_ms', 'reason')
    out[#out + 1] = {id, f[1], f[2], f[3], f[4], f[5], f[6]}
  end
end
return {health, out}
