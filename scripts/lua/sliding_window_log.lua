-- sliding_window_log: the exact log of the allowed checks.  A sorted set with
-- one member per allowed check: score = its time (us), member =
-- "<cum>:<cost>", where cum is the running total of units logged in this key
-- up to and including this check.  The running total makes members unique
-- (even for many checks in one microsecond) and makes the window's count one
-- subtraction, newest cum - (oldest cum - oldest cost), instead of a sum over
-- every member.  cum is zero-padded to 16 digits so that members sharing a
-- score sort by cum, keeping index order = time order = cum order.
--
-- Memory stays bounded by `limit` members.  An allowed check cannot pass it
-- (every member holds at least one unit), but a forced one can (a hybrid sync
-- reporting counts admitted elsewhere): it keeps only the newest `limit`
-- members.  The units of the members it forgets stop counting early; that is
-- the price of the bound, paid only when a key is already over its limit.
-- Mirrors src/algo_sliding_window_log.c.

MODULES['swl'] = function()
  -- cum restarts whenever the key empties; a key that never empties is
  -- rebased before cum could leave the range where doubles are exact.
  local SWL_CUM_MAX = 4503599627370496 -- 2^52

  local function swl_member(cum, cost)
    return string.format('%016.0f:%.0f', cum, cost)
  end

  local function swl_parse(m)
    local cum, cost = string.match(m, '^(%d+):(%d+)$')
    return tonumber(cum), tonumber(cost)
  end

  -- Subtract `base` from every cum: O(entries), once per 2^52 units.
  local function swl_rebase(key, base)
    local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    redis.call('DEL', key)
    for i = 1, #all, 2 do
      local cum, cost = swl_parse(all[i])
      redis.call('ZADD', key, all[i + 1], swl_member(cum - base, cost))
    end
  end

  return {
    peek = function(key, now, limit, window_ms, burst, cost)
      local W = window_ms * 1000
      -- an entry counts while its time is in (now - W, now]; peek only reads
      -- (commit drops what has left), so its answer is a function of the
      -- stored log and now, even for a clock that steps back
      local r = { ok = true, remaining = limit, reset_ms = 0, retry_after_ms = 0,
                  repair = nil, n = 0, base = 0, cum = 0, newest = 0,
                  prune = false }
      -- the newest first: when it has left the window, so has every entry,
      -- and a missing key costs one call
      local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      if last[1] then
        local newest = tonumber(last[2])
        if newest > now - W then
          local first = redis.call('ZRANGEBYSCORE', key, string.format('(%.0f', now - W),
                                   '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
          local c0, k0 = swl_parse(first[1])
          r.base = c0 - k0
          r.cum = swl_parse(last[1])
          r.n = r.cum - r.base
          r.newest = newest
          r.repair = newest + W - now
          r.remaining = limit - r.n
          if r.remaining < 0 then r.remaining = 0 end
          r.reset_ms = ceil_ms(r.repair)
          -- base 0: the first live entry is the first in the key, so commit
          -- has nothing to drop (every entry before it would make base > 0)
          r.prune = r.base > 0
        else
          r.repair, r.prune = 0, true
        end
      end
      if cost > limit then
        r.ok, r.retry_after_ms = false, -1
      elseif r.n + cost > limit then
        -- The oldest entries must leave until `need` units have gone: find the
        -- first live entry whose cum reaches base + need.  Every entry holds at
        -- least one unit, so it is among the first `need` live ones.
        local need = r.n + cost - limit
        local gone = redis.call('ZCOUNT', key, '-inf', now - W)
        local lo, hi = gone, gone + math.min(need, redis.call('ZCARD', key) - gone) - 1
        while lo < hi do
          local mid = math.floor((lo + hi) / 2)
          local m = redis.call('ZRANGE', key, mid, mid)
          if swl_parse(m[1]) >= r.base + need then hi = mid else lo = mid + 1 end
        end
        local e = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
        r.ok, r.retry_after_ms = false, ceil_ms(tonumber(e[2]) + W - now)
      end
      return r
    end,

    commit = function(key, now, limit, window_ms, burst, cost, r)
      local W = window_ms * 1000
      if r.prune then redis.call('ZREMRANGEBYSCORE', key, '-inf', now - W) end
      -- a clock that stepped back must not put an entry before older ones
      local ts = now
      if r.newest > now then ts = r.newest end
      local cum = r.cum + cost
      if cum > SWL_CUM_MAX then
        swl_rebase(key, r.base)
        cum = r.n + cost
      end
      redis.call('ZADD', key, ts, swl_member(cum, cost))
      -- n live units hold at most n entries: only n >= limit (a forced
      -- commit) can pass `limit` entries; keep the newest `limit`
      if r.n >= limit then redis.call('ZREMRANGEBYRANK', key, 0, -limit - 1) end
      set_ttl(key, ts + W - now)
      r.remaining = limit - r.n - cost
      if r.remaining < 0 then r.remaining = 0 end
      r.reset_ms = ceil_ms(ts + W - now)
      return r
    end,
  }
end
