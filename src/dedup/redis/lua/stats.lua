-- One shard's counts: waiting (in the stream and not taken, or delayed
-- after a nack), taken (pending in the consumer group) and dead.
local stream, delayed, dead, group = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
-- Before the first take there is no group, and before the first accept
-- no stream: both mean nothing is pending. Asked so that neither is an
-- error (which the server would count in `INFO errorstats`).
local pending = 0
if redis.call('EXISTS', stream) == 1 then
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local fields = {}
    for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
    if fields['name'] == group then pending = tonumber(fields['pending']) end
  end
end
local waiting = redis.call('XLEN', stream) - pending + redis.call('ZCARD', delayed)
return {waiting, pending, redis.call('XLEN', dead)}
