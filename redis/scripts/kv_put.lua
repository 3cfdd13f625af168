-- kv_put: the fenced write of redis.KV, fence.Admit's rule applied in one atomic step.
-- KEYS[1] the key's record: a hash with fields name, token, lease and (once written) value.
-- ARGV[1] lock name, ARGV[2] token (decimal, 1..2^53-1), ARGV[3] lease id ('' if none),
-- ARGV[4] '1' to store ARGV[5] as the value, '0' to advance the fence only (Guard.Fence).
-- Returns {0, token} when admitted and written, {1, highest} when the token is stale
-- (lower, or equal under another or no lease), {2, name} when the record is fenced by
-- another lock name, or an error reply FENCE_WRONGTYPE when the key holds something
-- this script did not write (nothing is changed then).
--
-- Tokens are compared as numbers: below 2^53 they are exact in Lua's doubles. A stored
-- token is checked to be a decimal in range before it is trusted (fail closed).
local MAX = 9007199254740991
local function token(s)
  if type(s) ~= 'string' or string.len(s) > 16 or not string.match(s, '^[1-9]%d*$') then
    return nil
  end
  local n = tonumber(s)
  if n > MAX then
    return nil
  end
  return n
end

local want = token(ARGV[2])
if not want then
  return redis.error_reply('FENCE_INVALID token ' .. tostring(ARGV[2]) .. ' is not in [1, 2^53-1]')
end
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'hash' then
  local cur = redis.call('HMGET', KEYS[1], 'name', 'token', 'lease')
  local name, tok, lease = cur[1], cur[2], cur[3]
  local highest = token(tok)
  if not name or not lease or not highest then
    return redis.error_reply('FENCE_WRONGTYPE record key ' .. KEYS[1] .. ' holds a hash that is not a fenced record')
  end
  if name ~= ARGV[1] then
    return {2, name}
  end
  if want < highest or (want == highest and (ARGV[3] == '' or ARGV[3] ~= lease)) then
    return {1, tok}
  end
elseif t ~= 'none' then
  return redis.error_reply('FENCE_WRONGTYPE record key ' .. KEYS[1] .. ' holds a ' .. t)
end
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'token', ARGV[2], 'lease', ARGV[3], 'value', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'token', ARGV[2], 'lease', ARGV[3])
end
return {0, ARGV[2]}
