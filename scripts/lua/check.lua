-- check.lua: decide a batch of checks, each with every limit of its policy,
-- in one atomic call.  The daemon coalesces the checks that arrive in one
-- event-loop pass into one call, so the script's fixed cost (defining the
-- modules above, reading TIME) is paid once per batch, not once per check.
--
-- KEYS     the keys of every check, in order (a check's keys share one
--          Cluster hash tag)
-- ARGV[1]  now in microseconds, or '' to read Redis TIME (the daemon always
--          sends ''; tests drive time explicitly)
-- ARGV[2]  n, the number of checks
-- then per check: nlimits, cost (0 asks without consuming), flags (any of
-- 'f': force, consume the cost even when it does not fit; 'o': once, then
-- the check's seq), then per limit: algorithm tag, limit, window_ms, burst.
-- A 'once' check has one more key after its limits' keys: its writer's last
-- applied seq.  A seq not above it was applied already (a hybrid sync sent
-- again after its connection was lost): the check then only peeks.
--
-- Returns one flat array: per check, allowed (1 or 0), then per limit
-- remaining, reset_ms, retry_after_ms.  A check is allowed only when every
-- limit allows it; a denied check consumes nothing from any limit (unless
-- forced).  Checks run in order, so two checks of one key in a batch see
-- each other exactly as two calls would.

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local out, o = {}, 0
local k, b = 0, 3
-- per limit of the current check, reused from check to check: the module,
-- peek's result, and the arguments converted once for peek and commit
local algos, res, lims, wins, bursts = {}, {}, {}, {}, {}
for _ = 1, tonumber(ARGV[2]) do
  local n, cost, flags = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), ARGV[b + 2]
  local force = flags == 'f' or flags == 'fo'
  local once_key, seq
  local allowed = true
  b = b + 3
  if flags == 'o' or flags == 'fo' then
    once_key, seq = KEYS[k + n + 1], tonumber(ARGV[b])
    b = b + 1
  end
  for i = 1, n do
    local algo = ALGOS[ARGV[b]]
    if algo == nil then return redis.error_reply('unknown algorithm ' .. ARGV[b]) end
    local limit, window_ms, burst = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
                                    tonumber(ARGV[b + 3])
    algos[i], lims[i], wins[i], bursts[i] = algo, limit, window_ms, burst
    local r = algo.peek(KEYS[k + i], now, limit, window_ms, burst, cost)
    res[i] = r
    if not r.ok then allowed = false end
    b = b + 4
  end
  o = o + 1
  if allowed then out[o] = 1 else out[o] = 0 end
  local applied = false
  if once_key then
    local last = redis.call('GET', once_key)
    applied = last and tonumber(last) >= seq
  end
  if (allowed or force) and cost > 0 and not applied then
    for i = 1, n do
      local r = algos[i].commit(KEYS[k + i], now, lims[i], wins[i], bursts[i], cost, res[i])
      out[o + 1], out[o + 2], out[o + 3] = r.remaining, r.reset_ms, r.retry_after_ms
      o = o + 3
    end
    if once_key then
      -- kept as long as the counts it guards
      local ttl = 1000
      for i = 1, n do if wins[i] > ttl then ttl = wins[i] end end
      redis.call('SET', once_key, string.format('%.0f', seq), 'PX', ttl)
    end
  else
    for i = 1, n do
      local r = res[i]
      if r.repair then repair_ttl(KEYS[k + i], r.repair) end
      out[o + 1], out[o + 2], out[o + 3] = r.remaining, r.reset_ms, r.retry_after_ms
      o = o + 3
    end
  end
  k = k + n
  if once_key then k = k + 1 end
end
return out
