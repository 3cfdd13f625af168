-- acquire: grant the lock and issue its fencing token in one step.
-- KEYS[1] lock key, KEYS[2] counter key (same hash tag, so same Cluster slot)
-- ARGV[1] lease id, ARGV[2] ttl in ms, ARGV[3] largest token that may be issued
-- Returns {1, token} when granted, {0, pttl} when held (pttl -1: no expiry),
-- or an error reply prefixed FENCE_WRONGTYPE / FENCE_BADCOUNTER / FENCE_EXHAUSTED.
-- pcall turns a WRONGTYPE error into a value, so a key of another type costs no
-- extra TYPE call on the fast path.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return redis.error_reply('FENCE_WRONGTYPE lock key ' .. KEYS[1] .. ' holds a value that is not a string')
end
local cur = redis.pcall('GET', KEYS[2])
if type(cur) == 'table' and cur.err then
  return redis.error_reply('FENCE_WRONGTYPE counter key ' .. KEYS[2] .. ' holds a value that is not a string')
end
local n = 0
if cur then
  -- Only what fence writes: 1 to 16 decimal digits (tokens stay below 2^53).
  if string.len(cur) > 16 or not string.match(cur, '^%d+$') then
    return redis.error_reply('FENCE_BADCOUNTER counter key ' .. KEYS[2] .. ' holds a value that is not a token')
  end
  n = tonumber(cur)
end
if v then
  return {0, redis.call('PTTL', KEYS[1])}
end
if n >= tonumber(ARGV[3]) then
  return redis.error_reply('FENCE_EXHAUSTED counter key ' .. KEYS[2] .. ' is at the largest token')
end
n = redis.call('INCR', KEYS[2])
-- %d, not tostring: Lua 5.1 would print large numbers as 9.007199254741e+15.
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%d', n), 'PX', ARGV[2])
return {1, n}
