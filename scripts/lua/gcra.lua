-- gcra: the generic cell rate algorithm.  One value per key, the theoretical
-- arrival time TAT.  Emission interval T = W / limit, tolerance tau =
-- T * burst; a check of `cost` is allowed when
--   max(TAT, now) + T * cost - now <= tau   (equality allows),
-- and then TAT becomes max(TAT, now) + T * cost (a forced commit too, past
-- tau, but no further than 2 x tau ahead: algo_most_owed in src/algo.h).
-- T is rarely a whole number of microseconds,
-- so times are kept exactly as i + f / limit (0 <= f < limit) and compared
-- as pairs; products go through muldiv (intmath.lua).
-- String value "<i> <f>" of TAT.  Mirrors src/algo_gcra.c.

MODULES['gcra'] = function()
  -- Pair (i, f) normalised after f may have left [0, limit).
  local function gcra_norm(i, f, limit)
    if f >= limit then return i + 1, f - limit end
    if f < 0 then return i - 1, f + limit end
    return i, f
  end

  -- max(floor(burst - x / T), 0) with x = i + f / limit >= 0: whole units
  -- free, never below 0 however far a forced commit pushed TAT.
  local function gcra_room(i, f, limit, W, burst)
    -- ceil(x * limit / W) = ceil((i * limit + f) / W)
    local q, r = muldiv(i, limit, W)
    local q2, r2 = divmod(r + f, W)
    if r2 > 0 then q2 = q2 + 1 end
    q = burst - q - q2
    if q < 0 then return 0 end
    return q
  end

  -- ceil of i + f / limit, in microseconds
  local function gcra_ceil(i, f)
    if f > 0 then return i + 1 end
    return i
  end

  -- (i, f) + T * units: where TAT would be, from now, after a check
  local function gcra_next(i, f, units, W, limit)
    local ci, cf = muldiv(W, units, limit)
    return gcra_norm(i + ci, f + cf, limit)
  end

  return {
    peek = function(key, now, limit, window_ms, burst, cost)
      local W = window_ms * 1000
      local v = redis.call('GET', key)
      -- x = max(TAT, now) - now
      local xi, xf = 0, 0
      if v then
        local a, b = string.match(v, '^(%d+) (%d+)$')
        local ti, tf = tonumber(a) or 0, tonumber(b) or 0
        -- f was kept over an older limit: round TAT up to the microsecond
        if tf >= limit then ti, tf = ti + 1, 0 end
        if ti >= now then xi, xf = ti - now, tf end
      end
      local left = gcra_ceil(xi, xf)
      local r = { ok = true, remaining = gcra_room(xi, xf, limit, W, burst),
                  reset_ms = ceil_ms(left), retry_after_ms = 0, repair = nil,
                  xi = xi, xf = xf }
      if v then r.repair = left end
      if cost > burst then
        r.ok, r.retry_after_ms = false, -1
        return r
      end
      local ni, nf = gcra_next(xi, xf, cost, W, limit)
      local gi, gf = muldiv(W, burst, limit)  -- tau
      if ni > gi or (ni == gi and nf > gf) then
        -- allowed once now has grown by n - tau
        local ei, ef = gcra_norm(ni - gi, nf - gf, limit)
        r.ok, r.retry_after_ms = false, ceil_ms(gcra_ceil(ei, ef))
      end
      return r
    end,

    commit = function(key, now, limit, window_ms, burst, cost, r)
      local W, most = window_ms * 1000, 2 * burst
      if cost > most then cost = most end
      local ni, nf = gcra_next(r.xi, r.xf, cost, W, limit)
      -- a forced commit: TAT no further than 2 x tau ahead
      local mi, mf = muldiv(W, most, limit)
      if ni > mi or (ni == mi and nf > mf) then ni, nf = mi, mf end
      local left = gcra_ceil(ni, nf)
      -- value and TTL in one command
      redis.call('SET', key, string.format('%.0f %.0f', now + ni, nf),
                 'PX', ttl_ms(left))
      r.remaining = gcra_room(ni, nf, limit, W, burst)
      r.reset_ms = ceil_ms(left)
      return r
    end,
  }
end
