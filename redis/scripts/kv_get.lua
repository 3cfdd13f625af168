-- kv_get: read redis.KV's record of a key.
-- KEYS[1] the key's record (see kv_put.lua).
-- Returns {0} if the key was never written or fenced, {1, name, token, lease, 1, value}
-- for a written key, {1, name, token, lease, 0, ''} for a key only fenced, or an error
-- reply FENCE_WRONGTYPE when the key holds something kv_put did not write.
-- (A script, not HMGET, so the type check and the read are one step.)
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then
  return {0}
end
if t ~= 'hash' then
  return redis.error_reply('FENCE_WRONGTYPE record key ' .. KEYS[1] .. ' holds a ' .. t)
end
local r = redis.call('HMGET', KEYS[1], 'name', 'token', 'lease', 'value')
if not r[1] or not r[2] or not r[3] then
  return redis.error_reply('FENCE_WRONGTYPE record key ' .. KEYS[1] .. ' holds a hash that is not a fenced record')
end
if r[4] then
  return {1, r[1], r[2], r[3], 1, r[4]}
end
return {1, r[1], r[2], r[3], 0, ''}
