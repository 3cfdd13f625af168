-- acquire: grant a lease and issue its fencing token in one step (run after
-- holders.lua, which describes how semaphore and shared leases are kept).
-- KEYS[1] lock key, KEYS[2] counter key, KEYS[3] holders, KEYS[4] expiry,
-- KEYS[5] slots (all with the same hash tag, so in the same Cluster slot)
-- ARGV[1] lease id, ARGV[2] ttl in ms, ARGV[3] largest token that may be issued,
-- ARGV[4] owner ('' if none), ARGV[5] wake channel (same hash tag), ARGV[6]
-- 'SPUBLISH' (sharded pub/sub) or 'PUBLISH', ARGV[7] the semaphore limit ('0'
-- for a lock or a shared lease), ARGV[8] '1' for a shared lease, else '0',
-- ARGV[9] for a lock acquire that waits, how long (ms) its waiter record holds
-- off shared acquires if shared leases hold the name ('0' if it does not wait).
-- Returns {1, token} (a lock) or {1, token, slot} when granted; {0, ms} when
-- held, where the lease (or waiter record) whose end may free the name for this
-- acquire is gone ms+1 ms later (the lock key's PTTL for a lock; -1: no expiry),
-- or {0, ms, 1} when this lock acquire recorded itself as a waiting writer;
-- {2, limit} when the live leases have another limit (a lock and shared leases
-- count as 1); or an error reply prefixed FENCE_WRONGTYPE / FENCE_BADCOUNTER /
-- FENCE_EXHAUSTED.
--
-- The lock's fast path is three calls, as it was before semaphores: GET, INCR,
-- SET. pcall turns a WRONGTYPE or not-an-integer error into a value instead of
-- aborting, and an INCR that went out of range is undone before returning: a
-- script is atomic, so no client and no replica sees the intermediate value.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('FENCE_WRONGTYPE lock key ' .. KEYS[1] .. ' holds a value that is not a string')
end
local lock = ARGV[7] == '0' and ARGV[8] == '0'
local multi = v and string.byte(v) == 32 -- the marker of semaphore or shared leases
if v and not multi then
  -- A lock holds the name: a lock or a shared acquire is held, a semaphore's
  -- limit differs.
  if ARGV[7] ~= '0' then
    return {2, 1}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end

local h = {lock = KEYS[1], holders = KEYS[3], expiry = KEYS[4], slots = KEYS[5]}
local now, s = 0, nil
if multi then
  local e
  now = clock()
  s, e = live(h, now)
  if not s then
    return e
  end
  if lock and s.n > 0 then
    if s.limit ~= 0 then
      return {2, s.limit}
    end
    -- Shared leases hold the name: record this waiter, so that new shared
    -- acquires wait behind it, no longer than it waits or its TTL.
    local w = now + tonumber(ARGV[9])
    if w > now and w > s.waiter then
      redis.call('HSET', h.holders, ' waiter', string.format('%d', w))
      if w > now + redis.call('PTTL', KEYS[1]) then
        extend(h, w)
      end
    end
    if w > now then
      return {0, edge(h, false) - now - 1, 1}
    end
    return {0, edge(h, false) - now - 1}
  end
end

local limit = tonumber(ARGV[7])
local slot = 0
if not lock then
  if not multi then
    now = clock()
    s = {n = 0, limit = 0, waiter = 0}
    redis.call('DEL', h.holders, h.expiry, h.slots) -- left by a revoke of a version before them
  elseif s.n > 0 and s.limit ~= limit then
    return {2, math.max(s.limit, 1)}
  end
  if limit > 0 then
    if s.n >= limit then
      return {0, edge(h, true) - now - 1}
    end
    slot = multi and redis.pcall('BITPOS', h.slots, 0) or 0
    if type(slot) ~= 'number' then
      return wrongtype(h.slots)
    end
    if slot < 0 or slot >= limit then
      return redis.error_reply('FENCE_WRONGTYPE slots key ' .. h.slots .. ' disagrees with the expiry key')
    end
  elseif s.waiter > now then
    return {0, s.waiter - now - 1}
  elseif s.n >= 1024 then -- fence.MaxLimit
    return {0, edge(h, true) - now - 1}
  end
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
-- %d, not tostring: Lua 5.1 would print large numbers as 9.007199254741e+15.
local tok = string.format('%d', n)
if lock then
  -- The lock value is '<lease id> <token>', or '<lease id> <owner> <token>' with
  -- an owner: the lease id has no spaces and the token ends the value, so the
  -- owner (which may contain spaces) is what lies between, and older readers,
  -- which match the lease id prefix and the trailing token, read both forms (see
  -- inspect.lua).
  local holder = ARGV[1] .. ' '
  if ARGV[4] ~= '' then
    holder = holder .. ARGV[4] .. ' '
  end
  redis.call('SET', KEYS[1], holder .. tok, 'PX', ARGV[2])
  if multi then
    -- Expired leases, and the waiter record this grant ends.
    redis.call('DEL', h.holders, h.expiry, h.slots)
  end
  -- Tell watchers (waiters skip 'granted': a grant frees nothing). A publish to a
  -- channel nobody listens on is a dictionary lookup, cheaper than asking first.
  redis.call(ARGV[6], ARGV[5], 'granted')
  return {1, n}
end

local entry = slot .. ' ' .. tok
if ARGV[4] ~= '' then
  entry = entry .. ' ' .. ARGV[4]
end
redis.call('HSET', h.holders, ARGV[1], entry, ' limit', ARGV[7])
local exp = now + tonumber(ARGV[2])
redis.call('ZADD', h.expiry, string.format('%d', exp), ARGV[1])
if limit > 0 then
  redis.call('SETBIT', h.slots, slot, 1)
end
mark(h, now, n, exp, not multi)
redis.call(ARGV[6], ARGV[5], 'granted')
return {1, n, slot}
