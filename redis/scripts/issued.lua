-- issued: prepended to kv_put.lua and kv_issued.lua. P9's check of a fence against
-- what the Locker of the same prefix issued for the fence's lock name, read from the
-- name's keys (which share its hash tag, see keys.go):
--
--   counter  the name's fencing counter: the last token issued (or healed past)
--   lock     the lock key: '<lease id> [<owner> ]<token>' while a lock is held,
--            ' <token>' while semaphore or shared leases are (see holders.lua)
--   holders  those leases: '<lease id>' -> '<slot> <token>[ <owner>]'
--
-- issued(counter, lock, holders, want, lease) returns nil when the token want
-- (a number) can have been issued to the lease id lease ('' if none), and
-- otherwise {3, last, other}: last the counter (decimal, '0' if the name has no
-- counter: never granted) and other 1 when want is at most last but a lease of the
-- name that holds the key with token want has another id (0 otherwise); or {5}
-- when lease is '' and a lease of the name holds token want (lease required:
-- stored without a lease, the fence would refuse that lease's own writes). An
-- error reply FENCE_WRONGTYPE for a counter this package did not write.
--
-- A lease's record tells which lease a token was issued to only while the key
-- holding it lives (until the lease is released or expires): a token whose lease
-- ended is admitted with any lease id, or none. A semaphore or shared lease's
-- record may outlive its expiry until the next change of the name drops it: it
-- is refused without a lease id that much longer, never shorter.
local function issued(counter, lock, holders, want, lease)
  local c = redis.pcall('GET', counter)
  if type(c) == 'table' then
    return redis.error_reply('FENCE_WRONGTYPE counter key ' .. counter .. ' holds a value that is not a string')
  end
  local last = 0
  if c then
    if string.len(c) > 16 or not string.match(c, '^%d+$') then
      return redis.error_reply('FENCE_WRONGTYPE counter key ' .. counter .. ' holds ' .. c .. ', not a token')
    end
    last = tonumber(c)
  end
  if last == 0 or want > last then
    return {3, string.format('%d', last), 0}
  end
  local v = redis.pcall('GET', lock)
  if type(v) ~= 'string' then
    return nil
  end
  -- refused is the reply for a fence whose token a lease of another id (or,
  -- without a lease id, any lease) holds.
  local refused = {3, string.format('%d', last), 1}
  if lease == '' then
    refused = {5}
  end
  if string.byte(v) ~= 32 then
    local id = string.match(v, '^(%S+) ')
    if tonumber(string.match(v, ' (%d+)$')) == want and id ~= lease then
      return refused
    end
    return nil
  end
  local function token(e)
    return type(e) == 'string' and tonumber(string.match(e, '^%d+ (%d+)'))
  end
  if lease ~= '' and token(redis.pcall('HGET', holders, lease)) == want then
    return nil
  end
  local all = redis.pcall('HGETALL', holders) -- at most fence.MaxLimit leases
  if type(all) ~= 'table' or all.err then
    return nil
  end
  for i = 1, #all, 2 do
    if string.byte(all[i]) ~= 32 and token(all[i + 1]) == want then
      return refused
    end
  end
  return nil
end
