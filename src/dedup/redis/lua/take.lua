-- Moves due retries back onto the stream, reclaims entries whose worker
-- died, reads new ones, and dead-letters any past its last attempt.
-- Returns `{entry, id, body, signed_at, attempt, token, meta}` for each
-- delivery (`meta` is empty for entries made before it was kept).
-- A delivery's token is `count:nonce`: how often the entry was taken, and
-- this call's nonce (ARGV[6]), unique to it. The count alone could be
-- issued twice: a restart from a snapshot, or a failover to a replica
-- that lagged, rolls it back, and a later take would count to the same
-- number a worker still holds.
-- Each batch of entries costs one `HMGET` and one `HSET` of tokens, not
-- one of each per entry: most of a take's time is spent per command.
-- ARGV[7] = '1': only entries never delivered. A take asks a shard again
-- for more only this way: a second reclaim in the same take could hand
-- out again what its first round handed out, had the rounds taken longer
-- than the visibility timeout.
-- KEYS[5], the shard's idle mark, is set when the read finds fewer new
-- entries than asked: the next accept into the shard publishes (accept_many.lua).
-- While a tail reads the shard (KEYS[6] set), dead letters buried here are
-- logged in KEYS[7] for it.
local stream, attempts, delayed, dead, idle = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local group, consumer = ARGV[1], ARGV[2]
local count, visibility, max, nonce = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6]
local fresh_only = ARGV[7] == '1'
-- ARGV[8]: the reason a dead letter buried here is kept with.
local timed_out = ARGV[8]

-- Runs a read of the consumer group; on a shard's first take, when the
-- group (or the stream) is not there yet, makes it and reads again.
-- Creating it on every take instead would fail with BUSYGROUP each time,
-- an error the server counts in its statistics (`INFO errorstats`). Any
-- other error is raised as it came, once.
local function in_group(...)
  local reply = redis.pcall(...)
  if type(reply) ~= 'table' or not reply.err then return reply end
  if string.sub(reply.err, 1, 7) ~= 'NOGROUP' then error(reply) end
  redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  return redis.call(...)
end

if not fresh_only then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  for _, packed in ipairs(redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, count)) do
    local e = cmsgpack.unpack(packed)
    redis.call('ZREM', delayed, packed)
    redis.call('XADD', stream, '*', 'id', e[1], 'body', e[2], 'signed_at', e[3], 'attempts', e[4],
      'meta', e[5] or '')
  end
end

-- Runs `command key <fixed...> <items...>` in chunks, under Lua's limit on
-- how many values one call may unpack.
local function chunked(command, key, fixed, items)
  for first = 1, #items, 1000 do
    local args = {command, key}
    for _, value in ipairs(fixed) do args[#args + 1] = value end
    for i = first, math.min(first + 999, #items) do args[#args + 1] = items[i] end
    redis.call(unpack(args))
  end
end

local out = {}
local function deliver(entries)
  local found = {}
  for _, entry in ipairs(entries) do
    -- An entry deleted while pending comes back from XAUTOCLAIM without
    -- its fields.
    if entry[2] then found[#found + 1] = entry end
  end
  if #found == 0 then return end
  local held = {}
  for first = 1, #found, 1000 do
    local ids = {}
    for i = first, math.min(first + 999, #found) do ids[#ids + 1] = found[i][1] end
    local values = redis.call('HMGET', attempts, unpack(ids))
    for i = 1, #ids do held[first + i - 1] = values[i] end
  end
  local tokens, buried = {}, {}
  for i, entry in ipairs(found) do
    local eid, list = entry[1], entry[2]
    local f = {}
    for j = 1, #list, 2 do f[list[j]] = list[j + 1] end
    local taken = (held[i] and tonumber(string.match(held[i], '^%d+')) or 0) + 1
    local token = taken .. ':' .. nonce
    local n = tonumber(f['attempts']) + taken
    if n > max then
      redis.call('XADD', dead, '*', 'id', f['id'], 'body', f['body'],
        'signed_at', f['signed_at'], 'attempts', tostring(n - 1), 'meta', f['meta'] or '',
        'reason', timed_out)
      buried[#buried + 1] = eid
      if redis.call('EXISTS', KEYS[6]) == 1 then
        redis.call('XADD', KEYS[7], 'MAXLEN', '~', '10000', '*', 's', 'dead', 'a', f['id'])
      end
    else
      tokens[#tokens + 1] = eid
      tokens[#tokens + 1] = token
      out[#out + 1] = {eid, f['id'], f['body'], f['signed_at'], tostring(n), token, f['meta'] or ''}
    end
  end
  if #tokens > 0 then chunked('HSET', attempts, {}, tokens) end
  if #buried > 0 then
    chunked('XACK', stream, {group}, buried)
    chunked('XDEL', stream, {}, buried)
    chunked('HDEL', attempts, {}, buried)
  end
end

if not fresh_only then
  local reclaimed = in_group('XAUTOCLAIM', stream, group, consumer, visibility, '0-0',
    'COUNT', count)
  deliver(reclaimed[2])
end
if #out < count then
  local asked = count - #out
  local fresh = in_group('XREADGROUP', 'GROUP', group, consumer,
    'COUNT', asked, 'STREAMS', stream, '>')
  local read = fresh and fresh[1][2] or {}
  -- Set only when unset: a write would cost an empty take an AOF fsync.
  if #read < asked and redis.call('EXISTS', idle) == 0 then redis.call('SET', idle, '1') end
  deliver(read)
end
return out
