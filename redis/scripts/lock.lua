-- lock: the acquire of a plain lock (no limit, not shared), acquire.lua's hot
-- path in as few calls and arguments as it takes: INCR, SET NX PX and the
-- publish of the grant. It writes what acquire.lua writes for a lock (see
-- there), so each reads the other's locks, as do the versions before them.
-- KEYS[1] lock key, KEYS[2] counter key (same hash tag)
-- ARGV[1] the lock value up to its token: '<lease id> ', or '<lease id> <owner> '
-- with an owner (built by the client: acquire.lua describes the format), ARGV[2]
-- ttl in ms.
-- The largest token (fence.MaxToken) and the publish command are written in the
-- script (the Locker loads a variant with PUBLISH for Options.ClassicPubSub), and
-- the wake channel is the lock key with ':wake' for ':lock' (see keys.go): each
-- argument a script takes costs Redis more to set up than that.
-- Returns the token (an integer, not acquire.lua's {1, token}: an integer reply
-- costs Redis and the client less than an array) when granted; {0, ms} when a
-- lock holds the name (the lock key's PTTL, as acquire.lua returns it); {3} when
-- acquire.lua must decide:
-- semaphore or shared leases hold the name, the lock key holds another type, or
-- the counter is not a token below the largest. Nothing is changed then.
--
-- The counter is incremented before the lock key is tried (SET NX), which
-- spares the free name a GET: a name found taken undoes the increment (DECR,
-- or DEL of a counter the INCR created). A script is atomic and replicated as
-- one transaction of its effects, so no client, replica or AOF ever sees the
-- increment alone, and the counter never goes down: it is back where it was.
-- The cost moves to a try that finds the name taken (a waiter's): it writes,
-- and replicas and the AOF get that no-op transaction.
local n = redis.pcall('INCR', KEYS[2])
if type(n) ~= 'number' then
  return {3}
end
if n < 1 or n > 9007199254740991 then
  redis.call('DECR', KEYS[2])
  return {3}
end
-- %d, not tostring: Lua 5.1 would print large numbers as 9.007199254741e+15.
-- SET NX leaves a key of any type alone.
if redis.call('SET', KEYS[1], ARGV[1] .. string.format('%d', n), 'NX', 'PX', ARGV[2]) then
  redis.call('SPUBLISH', string.sub(KEYS[1], 1, -5) .. 'wake', 'granted')
  return n
end
if n == 1 then
  redis.call('DEL', KEYS[2]) -- it had no counter (or '0'): leave none
else
  redis.call('DECR', KEYS[2])
end
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or string.byte(v) == 32 then
  return {3}
end
return {0, redis.call('PTTL', KEYS[1])}
