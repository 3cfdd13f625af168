-- inspect: the lock's state, read only.
-- KEYS[1] lock key, KEYS[2] counter key.
-- Returns {held (0/1), holder token (0 if unknown), pttl, counter, owner}; counter -1
-- if it is not a token, owner '' if none (or not held). The lease id never leaves
-- the script.
--
-- The lock value is '<lease id> <token>' (no owner: also every value written
-- before owners existed) or '<lease id> <owner> <token>' (see acquire.lua): the
-- owner is what lies between the first space and the last.
local held, tok, pttl, owner = 0, 0, 0, ''
if redis.call('TYPE', KEYS[1])['ok'] == 'string' then
  local v = redis.call('GET', KEYS[1])
  held = 1
  local t = string.match(v, ' (%d+)$')
  if t then
    if string.len(t) <= 16 then tok = tonumber(t) end
    local first = string.find(v, ' ', 1, true)
    local last = string.len(v) - string.len(t)
    if last > first then owner = string.sub(v, first + 1, last - 1) end
  end
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
return {held, tok, pttl, n, owner}
