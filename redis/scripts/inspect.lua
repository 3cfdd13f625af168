-- inspect: the name's state, read only (run after holders.lua).
-- KEYS[1] lock key, KEYS[2] counter key, KEYS[3] holders, KEYS[4] expiry.
-- Returns {held (0/1), holder token (0 if unknown), pttl, counter, owner, limit,
-- shared (0/1), then slot, token, ms left, owner of each live semaphore or shared
-- lease}; counter -1 if it is not a token, owner '' if none (or not held), limit
-- 0 and shared 0 for a lock. For semaphore and shared leases, held, token, pttl
-- and owner are 0 or '': the caller derives them from the leases. The lease ids
-- never leave the script.
--
-- A lock value is '<lease id> <token>' (no owner: also every value written
-- before owners existed) or '<lease id> <owner> <token>' (see acquire.lua): the
-- owner is what lies between the first space and the last.
local n = 0
local ct = redis.call('TYPE', KEYS[2])['ok']
if ct == 'string' then
  local cur = redis.call('GET', KEYS[2])
  if string.len(cur) <= 16 and string.match(cur, '^%d+$') then n = tonumber(cur) else n = -1 end
elseif ct ~= 'none' then
  n = -1
end
local held, tok, pttl, owner = 0, 0, 0, ''
if redis.call('TYPE', KEYS[1])['ok'] == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.byte(v) == 32 then
    local now = clock()
    local ids = redis.pcall('ZRANGEBYSCORE', KEYS[4], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
    local meta = redis.pcall('HGET', KEYS[3], ' limit')
    if ids.err or type(meta) == 'table' then
      return wrongtype(KEYS[3])
    end
    local out = {0, 0, 0, n, '', 0, 0}
    if #ids > 0 then
      if (tonumber(meta) or 0) > 0 then out[6] = tonumber(meta) else out[7] = 1 end
    end
    for i = 1, #ids, 200 do
      local batch = {}
      for j = i, math.min(i + 199, #ids), 2 do batch[#batch + 1] = ids[j] end
      local es = redis.call('HMGET', KEYS[3], unpack(batch))
      for j, e in ipairs(es) do
        local slot, t, o = string.match(e or '', '^(%d+) (%d+) ?(.*)$')
        if slot then
          out[#out + 1] = tonumber(slot)
          out[#out + 1] = tonumber(t)
          out[#out + 1] = tonumber(ids[i + 2 * j - 1]) - now
          out[#out + 1] = o
        end
      end
    end
    return out
  end
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
return {held, tok, pttl, n, owner, 0, 0}
