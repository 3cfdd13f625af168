-- inspect: the lock's state, read only.
-- KEYS[1] lock key, KEYS[2] counter key.
-- Returns {held (0/1), holder token (0 if unknown), pttl, counter}; counter -1 if it is not a token.
local held, tok, pttl = 0, 0, 0
if redis.call('TYPE', KEYS[1])['ok'] == 'string' then
  local v = redis.call('GET', KEYS[1])
  held = 1
  local t = string.match(v, ' (%d+)$')
  if t and string.len(t) <= 16 then tok = tonumber(t) end
  pttl = redis.call('PTTL', KEYS[1])
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  held = 1
  pttl = redis.call('PTTL', KEYS[1])
end
local n = 0
local ct = redis.call('TYPE', KEYS[2])['ok']
if ct == 'string' then
  local cur = redis.call('GET', KEYS[2])
  if string.len(cur) <= 16 and string.match(cur, '^%d+$') then n = tonumber(cur) else n = -1 end
elseif ct ~= 'none' then
  n = -1
end
return {held, tok, pttl, n}
