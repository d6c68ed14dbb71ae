-- sliding_window_log: the exact log of the allowed checks.  A sorted set with
-- one member per allowed check: score = its time (us), member = cum, cost,
-- where cum is the running total of units logged in this key up to and
-- including this check.  The running total makes members unique (even for
-- many checks in one microsecond) and makes the window's count one
-- subtraction, newest cum - (oldest cum - oldest cost), instead of a sum over
-- every member.  A member is cum and cost as big-endian doubles (16 bytes,
-- struct.pack '>dd'): members sharing a score sort by their bytes, and the
-- bytes of non-negative big-endian doubles sort as their values, keeping
-- index order = time order = cum order; reading one is a C call where the
-- text of 0.1 ("<cum, 16 digits>:<cost>", still read) cost a match and two
-- glibc strtods, twice per check (docs/BENCHMARKS.md).
--
-- Memory stays bounded by `limit` live members.  An allowed check cannot pass
-- it (every member holds at least one unit), but a forced one can (a hybrid
-- sync reporting counts admitted elsewhere): it keeps only the newest `limit`
-- live members.  The units of the members it forgets stop counting early;
-- that is the price of the bound, paid only when a key is already over its
-- limit.
--
-- A charge ('c', check.lua) is one member of its weight whatever its cost,
-- and forgets nothing: the window holds every unit charged, so the
-- overdraft (units past the limit) ends exactly as its members leave.  To
-- keep the bound of `limit` live members, a charge into a log already at
-- or over its limit (n >= limit: no check can log a member until it is
-- under again) joins the newest member, which moves to the charge's time:
-- exact in units, those newest units held that much longer at most.  Live
-- units stay below UNITS_MAX (prelude.lua), a charge past it is cut there.
--
-- Work per check is bounded too (issue 24): a check drops at most
-- SWL_DROP_MAX of the members that have left the window, the oldest first;
-- the rest go with the next checks (each logs one member and drops up to
-- SWL_DROP_MAX) or with the key's TTL.  Dropping them all in one call took
-- 114-123 ms for 250k members, 410 ms for 1M, and stalled every other
-- check of every daemon meanwhile.  Members left behind are never read as
-- live (a check counts from the first member inside the window, found by
-- rank), and cum goes on from the newest member whether or not it is live,
-- so index order = time order = cum order holds for them too.  The live
-- members stay at most `limit`, the whole key at most `limit` plus what a
-- burst of expiry left, shrinking by SWL_DROP_MAX - 1 a check.
-- Mirrors src/algo_sliding_window_log.c (whose in-process ring drops every
-- expired entry at once: same numbers, no shared server to stall).

