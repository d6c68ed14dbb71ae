-- check.lua: decide every limit of one policy in one atomic call.
--
-- KEYS[i]  the key of limit i (all keys share one Cluster hash tag)
-- ARGV[1]  now in microseconds, or '' to read Redis TIME (the daemon always
--          sends ''; tests drive time explicitly)
-- ARGV[2]  cost (0 asks without consuming)
-- ARGV[3 + 4(i-1) ..]  limit i: algorithm tag, limit, window_ms, burst
--
-- Returns { allowed, remaining_1, reset_ms_1, retry_after_ms_1, ... }.
-- The check is allowed only when every limit allows it; a denied check
-- consumes nothing from any limit.

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])

local n = #KEYS
local args, res = {}, {}
local allowed = true
for i = 1, n do
  local b = 3 + (i - 1) * 4
  local a = { algo = ALGOS[ARGV[b]], limit = tonumber(ARGV[b + 1]),
              window_ms = tonumber(ARGV[b + 2]), burst = tonumber(ARGV[b + 3]) }
  if a.algo == nil then return redis.error_reply('unknown algorithm ' .. ARGV[b]) end
  args[i] = a
  res[i] = a.algo.peek(KEYS[i], now, a.limit, a.window_ms, a.burst, cost)
  if not res[i].ok then allowed = false end
end

if allowed and cost > 0 then
  for i = 1, n do
    local a = args[i]
    res[i] = a.algo.commit(KEYS[i], now, a.limit, a.window_ms, a.burst, cost, res[i])
  end
end

local out = { allowed and 1 or 0 }
for i = 1, n do
  out[#out + 1] = res[i].remaining
  out[#out + 1] = res[i].reset_ms
  out[#out + 1] = res[i].retry_after_ms
end
return out
