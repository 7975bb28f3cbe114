-- Accepts a batch of events in its order: each claims its id and appends
-- the event to its shard's inbox stream, or does nothing if the id is
-- claimed (a duplicate inside the batch too: the first of its id is
-- accepted). If an append fails, its claim is deleted again before the
-- script ends, so nothing of that event is kept.
-- KEYS holds five keys per event: its claim, its shard's inbox stream,
-- the shard's idle mark, tail mark and tail log. ARGV[1] is the retention
-- in ms; ARGV[2] '1' with replica acks: a duplicate rewrites its claim as
-- it is, so that every path writes and the `WAIT` that follows has this
-- node's copy of the claim to wait for. Then five values per event: id,
-- body, signed_at, meta and the channel to publish on.
-- The idle mark is set by a take that found no new entry: the first
-- accept after it publishes, so that workers waiting in other processes
-- take at once; accepts into a shard being drained publish nothing.
-- While a tail reads the shard (its mark set), the accept is logged for it.
-- Returns, per event, 1 (accepted), 0 (duplicate) or the error text of an
-- append that failed.
local out = {}
local retention, rewrite = ARGV[1], ARGV[2] == '1'
-- A shard's idle mark and tail mark are looked at once per batch.
local woken, tailed = {}, {}
for event = 0, #KEYS / 5 - 1 do
  local k, a = event * 5, 2 + event * 5
  local claim, inbox, idle, tailing, log = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5]
  local id, meta = ARGV[a + 1], ARGV[a + 4]
  if not redis.call('SET', claim, 'done', 'NX', 'PX', retention) then
    if rewrite then
      redis.call('SET', claim, redis.call('GET', claim), 'KEEPTTL')
    end
    out[#out + 1] = 0
  else
    local added = redis.pcall('XADD', inbox, '*',
      'id', id, 'body', ARGV[a + 2], 'signed_at', ARGV[a + 3], 'attempts', '0', 'meta', meta)
    if type(added) == 'table' and added.err then
      redis.call('DEL', claim)
      out[#out + 1] = added.err
    else
      if not woken[idle] then
        woken[idle] = true
        if redis.call('DEL', idle) == 1 then redis.call('PUBLISH', ARGV[a + 5], '') end
      end
      if tailed[tailing] == nil then tailed[tailing] = redis.call('EXISTS', tailing) == 1 end
      if tailed[tailing] then
        redis.call('XADD', log, 'MAXLEN', '~', '10000', '*', 'a', id, 'e', added, 'm', meta)
        redis.call('PEXPIRE', log, 30000)
      end
      out[#out + 1] = 1
    end
  end
end
return out
