-- lease: renew or release the lock, only if it holds this lease id.
-- KEYS[1] lock key; ARGV[1] lease id; then either
--   'renew', ttl in ms: extend the lease to ttl from now;
--   'release', wake channel (same hash tag), 'SPUBLISH' (sharded pub/sub) or 'PUBLISH':
--   delete the lock, then wake waiters.
-- Returns 1 if renewed or released, 0 if not held (also when the key holds another
-- type: that is not our lease, and it is left alone).
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0
end
local p = ARGV[1] .. ' '
if string.sub(v, 1, string.len(p)) ~= p then
  return 0
end
if ARGV[2] == 'renew' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[4], ARGV[3], 'released')
end
return 1
