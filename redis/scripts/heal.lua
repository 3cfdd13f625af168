-- heal: raise the counter to at least ARGV[1] (never lower it), so the next grant is above it.
-- KEYS[1] counter key; ARGV[1] highest token a guard has seen; ARGV[2] wake
-- channel (same hash tag), ARGV[3] 'SPUBLISH' (sharded pub/sub) or 'PUBLISH', to
-- tell watchers when the counter was raised; ARGV[4] the bound (fence.MaxHealAhead):
-- how far above the counter (the name's last token) seen may be.
-- Returns the counter after healing; an error reply 'FENCE_HEALBOUND <counter>'
-- when seen is more than the bound above the counter (nothing changed); or an
-- error reply like acquire's. Tokens are below 2^53, so the doubles Lua
-- computes with hold them and their difference exactly.
local ct = redis.call('TYPE', KEYS[1])['ok']
if ct ~= 'none' and ct ~= 'string' then
  return redis.error_reply('FENCE_WRONGTYPE counter key holds a ' .. ct)
end
local n, cur = 0, '0'
if ct == 'string' then
  cur = redis.call('GET', KEYS[1])
  if string.len(cur) > 16 or not string.match(cur, '^%d+$') then
    return redis.error_reply('FENCE_BADCOUNTER counter key holds a value that is not a token')
  end
  n = tonumber(cur)
end
local seen = tonumber(ARGV[1])
if seen > n and seen - n > tonumber(ARGV[4]) then
  return redis.error_reply('FENCE_HEALBOUND ' .. cur)
end
if seen > n then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call(ARGV[3], ARGV[2], 'healed')
  return seen
end
return n
