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
-- then per check:
--   spec   its policy's limits, "<tag> <limit> <window_ms> <burst>" each,
--          separated by one space ("fw 100 60000 0 gcra 5 1000 5"): the
--          same bytes for every check of a policy, so the daemon prebuilds
--          them and the script converts them once per call, not per check
--   cost   the cost (0 asks without consuming), then the flags: 'f', force
--          (consume the cost even when it does not fit), 'o', once ("3",
--          "1f", "2o", "2fo")
--   seq    only for a 'once' check: its writer's seq.  Such a check has one
--          more key after its limits' keys, the writer's last applied seq;
--          a seq not above it was applied already (a hybrid sync sent again
--          after its connection was lost): the check then only peeks.
--
-- Returns one flat array: per check, allowed (1 or 0), then per limit
-- remaining, reset_ms, retry_after_ms.  A check is allowed only when every
-- limit allows it; a denied check consumes nothing from any limit (unless
-- forced).  Checks run in order, so two checks of one key in a batch see
-- each other exactly as two calls would.
--
-- Each check succeeds or fails on its own, as separate calls would: one
-- whose command fails (a key of the wrong type, WRONGTYPE) answers an error
-- in place of its `allowed`, then zeros, and the others of the batch are
-- decided as usual.  Every error can only come from peek's reads (the
-- writes are SETs and ZADDs to keys peek read as the right type), so a
-- failed check has written nothing.

-- A spec string -> { per limit peek, commit, limit, W (us), burst; n, the
-- number of limits; ttl, the longest window (ms); err, why it cannot run }.
local function spec_of(s)
  local find, sub = string.find, string.sub
  local sp, n, ttl, at = nil, 0, 1000, 1
  while at <= #s do
    local e1 = find(s, ' ', at, true)
    local e2 = e1 and find(s, ' ', e1 + 1, true)
    local e3 = e2 and find(s, ' ', e2 + 1, true)
    local e4 = e3 and (find(s, ' ', e3 + 1, true) or #s + 1)
    if not e4 then
      sp = sp or {}
      sp.err = 'bad spec ' .. s
      break
    end
    local m = algo(sub(s, at, e1 - 1))
    local l, w, b = tonumber(sub(s, e1 + 1, e2 - 1)), tonumber(sub(s, e2 + 1, e3 - 1)),
                    tonumber(sub(s, e3 + 1, e4 - 1))
    local j = 5 * n
    n, at = n + 1, e4 + 1
    if m == nil then
      sp = sp or {}
      sp.err = 'unknown algorithm in ' .. s
    elseif not (l and w and b) or l < 1 or w < 1 then
      sp = sp or {}
      sp.err = 'bad limit in ' .. s
    elseif sp == nil then
      -- the first limit: the table in one allocation, room for n and ttl
      sp = { m[1], m[2], l, w * 1000, b, n = 1, ttl = 1000 }
      if w > ttl then ttl = w end
    else
      sp[j + 1], sp[j + 2], sp[j + 3], sp[j + 4], sp[j + 5] = m[1], m[2], l, w * 1000, b
      if w > ttl then ttl = w end
    end
  end
  sp = sp or { err = 'empty spec' }
  sp.n, sp.ttl = n, ttl
  return sp
end

-- A cost string -> { cost, force, once; err }.
local function cost_of(s)
  local cf = { tonumber(s), false, false }
  if cf[1] == nil then
    local c, fl = string.match(s, '^(%d+)(%a*)$')
    cf[1], cf[2], cf[3] = tonumber(c) or 0, fl == 'f' or fl == 'fo', fl == 'o' or fl == 'fo'
    if c == nil or not (cf[2] or cf[3]) then cf.err = 'bad cost ' .. s end
  end
  return cf
end

-- 'once': whether the writer's seq was applied already
local function applied(once_key, seq)
  local last = redis.call('GET', once_key)
  return last and tonumber(last) >= tonumber(seq)
end

-- One check of one limit (most checks): allowed (1 or 0), remaining,
-- reset_ms, retry_after_ms.
local function run1(sp, cf, key, once_key, seq, now)
  if sp.err or cf.err then error(sp.err or cf.err) end
  local cost, limit, W, burst = cf[1], sp[3], sp[4], sp[5]
  local ok, rem, reset, retry, repair, a1, a2, a3, a4, a5 = sp[1](key, now, limit, W, burst, cost)
  if (ok or cf[2]) and cost > 0 and not (once_key and applied(once_key, seq)) then
    rem, reset = sp[2](key, now, limit, W, burst, cost, a1, a2, a3, a4, a5)
    -- kept as long as the counts it guards; the seq as the daemon wrote it
    if once_key then redis.call('SET', once_key, seq, 'PX', sp.ttl) end
  elseif repair then
    repair_ttl(key, repair)
  end
  if ok then return 1, rem, reset, retry end
  return 0, rem, reset, retry
end

-- One check of several limits, its keys from KEYS[k + 1], its answer into
-- out[o + 1]...; st holds peek's answers per limit, reused.
local function run(sp, cf, k, once_key, seq, now, out, o, st)
  if sp.err or cf.err then error(sp.err or cf.err) end
  local n, cost = sp.n, cf[1]
  local rems, resets, retries, repairs = st[1], st[2], st[3], st[4]
  local s1, s2, s3, s4, s5 = st[5], st[6], st[7], st[8], st[9]
  local allowed = true
  for i = 1, n do
    local j = 5 * i - 5
    local ok
    ok, rems[i], resets[i], retries[i], repairs[i], s1[i], s2[i], s3[i], s4[i], s5[i] =
      sp[j + 1](KEYS[k + i], now, sp[j + 3], sp[j + 4], sp[j + 5], cost)
    if not ok then allowed = false end
  end
  if allowed then out[o + 1] = 1 else out[o + 1] = 0 end
  if (allowed or cf[2]) and cost > 0 and not (once_key and applied(once_key, seq)) then
    for i = 1, n do
      local j = 5 * i - 5
      out[o + 3 * i - 1], out[o + 3 * i] =
        sp[j + 2](KEYS[k + i], now, sp[j + 3], sp[j + 4], sp[j + 5], cost,
                  s1[i], s2[i], s3[i], s4[i], s5[i])
      out[o + 3 * i + 1] = retries[i]
    end
    if once_key then redis.call('SET', once_key, seq, 'PX', sp.ttl) end
  else
    for i = 1, n do
      local r = repairs[i]
      if r then repair_ttl(KEYS[k + i], r) end
      out[o + 3 * i - 1], out[o + 3 * i], out[o + 3 * i + 1] = rems[i], resets[i], retries[i]
    end
  end
end

-- Specs and costs as read from their strings, kept while the library lives
-- (FCALL): a policy's limits are read once, not on every call (most calls
-- carry one check).  Under EVALSHA the whole script runs per call: they last
-- one call, as before.  Bounded: old policies do not pile up over reloads.
local SPECS, COSTS, NCACHED = {}, {}, 0
local function cached(s, c)
  local sp, cf = SPECS[s], COSTS[c]
  if sp == nil or cf == nil then
    if NCACHED >= 512 then SPECS, COSTS, NCACHED = {}, {}, 0 end
    if sp == nil then sp = spec_of(s); SPECS[s] = sp end
    if cf == nil then cf = cost_of(c); COSTS[c] = cf end
    NCACHED = NCACHED + 1
  end
  return sp, cf
