-- lease_multi: the rest of lease.lua, after holders.lua: the lock key (v, read
-- by lease.lua) holds the marker of semaphore or shared leases.
-- A semaphore or shared lease, if live.
local h = {lock = KEYS[1], holders = KEYS[2], expiry = KEYS[3], slots = KEYS[4]}
local exp = redis.pcall('ZSCORE', h.expiry, ARGV[1])
local now = clock()
if type(exp) ~= 'string' or tonumber(exp) <= now then
  return 0
end
if ARGV[2] == 'renew' then
  local until_ = now + tonumber(ARGV[3])
  redis.call('ZADD', h.expiry, string.format('%d', until_), ARGV[1])
  if until_ > now + redis.call('PTTL', h.lock) then
    extend(h, until_)
  end
  return 1
end
if redis.call('ZCARD', h.expiry) == 1 and (tonumber(redis.call('HGET', h.holders, ' waiter')) or 0) <= now then
  -- The last lease (the one member is ours, live), and no waiter record:
  -- nothing of the name is left.
  redis.call('DEL', h.lock, h.holders, h.expiry, h.slots)
  redis.call(ARGV[4], ARGV[3], 'released')
  return 1
end
local s = live(h, now)
if not s then
  return 0 -- foreign data: not our lease
end
if s.limit > 0 then
  local e = redis.call('HGET', h.holders, ARGV[1])
  local slot = e and tonumber(string.match(e, '^(%d+)'))
  if slot then redis.pcall('SETBIT', h.slots, slot, 0) end
end
redis.call('HDEL', h.holders, ARGV[1])
redis.call('ZREM', h.expiry, ARGV[1])
if s.n == 1 then
  extend(h, s.waiter) -- only the waiter record holds the name now
end
redis.call(ARGV[4], ARGV[3], 'released')
return 1
