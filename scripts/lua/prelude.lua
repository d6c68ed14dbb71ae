-- prelude.lua: shared helpers of the check script.  The build concatenates
-- prelude.lua, intmath.lua, one module per algorithm, then check.lua into one
-- script (src/lua_scripts.c, generated).  Times are integers of microseconds
-- held in Lua numbers (exact below 2^53); results are integers of
-- milliseconds.
--
-- The algorithm interface, algo(tag) = { peek, commit }, with W the window
-- in microseconds (the driver converts once per policy, not per check):
--   peek(key, now, limit, W, burst, cost, pre)
--     -> ok, remaining, reset_ms, retry_after_ms, repair, s1, ..., s5
--     pre: the key's value when the driver read it already (false: no
--     key), nil to read it here.  Reads only: the answer as things stand; repair, the TTL (us) the key
--     needs if it was found without one (nil when there is no key); s1..s5,
--     what commit needs of the state read.
--   commit(key, now, limit, W, burst, cost, s1, ..., s5) -> remaining, reset_ms
--     consumes cost (> 0) whether peek allowed it or not (a forced check),
--     sets the key's TTL and answers the numbers after it (allowed and
--     retry_after_ms stay what peek decided).
--   give(key, now, limit, W, burst, units, s1, ..., s5)   (built on request)
--     gives `units` (> 0) back (a reward; see README "Giving back"), from
--     the state a peek of cost 0 read (s1..s5), and sets the TTL; a state
--     left worth nothing is deleted (no key is the empty state).
--   plain(sp, now, cost, out, o, k, b, s, c) -> o, k, b
--     (optional: a constructor's fourth value) the plain checks (cost >= 0,
--     no flag) of a spec of this one limit from the one at ARGV[b] on, while
--     they have its spec s and cost c, answered into out as check.lua's
--     run_plain answers them from peek and commit, in one call.
--   one(sp, key, bkey, now, cost) -> allowed, remaining, reset_ms,
--     retry_after_ms   (optional, with plain: a constructor's fifth value)
--     one plain check, key and block key given, as check.lua's plain1
--     answers it: what a call of one check takes (plain's loop and table
--     cost such a call ~2k instructions more).
-- Multiple results rather than a table: a table per limit per check costs
-- about what a redis.call does (docs/BENCHMARKS.md, "Measurements behind the
-- code").
-- The driver calls repair_ttl(key, repair) itself when no commit follows,
-- so that an allowed check does not pay for a PTTL its commit makes moot
-- (the O(1) algorithms write value and TTL in one SET ... PX).
--
-- Redis runs this whole script on every EVALSHA (and since 7.0 a script
-- cannot keep anything in globals between calls), so every function the
-- modules define is built again on every call, and every local a function
-- captures costs a walk of Lua's open upvalues as it is built: together a
-- large part of a one-check call (docs/BENCHMARKS.md).  Hence a module file
-- registers a
-- constructor in MODULES, and algo() builds a module the first time a call
-- names its tag: a call pays for the modules it uses only.  A constructor
-- takes the library functions it needs into its own locals (built once per
-- call), and the functions at the top level capture as little as they can.
--
-- Numbers are written with '%d' (a C long: every value here is an integer
-- below 2^53), never '%.0f', which costs glibc more; a TTL goes
-- to redis.call as such a string too, or Redis would print it with '%.17g'.

-- floor(x) for a number x is x - x % 1: Lua 5.1 computes % in the VM
-- (x - floor(x / 1) * 1 with C's floor), exactly (x - floor(x) is exact for
-- |x| < 2^52, and 0 for any larger double, an integer already), without
-- the C function call math.floor costs (docs/BENCHMARKS.md); the hot paths
-- use it, math.floor stays where a call is rare.
local floor = math.floor

local MODULES, ALGOS = {}, {}
-- true while the driver commits a reservation (a 'd' check that fits
-- within max_delay): token_bucket and gcra then carry the debt it leaves
-- past their 2 x burst bound (algo.h, reserve)
local reserving = false
-- true while the driver commits a charge ('c'): token_bucket and gcra then
-- carry the whole debt, bounded only by owed_max below, and the sliding log
-- keeps every unit (check.lua, charge)
local charging = false
-- The most units a counter or a debt may hold, 2^51: every count, sum and
-- product of the algorithms stays exact in a double (intmath.lua's divisors
-- up to it), and 2.25 x the largest limit or cost (1e15).  A charge past it
-- is held at it (algo.h, ALGO_UNITS_MAX).
local UNITS_MAX = 2251799813685248
-- The most a token_bucket or gcra key may owe after a charge: UNITS_MAX
-- units, and no more than refill pays back in 2^51 us (71 years), so that
-- the time of any debt (a product of units and the window) stays exact.
-- Mirrors algo_owed_max in src/algo.h.
local function owed_max(limit, W, muldiv)
  -- 2^51 x limit / W >= 2^51 when limit >= W: UNITS_MAX binds
  if limit >= W then return UNITS_MAX end
  local q = muldiv(limit, UNITS_MAX, W)
  return q
end
-- the tags whose peek reads its key itself, not as a string: the driver
-- then reads only the block key, not that key
local OWN_READ = {}
-- the tags of calendar periods: their spec gives boundaries, not a window
-- (period_frame below)
local PERIODIC = {}
-- the module of tag, built on first use in this call; nil if none.  Built
-- without its give, which only an admin call needs (MODULES[tag](true)
-- builds it then): a closure less per call.
local function algo(tag)
  local m = ALGOS[tag]
  if m == nil and MODULES[tag] then
    local peek, commit, _, plain, one = MODULES[tag]()
    m = { peek, commit, tag, plain, one }
    ALGOS[tag] = m
  end
  return m
end

-- microseconds -> milliseconds, rounded up; never negative
local function ceil_ms(us)
  if us <= 0 then return 0 end
  us = (us + 999) / 1000
  return us - us % 1
end

-- A TTL of `us` microseconds as PEXPIRE/PX takes it: whole milliseconds
-- rounded up, at least 1 (a key must go, and 0 is not a TTL).
local function ttl_ms(us)
  if us <= 1000 then return 1 end
  us = (us + 999) / 1000
  return us - us % 1
end

-- State values: the O(1) algorithms keep two or three integers per key as
-- little-endian doubles (struct.pack '<dd' / '<ddd', 16 or 24 bytes; every
-- value is an integer below 2^53, exact in a double).  Reading them is one C
-- call, where the text layout of 0.1 ("5:1700000000000000") cost a find, a
-- sub and a glibc strtod per number, and writing them as much again
-- (docs/BENCHMARKS.md, "Measurements behind the code").  state2(v) and
-- state3(v): the two or three
-- numbers of a value, nothing for a value that is not that many whole
-- numbers in [0, 2^53) (NaN, infinities and fractions are not: a key written
-- by hand, which the modules take as no state).  A value in the text layout
-- of 0.1 ("<a>:<b>[:<c>]", gcra "<a> <b>") is read too, so that windows and
-- buckets carry over an upgrade; no text value is 16 or 24 bytes of whole
-- doubles (an ASCII byte as a double's top byte makes it tiny or huge).
local unpack_state, pack_state = struct.unpack, struct.pack
local function text_state(v)
  local a, b, c = string.match(v, '^(%d+)[: ](%d+):?(%d*)$')
  return tonumber(a), tonumber(b), tonumber(c)
end
local function state2(v)
  if #v == 16 then
    local a, b = unpack_state('<dd', v)
    if a >= 0 and a < 9007199254740992 and a % 1 == 0 and
       b >= 0 and b < 9007199254740992 and b % 1 == 0 then
      return a, b
    end
  end
  local a, b, c = text_state(v)
  if a and b and not c then return a, b end
end
local function state3(v)
  if #v == 24 then
    local a, b, c = unpack_state('<ddd', v)
    if a >= 0 and a < 9007199254740992 and a % 1 == 0 and
       b >= 0 and b < 9007199254740992 and b % 1 == 0 and
       c >= 0 and c < 9007199254740992 and c % 1 == 0 then
      return a, b, c
    end
  end
  local a, b, c = text_state(v)
  if a and b and c then return a, b, c end
end

-- A calendar period's limit (tags 'fwp', 'swcp') gets, for W, the
-- boundaries the daemon computed around its own clock (spec_of reads them):
-- B[1] .. B[6], in us, consecutive period starts with the daemon's time in
-- [B[3], B[4]).  Redis's clock is the one that decides: the period that
-- holds now, one either side of the daemon's, and the start of the one
-- before it and the end of the one after it.  Further off, the two clocks
-- disagree by more than a period: an error, never a guess.
-- Returns p, s, e, e2: the previous period's start, this one's, its end and
-- the next one's end.
local function period_frame(now, B)
  if now >= B[3] then
    if now < B[4] then return B[2], B[3], B[4], B[5] end
    if now < B[5] then return B[3], B[4], B[5], B[6] end
  elseif now >= B[2] then
    return B[1], B[2], B[3], B[4]
  end
  error('CLOCK: Redis TIME ' .. string.format('%d', now) ..
        ' is more than a period from the daemon\'s clock', 0)
end

-- A key found without a TTL is repaired: no key may live forever.
local function repair_ttl(key, us)
  if redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, ttl_ms(us)) end
end
