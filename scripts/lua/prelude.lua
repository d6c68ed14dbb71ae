-- prelude.lua: shared helpers of the check script.  The build concatenates
-- prelude.lua, one module per algorithm, then check.lua into one script
-- (src/lua_scripts.c, generated).  Times are integers of microseconds held in
-- Lua numbers (exact below 2^53); results are integers of milliseconds.

local ALGOS = {}

-- microseconds -> milliseconds, rounded up; never negative
local function ceil_ms(us)
  if us <= 0 then return 0 end
  return math.floor((us + 999) / 1000)
end

-- Give `key` a TTL of `us` microseconds (at least 1 ms).
local function set_ttl(key, us)
  local ms = ceil_ms(us)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', key, ms)
end

-- A key found without a TTL is repaired: no key may live forever.
local function repair_ttl(key, us)
  if redis.call('PTTL', key) == -1 then set_ttl(key, us) end
end