end

-- Everything above only defines; from the next line on is the call.  Under
-- EVALSHA (a server without FUNCTION) Redis runs the whole script on every
-- call.  As a function library (FCALL) the definitions run once per library
-- (at its first call): scripts/embed-lua.sh makes the lines from the marker
-- on the body of the function it calls, after setting KEYS and ARGV (the
-- library's upvalues there, Redis's globals here).  The same Lua on both.
-- @call
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

local nchecks = tonumber(ARGV[2])
-- one check of one limit (coalescing off, or a quiet moment): no tables
if nchecks == 1 then
  local sp, cf = cached(ARGV[3], ARGV[4])
  if sp.n == 1 then
    local once_key, seq
    if cf[3] then once_key, seq = KEYS[2], ARGV[5] end
    local ok, a, r, s, t = pcall(run1, sp, cf, KEYS[1], once_key, seq, now)
    if ok then return { a, r, s, t } end
    if type(a) == 'table' then a = a.err end
    return { { err = tostring(a) }, 0, 0, 0 }
  end
end

local out, st = {}, nil
local o, k, b = 0, 0, 3
for _ = 1, nchecks do
  local sp, cf = cached(ARGV[b], ARGV[b + 1])
  local n, once_key, seq = sp.n, nil, nil
  b = b + 2
  if cf[3] then
    once_key, seq = KEYS[k + n + 1], ARGV[b]
    b = b + 1
  end
  local ok, err, x2, x3, x4
  if n == 1 then
    ok, err, x2, x3, x4 = pcall(run1, sp, cf, KEYS[k + 1], once_key, seq, now)
    if ok then out[o + 1], out[o + 2], out[o + 3], out[o + 4] = err, x2, x3, x4 end
  else
    if st == nil then st = { {}, {}, {}, {}, {}, {}, {}, {}, {} } end
    ok, err = pcall(run, sp, cf, k, once_key, seq, now, out, o, st)
  end
  if not ok then
    -- redis.call raises a table { err = "WRONGTYPE ..." }, Lua a string
    if type(err) == 'table' then err = err.err end
    out[o + 1] = { err = tostring(err) }
    for i = o + 2, o + 1 + 3 * n do out[i] = 0 end
  end
  o = o + 1 + 3 * n
  k = k + n
  if once_key then k = k + 1 end
end
return out
