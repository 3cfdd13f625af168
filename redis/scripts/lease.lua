-- lease: renew or release a lease, only if it is held under this lease id (run
-- after holders.lua).
-- KEYS[1] lock key, KEYS[2] holders key; ARGV[1] lease id; then either
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
-- A semaphore or shared lease, in the holders hash.
local e = redis.pcall('HGET', KEYS[2], ARGV[1])
if type(e) ~= 'string' then
  return 0
end
local now = clock()
local exp, rest = string.match(e, '^(%d+)( .*)$')
if not exp or tonumber(exp) <= now then
  return 0
end
if ARGV[2] == 'renew' then
  local until_ = now + tonumber(ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', until_) .. rest)
  if until_ > now + redis.call('PTTL', KEYS[1]) then
    extend(KEYS[1], KEYS[2], until_)
  end
  return 1
end
redis.call('HDEL', KEYS[2], ARGV[1])
local s = holders(KEYS[2], now)
prune(KEYS[2], s)
mark(KEYS[1], KEYS[2], s, now, s.top, s.latest)
redis.call(ARGV[4], ARGV[3], 'released')
return 1
