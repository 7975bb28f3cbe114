-- Shared by the scripts that change an endpoint's due set (put before
-- each of them): the shard's ready set holds each endpoint with anything in
-- its due set, scored by its earliest, so a take across endpoints finds
-- the endpoints with due deliveries without looking at the others.
local function set_head(ready, due, endpoint)
  local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  if head[1] then
    redis.call('ZADD', ready, head[2], endpoint)
  else
    redis.call('ZREM', ready, endpoint)
  end
end
