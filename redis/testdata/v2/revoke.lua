-- revoke: end the current lease, whatever its lease id, and wake waiters.
-- KEYS[1] lock key; ARGV[1] wake channel (same hash tag), ARGV[2] 'SPUBLISH'
-- (sharded pub/sub) or 'PUBLISH'.
-- Returns 1 if a lease was ended, 0 if none is held (the key is gone: released or
-- expired), or an error reply FENCE_WRONGTYPE when the key holds another type (not a
-- lease: it is left alone, as acquire refuses it).
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
redis.call('DEL', KEYS[1])
redis.call(ARGV[2], ARGV[1], 'revoked')
return 1
