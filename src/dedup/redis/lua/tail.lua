-- Reads one shard's tail log after the entry ARGV[1] (from its end when
-- empty), and marks the shard as read by a tail for 30 s more, so that
-- accepts, retries and dead letters go on being logged (accept_many.lua,
-- nack.lua, take.lua).
-- Accepts into the inbox carry their stream entry (`e`), lease-mode claims
-- `l`; outcomes (`s`: retry, dead, done) follow them.
-- Returns `{cursor, logged, id, meta, status, ...}`: the last entry read,
-- then for at most ARGV[2] accepts, oldest first, the log entry, event
-- id, meta and status now. The cursor is the last entry read when every
-- accept fitted, else that of the last accept returned.
local tailing, log, stream, attempts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local after, count = ARGV[1], tonumber(ARGV[2])
redis.call('SET', tailing, '1', 'PX', 30000)
redis.call('PEXPIRE', log, 30000)
if after == '' then
  local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
  return {last[1] and last[1][1] or '0-0'}
end
-- A bounded read, so that a long log does not hold the server: outcomes
-- logged past it are read by a later call (a status is as of the read).
local entries = redis.call('XRANGE', log, '(' .. after, '+', 'COUNT', math.max(count * 4, 256))
-- What became of each event later: the last outcome logged wins.
local outcome = {}
for _, entry in ipairs(entries) do
  local list, f = entry[2], {}
  for i = 1, #list, 2 do f[list[i]] = list[i + 1] end
  entry.f = f
  if f['s'] then outcome[f['a']] = f['s'] end
end
local out, cursor, returned = {''}, after, 0
for _, entry in ipairs(entries) do
  local f = entry.f
  if f['e'] or f['l'] then
    if returned == count then break end
    local status
    local queued = f['e'] and redis.call('XRANGE', stream, f['e'], f['e']) or {}
    if f['l'] then
      -- A lease (lease mode): held until completed or released.
      if outcome[f['a']] == 'done' then status = 'done'
      elseif outcome[f['a']] == 'retry' then status = 'retrying'
      else status = 'taken' end
    elseif #queued > 0 then
      local list, q = queued[1][2], {}
      for i = 1, #list, 2 do q[list[i]] = list[i + 1] end
      if redis.call('HEXISTS', attempts, f['e']) == 1 then status = 'taken'
      elseif tonumber(q['attempts']) > 0 then status = 'retrying'
      else status = 'waiting' end
    elseif outcome[f['a']] == 'dead' then status = 'dead'
    elseif outcome[f['a']] == 'retry' then status = 'retrying'
    else status = 'done' end
    out[#out + 1] = entry[1]
    out[#out + 1] = f['a']
    out[#out + 1] = f['m'] or ''
    out[#out + 1] = status
    returned = returned + 1
  end
  cursor = entry[1]
end
out[1] = cursor
return out
