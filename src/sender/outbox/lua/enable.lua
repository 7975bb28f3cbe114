-- Enables the endpoint ARGV[1] and forgets its failures.
-- KEYS: its health, the shard's set of disabled endpoints.
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
