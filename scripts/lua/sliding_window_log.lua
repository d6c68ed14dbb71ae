-- sliding_window_log: the exact log of the allowed checks.  A sorted set with
-- one member per allowed check: score = its time (us), member =
-- "<cum>:<cost>", where cum is the running total of units logged in this key
-- up to and including this check.  The running total makes members unique
-- (even for many checks in one microsecond) and makes the window's count one
-- subtraction, newest cum - (oldest cum - oldest cost), instead of a sum over
-- every member.  cum is zero-padded to 16 digits so that members sharing a
-- score sort by cum, keeping index order = time order = cum order.
-- Mirrors src/algo_sliding_window_log.c.

-- cum restarts whenever the key empties; a key that never empties is rebased
-- before cum could leave the range where doubles are exact.
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

ALGOS['swl'] = {
  peek = function(key, now, limit, window_ms, burst, cost)
    local W = window_ms * 1000
    -- an entry counts while its time is in (now - W, now]; peek only reads
    -- (commit drops what has left), so its answer is a function of the
    -- stored log and now, even for a clock that steps back
    local r = { n = 0, base = 0, cum = 0, newest = 0 }
    local first = redis.call('ZRANGEBYSCORE', key, string.format('(%.0f', now - W),
                             '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if first[1] then
      local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      local c0, k0 = swl_parse(first[1])
      r.base = c0 - k0
      r.cum = swl_parse(last[1])
      r.n = r.cum - r.base
      r.newest = tonumber(last[2])
      repair_ttl(key, r.newest + W - now)
    else
      repair_ttl(key, 0)
    end
    r.remaining = math.max(limit - r.n, 0)
    r.reset_ms = 0
    if r.n > 0 then r.reset_ms = ceil_ms(r.newest + W - now) end
    if cost > limit then
      r.ok, r.retry_after_ms = false, -1
    elseif r.n + cost <= limit then
      r.ok, r.retry_after_ms = true, 0
    else
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
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - W)
    -- a clock that stepped back must not put an entry before older ones
    local ts = math.max(now, r.newest)
    local cum = r.cum + cost
    if cum > SWL_CUM_MAX then
      swl_rebase(key, r.base)
      cum = r.n + cost
    end
    redis.call('ZADD', key, ts, swl_member(cum, cost))
    set_ttl(key, ts + W - now)
    return { remaining = math.max(limit - r.n - cost, 0),
             reset_ms = ceil_ms(ts + W - now), retry_after_ms = 0 }
  end,
}
