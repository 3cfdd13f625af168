-- holders: prepended to the scripts that handle semaphore and shared leases
-- (acquire, lease, inspect, revoke), so that they keep them alike.
--
-- While semaphore or shared leases may be live, the lock key holds ' <token>': no
-- lease's value (a lease id has no spaces), with the token of the first of them
-- last (for the inspect of earlier versions), and an expiry (PEXPIREAT) no
-- earlier than any live lease's or the waiter record's (a release does not
-- bring it forward: it is a bound, not the end of the last lease). So a lock acquire (of any version) that finds the key finds the name
-- held, and one that does not find it has no live lease to respect. The leases
-- are kept in three keys of the same hash tag, which expire with the marker and
-- mean nothing while the lock key is not one:
--
--   holders  a hash: '<lease id>' -> '<slot> <token>', then ' <owner>' if it
--            has one; ' limit' -> the leases' semaphore limit, '0' for shared
--            leases; ' waiter' -> until when (ms) an exclusive acquire that
--            waits for shared holders holds off new shared acquires (writer
--            preference). Field names starting with a space are no lease ids.
--   expiry   a sorted set: lease id scored by its expiry in ms by the server's
--            clock (TIME); a lease is live while TIME in ms is below it
--   slots    a bitmap of the semaphore slots taken (BITPOS finds the lowest free)
--
-- Every operation but inspect costs O(log n) in the n live leases, plus the
-- leases that expired since the last change, which it drops.

-- clock returns the server's time in ms.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function wrongtype(key)
  return redis.error_reply('FENCE_WRONGTYPE key ' .. key .. ' holds a value fence did not write')
end

-- live drops the leases of h (a table of the keys lock, holders, expiry, slots)
-- that expired by now, freeing their slots, and returns the state of the rest:
-- n live leases, their limit (0: shared) and the waiter record (0 if none). It
-- returns nil and an error reply if a key holds foreign data.
local function live(h, now)
  local meta = redis.pcall('HMGET', h.holders, ' limit', ' waiter')
  if meta.err then
    return nil, wrongtype(h.holders)
  end
  local gone = redis.pcall('ZRANGEBYSCORE', h.expiry, '-inf', string.format('%d', now))
  if gone.err then
    return nil, wrongtype(h.expiry)
  end
  local s = {limit = tonumber(meta[1]) or 0, waiter = tonumber(meta[2]) or 0}
  if #gone > 0 then
    for i = 1, #gone, 100 do
      local ids = {unpack(gone, i, math.min(i + 99, #gone))}
      if s.limit > 0 then
        for _, e in ipairs(redis.call('HMGET', h.holders, unpack(ids))) do
          local slot = e and tonumber(string.match(e, '^(%d+)'))
          if slot then redis.pcall('SETBIT', h.slots, slot, 0) end
        end
      end
      redis.call('HDEL', h.holders, unpack(ids))
    end
    redis.call('ZREMRANGEBYSCORE', h.expiry, '-inf', string.format('%d', now))
  end
  s.n = redis.call('ZCARD', h.expiry)
  return s
end

-- edge returns the soonest (first true) or latest expiry of the live leases,
-- once live dropped the expired ones; 0 if none.
local function edge(h, first)
  local i = first and 0 or -1
  return tonumber(redis.call('ZRANGE', h.expiry, i, i, 'WITHSCORES')[2]) or 0
end

-- extend makes the marker and the keys of the leases expire at until_ (ms).
local function extend(h, until_)
  local at = string.format('%d', until_)
  for _, key in ipairs({h.lock, h.holders, h.expiry, h.slots}) do
    redis.call('PEXPIREAT', key, at)
  end
end

-- mark sets the marker after a grant of token top, with that lease's expiry
-- exp: a first lease (first) sets the marker, a later one extends it if exp is
-- later than its expiry.
local function mark(h, now, top, exp, first)
  if first then
    redis.call('SET', h.lock, ' ' .. string.format('%d', top))
  elseif exp <= now + redis.call('PTTL', h.lock) then
    return
  end
  extend(h, exp)
end
