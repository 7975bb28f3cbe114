-- Put between head.lua and enqueue.lua: the enqueue under an idempotency
-- key. While the key ARGV[6] is live (it expires after ARGV[7], now) it
-- returns the id the key names and enqueues nothing; otherwise it records
-- the key with the id ARGV[1] until ARGV[8] and enqueue.lua goes on.
-- KEYS[6] is the endpoint's hash of keys and ids, KEYS[7] its keys by
-- expiry.
local send_keys, key_expiry = KEYS[6], KEYS[7]
local send_key = ARGV[6]
local key_expires = tonumber(redis.call('ZSCORE', key_expiry, send_key) or '')
if key_expires ~= nil and key_expires > tonumber(ARGV[7]) then
  return redis.call('HGET', send_keys, send_key)
end
redis.call('HSET', send_keys, send_key, ARGV[1])
redis.call('ZADD', key_expiry, ARGV[8], send_key)
