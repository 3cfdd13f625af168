-- acquire: grant the lock and issue its fencing token in one step.
-- KEYS[1] lock key, KEYS[2] counter key (same hash tag, so same Cluster slot)
-- ARGV[1] lease id, ARGV[2] ttl in ms, ARGV[3] largest token that may be issued
-- Returns {1, token} when granted, {0, pttl} when held (pttl -1: no expiry),
-- or an error reply prefixed FENCE_WRONGTYPE / FENCE_BADCOUNTER / FENCE_EXHAUSTED.
local lt = redis.call('TYPE', KEYS[1])['ok']
if lt ~= 'none' and lt ~= 'string' then
  return redis.error_reply('FENCE_WRONGTYPE lock key holds a ' .. lt)
end
local ct = redis.call('TYPE', KEYS[2])['ok']
if ct ~= 'none' and ct ~= 'string' then
  return redis.error_reply('FENCE_WRONGTYPE counter key holds a ' .. ct)
end
local n = 0
if ct == 'string' then
  local cur = redis.call('GET', KEYS[2])
  -- Only what fence writes: 1 to 16 decimal digits (tokens stay below 2^53).
  if string.len(cur) > 16 or not string.match(cur, '^%d+$') then
    return redis.error_reply('FENCE_BADCOUNTER counter key holds a value that is not a token')
  end
  n = tonumber(cur)
end
if lt == 'string' then
  return {0, redis.call('PTTL', KEYS[1])}
end
if n >= tonumber(ARGV[3]) then
  return redis.error_reply('FENCE_EXHAUSTED counter is at the largest token')
end
n = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. n, 'PX', ARGV[2])
return {1, n}
