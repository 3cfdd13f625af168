-- release: the release of a lock, lease.lua's hot path in as few calls and
-- arguments as it takes: GET, DEL and the publish that wakes waiters.
-- KEYS[1] lock key; ARGV[1] '<lease id> ' (the lock value's start, as lock.lua
-- and acquire.lua write it).
-- The publish command and the wake channel are as in lock.lua.
-- Returns 1 if released; 0 if not held (also when the key holds another type:
-- that is not our lease, and it is left alone); 3 when lease.lua must decide:
-- the lock key holds the marker of semaphore or shared leases. Nothing is
-- changed then.
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0
end
-- A plain find: the lease id has no spaces, so the prefix names one lease.
if string.find(v, ARGV[1], 1, true) == 1 then
  redis.call('DEL', KEYS[1])
  redis.call('SPUBLISH', string.sub(KEYS[1], 1, -5) .. 'wake', 'released')
  return 1
end
if string.byte(v) == 32 then
  return 3
end
return 0
