-- acquire: grant the lock and issue its fencing token in one step.
-- KEYS[1] lock key, KEYS[2] counter key (same hash tag, so same Cluster slot)
-- ARGV[1] lease id, ARGV[2] ttl in ms, ARGV[3] largest token that may be issued,
-- ARGV[4] owner ('' if none), ARGV[5] wake channel (same hash tag), ARGV[6]
-- 'SPUBLISH' (sharded pub/sub) or 'PUBLISH'
-- Returns {1, token} when granted, {0, pttl} when held (pttl -1: no expiry),
-- or an error reply prefixed FENCE_WRONGTYPE / FENCE_BADCOUNTER / FENCE_EXHAUSTED.
--
-- The fast path is three calls: GET, INCR, SET. pcall turns a WRONGTYPE or
-- not-an-integer error into a value instead of aborting, and an INCR that went
-- out of range is undone before returning: a script is atomic, so no client and no
-- replica sees the intermediate value.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('FENCE_WRONGTYPE lock key ' .. KEYS[1] .. ' holds a value that is not a string')
end
if v then
  return {0, redis.call('PTTL', KEYS[1])}
end
local n = redis.pcall('INCR', KEYS[2])
if type(n) == 'table' then
  if string.find(n.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply('FENCE_WRONGTYPE counter key ' .. KEYS[2] .. ' holds a value that is not a string')
  end
  return redis.error_reply('FENCE_BADCOUNTER counter key ' .. KEYS[2] .. ' holds a value that is not a token')
end
local max = tonumber(ARGV[3])
if n < 1 or n > max then
  redis.call('DECR', KEYS[2])
  if n == max + 1 then
    return redis.error_reply('FENCE_EXHAUSTED counter key ' .. KEYS[2] .. ' is at the largest token')
  end
  return redis.error_reply('FENCE_BADCOUNTER counter key ' .. KEYS[2] .. ' holds a value that is not a token')
end
-- The lock value is '<lease id> <token>', or '<lease id> <owner> <token>' with an
-- owner: the lease id has no spaces and the token ends the value, so the owner
-- (which may contain spaces) is what lies between, and older readers, which match
-- the lease id prefix and the trailing token, read both forms (see inspect.lua).
-- %d, not tostring: Lua 5.1 would print large numbers as 9.007199254741e+15.
local holder = ARGV[1] .. ' '
if ARGV[4] ~= '' then
  holder = holder .. ARGV[4] .. ' '
end
redis.call('SET', KEYS[1], holder .. string.format('%d', n), 'PX', ARGV[2])
-- Tell watchers (waiters skip 'granted': a grant frees nothing). A publish to a
-- channel nobody listens on is a dictionary lookup, cheaper than asking first.
redis.call(ARGV[6], ARGV[5], 'granted')
return {1, n}
