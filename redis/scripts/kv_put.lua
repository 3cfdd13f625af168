-- kv_put: the fenced write of redis.KV, fence.Admit's rule applied in one atomic step
-- (after issued.lua).
-- KEYS[1] the key's record: a hash with fields name, token, lease and (once written) value;
-- with P9's check in the script, KEYS[2] the lock name's counter, KEYS[3] its lock key
-- and KEYS[4] its holders (see issued.lua).
-- ARGV[1] lock name, ARGV[2] token (decimal, 1..2^53-1), ARGV[3] lease id ('' if none),
-- ARGV[4] '1' to store ARGV[5] as the value, '0' to advance the fence only (Guard.Fence),
-- '2' to delete the value and keep the fence (KV.Delete), ARGV[6] the write's attempt
-- id ('' if none; see the write-attempts section below).
-- Returns {0, token} when admitted and written, {1, highest} when the token is stale
-- (lower, or equal under another or no lease), {2, name} when the record is fenced by
-- another lock name, issued's {3, last, other} when the fence was never issued and
-- {5} when its token is a live lease's and it has no lease id, {4} when a delete
-- finds no value, or an error reply FENCE_WRONGTYPE when a key holds
-- something this package did not write (nothing is changed but for {0, token}).
--
-- The record also keeps, in field attempts, the attempt ids of the writes applied under
-- its fence, space-separated, oldest first (fence.RememberAttempt).
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

-- Write attempts (P3): a write whose attempt id (ARGV[6]) the record remembers under the
-- very fence it carries is the write already applied: answered as admitted, nothing
-- written. Tokens are canonical decimals (token() above), so equal strings are equal
-- tokens.
local MAX_ATTEMPTS = 32
local function replayed(name, tok, lease)
  local id = ARGV[6] or ''
  if id == '' or name ~= ARGV[1] or tok ~= ARGV[2] or lease ~= ARGV[3] then
    return false
  end
  local ids = redis.call('HGET', KEYS[1], 'attempts')
  return ids ~= false and ids ~= nil and string.find(' ' .. ids .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end
-- remember returns the attempts field after this write: the record's ids if its fence
-- is the write's (same), none otherwise, then the write's id, the newest MAX_ATTEMPTS.
local function remember(same)
  local ids = {}
  if same then
    local cur = redis.call('HGET', KEYS[1], 'attempts')
    if cur then
      for a in string.gmatch(cur, '%S+') do
        ids[#ids + 1] = a
      end
    end
  end
  local id = ARGV[6] or ''
  if id ~= '' then
    ids[#ids + 1] = id
  end
  local from = math.max(1, #ids - MAX_ATTEMPTS + 1)
  return table.concat(ids, ' ', from, #ids)
end

local want = token(ARGV[2])
if not want then
  return redis.error_reply('FENCE_INVALID token ' .. tostring(ARGV[2]) .. ' is not in [1, 2^53-1]')
end
if #KEYS == 4 then
  local r = issued(KEYS[2], KEYS[3], KEYS[4], want, ARGV[3])
  if r then
    return r
  end
end
local t = redis.call('TYPE', KEYS[1])['ok']
local name, tok, lease
if t == 'hash' then
  local cur = redis.call('HMGET', KEYS[1], 'name', 'token', 'lease')
  name, tok, lease = cur[1], cur[2], cur[3]
  local highest = token(tok)
  if not name or not lease or not highest then
    return redis.error_reply('FENCE_WRONGTYPE record key ' .. KEYS[1] .. ' holds a hash that is not a fenced record')
  end
  if name ~= ARGV[1] then
    return {2, name}
  end
  if replayed(name, tok, lease) then
    return {0, ARGV[2]}
  end
  if want < highest or (want == highest and (ARGV[3] == '' or ARGV[3] ~= lease)) then
    return {1, tok}
  end
elseif t ~= 'none' then
  return redis.error_reply('FENCE_WRONGTYPE record key ' .. KEYS[1] .. ' holds a ' .. t)
end
local attempts = remember(t == 'hash' and name == ARGV[1] and tok == ARGV[2] and lease == ARGV[3])
if ARGV[4] == '2' then
  if t ~= 'hash' or redis.call('HEXISTS', KEYS[1], 'value') == 0 then
    return {4}
  end
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'token', ARGV[2], 'lease', ARGV[3])
  redis.call('HDEL', KEYS[1], 'value')
elseif ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'token', ARGV[2], 'lease', ARGV[3], 'value', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'token', ARGV[2], 'lease', ARGV[3])
end
if attempts == '' then
  redis.call('HDEL', KEYS[1], 'attempts')
else
  redis.call('HSET', KEYS[1], 'attempts', attempts)
end
return {0, ARGV[2]}
