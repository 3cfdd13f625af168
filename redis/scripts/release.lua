-- release: delete the lock only if it holds this lease id, then wake waiters.
-- KEYS[1] lock key; ARGV[1] lease id, ARGV[2] wake channel (same hash tag),
-- ARGV[3] 'SPUBLISH' (sharded pub/sub) or 'PUBLISH'. Returns 1 if released, 0 if not held
-- (also when the key holds another type: that is not our lease, and it is left alone).
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0
end
local p = ARGV[1] .. ' '
if string.sub(v, 1, string.len(p)) ~= p then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[3], ARGV[2], 'released')
return 1
