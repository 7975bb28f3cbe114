-- One shard's counts: waiting (in the stream and not taken, or delayed
-- after a nack), taken (pending in the consumer group) and dead.
local stream, delayed, dead, group = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local pending = 0
local summary = redis.pcall('XPENDING', stream, group)
if type(summary) == 'table' and not summary.err then pending = tonumber(summary[1]) end
local waiting = redis.call('XLEN', stream) - pending + redis.call('ZCARD', delayed)
return {waiting, pending, redis.call('XLEN', dead)}