OWN_READ['swl'] = true
MODULES['swl'] = function(with_give)
  local call, format = redis.call, string.format
  -- now - W as ZCOUNT's inclusive bound (gone), and now and the TTL of an
  -- entry logged now (now): the same for every check of a policy in a
  -- call, so formatted once (a format costs half a small command), and
  -- each only when needed (a new key's check logs an entry but reads and
  -- drops nothing)
  local g_now, g_W, s_gone, n_now, n_W, s_now, s_ttl
  local function strs_gone(now, W)
    if now ~= g_now or W ~= g_W then
      g_now, g_W = now, W
      s_gone = format('%d', now - W)
    end
  end
  local function strs_now(now, W)
    if now ~= n_now or W ~= n_W then
      n_now, n_W = now, W
      s_now, s_ttl = format('%d', now), format('%d', ttl_ms(W))
    end
  end

  local function set_ttl(key, us)
    call('PEXPIRE', key, format('%d', ttl_ms(us)))
  end
  -- cum restarts whenever the key empties; a key that never empties is
  -- rebased before cum could leave the range where doubles are exact.
  local SWL_CUM_MAX = 4503599627370496 -- 2^52
  -- expired members dropped per check at most: ~0.5 us of Redis each
  local SWL_DROP_MAX = 1000

  local function swl_member(cum, cost)
    return pack_state('>dd', cum, cost)
  end

  local function swl_parse(m)
    if #m == 16 then
      -- NaN fails both: such a member (not ours) fails its check, as a
      -- text one that is not "<cum>:<cost>" does below
      local cum, cost = unpack_state('>dd', m)
      if cum >= 0 and cost > 0 then return cum, cost end
    end
    local cum, cost = string.match(m, '^(%d+):(%d+)$')
    return tonumber(cum), tonumber(cost)
  end

  -- Subtract the key's base (what came before its oldest member) from
  -- every cum, and answer it: O(entries), once per 2^52 units.
  local function swl_rebase(key)
    local all = call('ZRANGE', key, 0, -1, 'WITHSCORES')
    local c0, k0 = swl_parse(all[1])
    call('DEL', key)
    for i = 1, #all, 2 do
      local cum, cost = swl_parse(all[i])
      call('ZADD', key, all[i + 1], swl_member(cum - (c0 - k0), cost))
    end
    return c0 - k0
  end

  local function peek(key, now, limit, W, burst, cost)
    -- an entry counts while its time is in (now - W, now]; peek only reads
    -- (commit drops what has left), so its answer is a function of the
    -- stored log and now, even for a clock that steps back
    -- gone: the members that have left the window, all before the live
    -- ones (commit drops up to SWL_DROP_MAX of them)
    local n, base, cum, newest, gone, repair = 0, 0, 0, 0, 0, nil
    local room, reset = limit, 0
    -- the newest first: when it has left the window, so has every entry,
    -- and a missing key costs one call
    local last = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if last[1] then
      local score = tonumber(last[2])
      cum = swl_parse(last[1])
      if score > now - W then
        strs_gone(now, W)
        gone = call('ZCOUNT', key, '-inf', s_gone)
        local first = call('ZRANGE', key, gone, gone)
        local c0, k0 = swl_parse(first[1])
        base = c0 - k0
        n = cum - base
        newest = score
        repair = newest + W - now
        -- room < 0: an overdraft (the daemon answers remaining 0)
        room = limit - n
        reset = ceil_ms(repair)
      else
        -- nothing live: cum goes on from the newest (see the top)
        base, repair, gone = cum, 0, call('ZCARD', key)
      end
    end
    if cost > limit then return false, room, reset, -1, repair, n, base, cum, newest, gone end
    if n + cost > limit then
      -- The oldest entries must leave until `need` units have gone: find the
      -- first live entry whose cum reaches base + need.  Every entry holds at
      -- least one unit, so it is among the first `need` live ones.
      local need = n + cost - limit
      local lo, hi = gone, gone + math.min(need, call('ZCARD', key) - gone) - 1
      while lo < hi do
        local mid = floor((lo + hi) / 2)
        local m = call('ZRANGE', key, mid, mid)
        if swl_parse(m[1]) >= base + need then hi = mid else lo = mid + 1 end
      end
      local e = call('ZRANGE', key, lo, lo, 'WITHSCORES')
      return false, room, reset, ceil_ms(tonumber(e[2]) + W - now), repair,
             n, base, cum, newest, gone
    end
    return true, room, reset, 0, repair, n, base, cum, newest, gone
  end

  local function commit(key, now, limit, W, burst, cost, n, base, cum, newest, gone)
    if gone > 0 then
      local drop = gone
      if drop > SWL_DROP_MAX then drop = SWL_DROP_MAX end
      call('ZREMRANGEBYRANK', key, '0', format('%d', drop - 1))
      gone = gone - drop
      -- every member gone: the key is empty, cum starts again
      if gone == 0 and n == 0 then cum, base = 0, 0 end
    end
    -- a clock that stepped back must not put an entry before older ones
    local ts = now
    if newest > now then ts = newest end
    if cum + cost > SWL_CUM_MAX then cum = cum - swl_rebase(key) end
    local weight = cost
    if charging then
      if n + cost > UNITS_MAX then cost = UNITS_MAX - n end
      weight = cost
      if n >= limit then
        -- joins the newest member (live: n > 0), moved to now
        local m = call('ZRANGE', key, '-1', '-1')
        local _, k0 = swl_parse(m[1])
        call('ZREMRANGEBYRANK', key, '-1', '-1')
        weight = cost + k0
      end
    end
    cum = cum + cost
    strs_now(now, W)
    local at, ttl = s_now, s_ttl
    if ts ~= now then at, ttl = format('%d', ts), format('%d', ttl_ms(ts + W - now)) end
    call('ZADD', key, at, swl_member(cum, weight))
    -- n live units hold at most n entries: only n >= limit (a forced
    -- commit) can pass `limit` entries; keep the newest `limit`, once no
    -- expired member is left (they go first, SWL_DROP_MAX a check: the
    -- live members may pass `limit` by one a check meanwhile)
    if n >= limit and gone == 0 and not charging then
      call('ZREMRANGEBYRANK', key, 0, -limit - 1)
    end
    call('PEXPIRE', key, ttl)
    -- a forced commit into a log at its limit may have forgotten units:
    -- its overdraft is not known, so none is said (0)
    local room = limit - n - cost
    if room < 0 and n >= limit and not charging then room = 0 end
    return room, ceil_ms(ts + W - now)
  end

  if not with_give then return peek, commit end
  -- forget the newest `units` units (all there are, at most): the newest
  -- members whole, then part of the next one (its weight and cum less by
  -- what is left, so the log's running total stays right), read 64 at a
  -- time from the newest; the TTL follows the newest left (an emptied key
  -- is gone by itself)
  local function give(key, now, limit, W, burst, units)
    while units > 0 do
      local ms = call('ZRANGE', key, '-64', '-1', 'WITHSCORES')
      if not ms[1] then break end
      local whole = 0
      for i = #ms - 1, 1, -2 do
        local cum, cost = swl_parse(ms[i])
        if cost > units then
          call('ZREMRANGEBYRANK', key, format('%d', -whole - 1), '-1')
          call('ZADD', key, ms[i + 1], swl_member(cum - units, cost - units))
          whole, units = -1, 0
          break
        end
        units, whole = units - cost, whole + 1
        if units == 0 then break end
      end
      if whole > 0 then call('ZREMRANGEBYRANK', key, format('%d', -whole), '-1') end
    end
    local last = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if last[1] then set_ttl(key, tonumber(last[2]) + W - now) end
  end

  return peek, commit, give
end
