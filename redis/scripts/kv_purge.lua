-- kv_purge: KV.Purge, the record's value and fence deleted.
-- KEYS[1] the key's record.
-- Returns 1 when a record was deleted, 0 when there was none, or an error reply
-- FENCE_WRONGTYPE when the key holds something this package did not write (it is
-- left alone).
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then
  return 0
end
if t ~= 'hash' or redis.call('HEXISTS', KEYS[1], 'token') == 0 then
  return redis.error_reply('FENCE_WRONGTYPE record key ' .. KEYS[1] .. ' holds a ' .. t .. ' that is not a fenced record')
end
redis.call('DEL', KEYS[1])
return 1
