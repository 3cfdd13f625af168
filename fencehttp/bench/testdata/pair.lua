-- wrk script: acquire+release pairs on `fence serve`, each name released before it
-- is acquired again. Every request is a lock request: an acquire of a free name
-- (ttl 30s), or the release of a lease an earlier answer granted.
--
--   wrk -t2 -c16 -d10s -s pair.lua http://127.0.0.1:PORT
--
-- Answers other than 200 are counted by wrk as errors ("Non-2xx").
local free, leases, n = {}, {}, 0
local hdrs = { ["Content-Type"] = "application/json" }
local threads = 0
math.randomseed(os.time())
local run = math.random(1, 1e9) -- names of an earlier run may still be held

-- setup runs in the main state: each thread gets its own id, so no two threads
-- (nor two runs) ever use the same name.
setup = function(thread)
  threads = threads + 1
  thread:set("tid", run .. "-" .. threads)
end

request = function()
  local l = table.remove(leases)
  if l then
    return wrk.format("POST", "/v1/locks/" .. l[1] .. "/release", hdrs, '{"lease":"' .. l[2] .. '"}')
  end
  local name = table.remove(free)
  if not name then
    n = n + 1
    name = "wrk-" .. tostring(tid) .. "-" .. n
  end
  return wrk.format("POST", "/v1/locks/" .. name .. "/acquire", hdrs, '{"ttl_ms":30000}')
end

response = function(status, headers, body)
  local name = body:match('"name":"([^"]+)"')
  local lease = body:match('"lease":"([^"]+)"')
  if status == 200 and name and lease then
    table.insert(leases, { name, lease })
  elseif name then
    table.insert(free, name)
  end
end
