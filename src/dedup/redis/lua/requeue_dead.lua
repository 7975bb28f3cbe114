-- Moves one shard's dead letters (those with event id ARGV[1], or all when
-- it is empty) back onto the stream, their attempts counted from zero;
-- into an idle shard (KEYS[3]) it publishes on ARGV[2], as an accept does.
local stream, dead, idle, only = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local moved = 0
for _, entry in ipairs(redis.call('XRANGE', dead, '-', '+')) do
  local f = {}
  for i = 1, #entry[2], 2 do f[entry[2][i]] = entry[2][i + 1] end
  if only == '' or f['id'] == only then
    redis.call('XADD', stream, '*', 'id', f['id'], 'body', f['body'],
      'signed_at', f['signed_at'] or '', 'attempts', '0', 'meta', f['meta'] or '')
    redis.call('XDEL', dead, entry[1])
    moved = moved + 1
  end
end
if moved > 0 and redis.call('DEL', idle) == 1 then redis.call('PUBLISH', ARGV[2], '') end
return moved
