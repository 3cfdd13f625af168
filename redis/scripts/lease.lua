-- lease: renew or release a lease, only if it is held under this lease id. A
-- lock's is decided here; a semaphore's or a shared lease's by lease_multi.lua,
-- which follows holders.lua, which follows this (so a lock pays for neither).
-- KEYS[1] lock key, KEYS[2] holders, KEYS[3] expiry, KEYS[4] slots; ARGV[1]
-- lease id; then either
--   'renew', ttl in ms: extend the lease to ttl from now;
--   'release', wake channel (same hash tag), 'SPUBLISH' (sharded pub/sub) or 'PUBLISH':
--   end the lease, then wake waiters.
-- Returns 1 if renewed or released, 0 if not held (also when the key holds another
-- type: that is not our lease, and it is left alone).
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0
end
local p = ARGV[1] .. ' '
if string.sub(v, 1, string.len(p)) == p then
  -- A lock.
  if ARGV[2] == 'renew' then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  else
    redis.call('DEL', KEYS[1])
    redis.call(ARGV[4], ARGV[3], 'released')
  end
  return 1
end
if string.byte(v) ~= 32 then
  return 0
end
-- v is the marker of semaphore or shared leases: lease_multi.lua goes on.
