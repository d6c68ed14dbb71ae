-- prelude.lua: shared helpers of the check script.  The build concatenates
-- prelude.lua, intmath.lua, one module per algorithm, then check.lua into one
-- script (src/lua_scripts.c, generated).  Times are integers of microseconds
-- held in Lua numbers (exact below 2^53); results are integers of
-- milliseconds.
--
-- The algorithm interface, ALGOS[tag]:
--   peek(key, now, limit, window_ms, burst, cost) -> r, reads only:
--     r.ok, r.remaining, r.reset_ms, r.retry_after_ms: the answer as things
--     stand; r.repair: the TTL (us) the key needs if it was found without
--     one, nil when there is no key; and what commit needs of the state read.
--   commit(key, now, limit, window_ms, burst, cost, r) -> r, with r from
--     peek: consumes cost (> 0) whether r.ok or not (a forced check), sets
--     the key's TTL, and updates r.remaining and r.reset_ms to the numbers
--     after it (r.ok and r.retry_after_ms stay what peek decided).
-- The driver calls repair_ttl(key, r.repair) itself when no commit follows,
-- so that an allowed check does not pay for a PTTL its commit makes moot
-- (the O(1) algorithms write value and TTL in one SET ... PX).
--
-- Redis runs this whole script on every EVALSHA, so every function the
-- modules define is built again on every call: for all five modules that
-- cost more than a redis.call.  A module file therefore registers a
-- constructor in MODULES, and ALGOS builds a module the first time a call
-- names its tag.

local MODULES = {}
local ALGOS = setmetatable({}, { __index = function(algos, tag)
  local make = MODULES[tag]
  if make == nil then return nil end
  local m = make()
  algos[tag] = m
  return m
end })

-- microseconds -> milliseconds, rounded up; never negative
local function ceil_ms(us)
  if us <= 0 then return 0 end
  return math.floor((us + 999) / 1000)
end

-- A TTL of `us` microseconds as PEXPIRE/PX takes it: whole milliseconds
-- rounded up, at least 1 (a key must go, and 0 is not a TTL).
local function ttl_ms(us)
  if us <= 1000 then return 1 end
  return math.floor((us + 999) / 1000)
end

local function set_ttl(key, us)
  redis.call('PEXPIRE', key, ttl_ms(us))
end

-- A key found without a TTL is repaired: no key may live forever.
local function repair_ttl(key, us)
  if redis.call('PTTL', key) == -1 then set_ttl(key, us) end
end
