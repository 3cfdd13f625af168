-- holders: prepended to the scripts that handle semaphore and shared leases
-- (acquire, lease, inspect, revoke), so that they read the holders hash alike.
--
-- While semaphore or shared leases may be live, the lock key holds ' <token>': no
-- lease's value (a lease id has no spaces), with the highest live token last and
-- an expiry (PEXPIREAT) no earlier than any live lease's or the waiter record's
-- (the holders hash expires with it),
-- so a lock acquire (of any version) that finds the key finds the name held, and
-- one that does not find it has no live lease to respect. The leases are in the
-- holders hash (same hash tag), which means nothing while the lock key is not
-- such a marker:
--
--   '<lease id>'  '<expires ms> <slot> <token>', then ' <owner>' if it has one;
--                 expires is by the server's clock (TIME), the lease is live
--                 while TIME in ms is below it
--   ' limit'      the live leases' semaphore limit; '0' for shared leases
--   ' waiter'     until when (ms) an exclusive acquire that waits for shared
--                 holders holds off new shared acquires (writer preference)
--
-- Field names starting with a space are never lease ids.

-- clock returns the server's time in ms.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- holders reads the holders hash at key as of now: the live leases (n of them,
-- with id, exp, slot, tok, owner), the fields of expired ones, the limit and the
-- waiter record (0 if none), and the soonest and latest expiry and the highest
-- token of the live leases. It returns nil and an error reply if key holds
-- another type.
local function holders(key, now)
  local all = redis.pcall('HGETALL', key)
  if all.err then
    return nil, redis.error_reply('FENCE_WRONGTYPE holders key ' .. key .. ' holds a value that is not a hash')
  end
  local s = {live = {}, n = 0, expired = {}, limit = 0, waiter = 0, soonest = 0, latest = 0, top = 0}
  for i = 1, #all, 2 do
    local f, val = all[i], all[i + 1]
    if f == ' limit' then
      s.limit = tonumber(val) or 0
    elseif f == ' waiter' then
      s.waiter = tonumber(val) or 0
    else
      local exp, slot, tok, owner = string.match(val, '^(%d+) (%d+) (%d+) ?(.*)$')
      exp = tonumber(exp)
      if exp and exp > now then
        local h = {id = f, exp = exp, slot = tonumber(slot), tok = tonumber(tok), owner = owner}
        s.n = s.n + 1
        s.live[s.n] = h
        if s.soonest == 0 or exp < s.soonest then s.soonest = exp end
        if exp > s.latest then s.latest = exp end
        if h.tok > s.top then s.top = h.tok end
      else
        s.expired[#s.expired + 1] = f
      end
    end
  end
  return s
end

-- prune deletes the fields of s's expired leases, so the hash stays as small as
-- the live leases.
local function prune(key, s)
  for i = 1, #s.expired, 100 do
    redis.call('HDEL', key, unpack(s.expired, i, math.min(i + 99, #s.expired)))
  end
end

-- extend makes the lock key and the holders hash expire at until_ (ms).
local function extend(lockKey, holdersKey, until_)
  local at = string.format('%d', until_)
  redis.call('PEXPIREAT', lockKey, at)
  redis.call('PEXPIREAT', holdersKey, at)
end

-- mark sets the lock key to the marker of the live leases (highest token top,
-- latest expiry latest), expiring no earlier than each of them and s's waiter
-- record. With none live (top 0) it deletes the lock key and the holders hash,
-- unless the waiter record holds the name: the marker then keeps its value and
-- expires with the record.
local function mark(lockKey, holdersKey, s, now, top, latest)
  if top == 0 then
    if s.waiter <= now then
      redis.call('DEL', lockKey, holdersKey)
    else
      extend(lockKey, holdersKey, s.waiter)
    end
    return
  end
  local until_ = math.max(latest, s.waiter)
  redis.call('SET', lockKey, ' ' .. string.format('%d', top))
  extend(lockKey, holdersKey, until_)
end
