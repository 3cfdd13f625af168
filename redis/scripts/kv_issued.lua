-- kv_issued: P9's check alone (after issued.lua), for a KV whose record key and
-- the lock name's keys may lie in different Cluster slots: it runs on the name's
-- slot before kv_put.lua runs on the record's.
-- KEYS[1] counter, KEYS[2] lock key, KEYS[3] holders (one hash tag);
-- ARGV[1] token (decimal), ARGV[2] lease id ('' if none).
-- Returns {0} when the fence can have been issued, else issued's {3, last, other}
-- or {5} (lease required).
local want = tonumber(ARGV[1])
if not want or not string.match(ARGV[1], '^[1-9]%d*$') or want > 9007199254740991 then
  return redis.error_reply('FENCE_INVALID token ' .. tostring(ARGV[1]) .. ' is not in [1, 2^53-1]')
end
return issued(KEYS[1], KEYS[2], KEYS[3], want, ARGV[2]) or {0}
