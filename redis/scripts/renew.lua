-- renew: extend the lease only if the lock still holds this lease id.
-- KEYS[1] lock key; ARGV[1] lease id, ARGV[2] ttl in ms. Returns 1 if renewed, 0 if not held.
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
  return 0
end
local p = ARGV[1] .. ' '
if string.sub(v, 1, string.len(p)) ~= p then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
