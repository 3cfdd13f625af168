-- revoke: end the current lease, or every live semaphore or shared lease, whatever
-- their lease ids, and wake waiters (run after holders.lua).
-- KEYS[1] lock key, KEYS[2] holders, KEYS[3] expiry, KEYS[4] slots; ARGV[1] wake
-- channel (same hash tag), ARGV[2] 'SPUBLISH' (sharded pub/sub) or 'PUBLISH'.
-- Returns 1 if a lease was ended, 0 if none is held (the key is gone: released or
-- expired; or no semaphore or shared lease is live), or an error reply
-- FENCE_WRONGTYPE when the lock key holds another type (not a lease: it is left
-- alone, as acquire refuses it).
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
  local n = redis.pcall('ZCOUNT', KEYS[3], '(' .. string.format('%d', clock()), '+inf')
  if type(n) ~= 'number' then
    return redis.error_reply('FENCE_WRONGTYPE key ' .. KEYS[3] .. ' holds a value fence did not write')
  end
  if n == 0 then
    return 0 -- what holds the name is a waiter record, or leases that just expired
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
redis.call(ARGV[2], ARGV[1], 'revoked')
return 1
