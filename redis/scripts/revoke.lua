-- revoke: end the current lease, or every live semaphore or shared lease, whatever
-- their lease ids, and wake waiters (run after holders.lua).
-- KEYS[1] lock key, KEYS[2] holders key; ARGV[1] wake channel (same hash tag),
-- ARGV[2] 'SPUBLISH' (sharded pub/sub) or 'PUBLISH'.
-- Returns 1 if a lease was ended, 0 if none is held (the key is gone: released or
-- expired; or no lease in the holders hash is live), or an error reply
-- FENCE_WRONGTYPE when a key holds another type (not a lease: it is left alone, as
-- acquire refuses it).
--
-- The look and the delete are one atomic step, so a lease granted after the look
-- is never ended by it.
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then
  return 0
end
if t ~= 'string' then
  return redis.error_reply('FENCE_WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. t)
end
if string.byte(redis.call('GET', KEYS[1])) == 32 then
  local s, e = holders(KEYS[2], clock())
  if not s then
    return e
  end
  if s.n == 0 then
    return 0 -- what holds the name is a waiter record, not a lease
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call(ARGV[2], ARGV[1], 'revoked')
return 1
