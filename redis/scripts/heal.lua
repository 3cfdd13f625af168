-- heal: raise the counter to at least ARGV[1] (never lower it), so the next grant is above it.
-- KEYS[1] counter key; ARGV[1] highest token a guard has seen; ARGV[2] wake
-- channel (same hash tag), ARGV[3] 'SPUBLISH' (sharded pub/sub) or 'PUBLISH', to
-- tell watchers when the counter was raised.
-- Returns the counter after healing, or an error reply like acquire's.
local ct = redis.call('TYPE', KEYS[1])['ok']
if ct ~= 'none' and ct ~= 'string' then
  return redis.error_reply('FENCE_WRONGTYPE counter key holds a ' .. ct)
end
local n = 0
if ct == 'string' then
  local cur = redis.call('GET', KEYS[1])
  if string.len(cur) > 16 or not string.match(cur, '^%d+$') then
    return redis.error_reply('FENCE_BADCOUNTER counter key holds a value that is not a token')
  end
  n = tonumber(cur)
end
local seen = tonumber(ARGV[1])
if seen > n then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call(ARGV[3], ARGV[2], 'healed')
  return seen
end
return n
