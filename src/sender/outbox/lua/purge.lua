-- Deletes the endpoint's deliveries named in ARGV[2..] (pairs of an id and
-- its attempt count, as the caller read them) that ended (delivered or
-- gone) before ARGV[1], with their attempts. One replayed or attempted
-- since the caller read it is left for the next purge. Returns how many
-- were deleted.
-- KEYS: the endpoint's finished set, its delivered and gone sets, then
-- for each delivery its hash and then its attempts' hashes.
local finished = KEYS[1]
local sets = {[1] = KEYS[2], [2] = KEYS[3]}
local cutoff = tonumber(ARGV[1])
local k, deleted = 4, 0
for i = 2, #ARGV, 2 do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  local d = KEYS[k]
  local ended = tonumber(redis.call('ZSCORE', finished, id) or '')
  local attempts = tonumber(redis.call('HGET', d, 'attempts') or '')
  if ended ~= nil and ended < cutoff and attempts == n then
    for j = 1, n do redis.call('DEL', KEYS[k + j]) end
    local state = tonumber(redis.call('HGET', d, 'state') or '')
    if sets[state] then redis.call('ZREM', sets[state], id) end
    redis.call('DEL', d)
    redis.call('ZREM', finished, id)
    deleted = deleted + 1
  end
  k = k + 1 + n
end
return deleted
