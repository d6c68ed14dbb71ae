-- gcra: the generic cell rate algorithm.  One value per key, the theoretical
-- arrival time TAT.  Emission interval T = W / limit, tolerance tau =
-- T * burst; a check of `cost` is allowed when
--   max(TAT, now) + T * cost - now <= tau   (equality allows),
-- and then TAT becomes max(TAT, now) + T * cost.  T is rarely a whole number
-- of microseconds, so times are kept exactly as i + f / limit (0 <= f < limit)
-- and compared as pairs; products go through muldiv (intmath.lua).
-- String value "<i> <f>" of TAT.  Mirrors src/algo_gcra.c.

-- Pair (i, f) normalised after f may have left [0, limit).
local function gcra_norm(i, f, limit)
  if f >= limit then return i + 1, f - limit end
  if f < 0 then return i - 1, f + limit end
  return i, f
end

-- floor(burst - x / T) with x = i + f / limit >= 0: the whole units free.
local function gcra_room(i, f, limit, W, burst)
  -- ceil(x * limit / W) = ceil((i * limit + f) / W)
  local q, r = muldiv(i, limit, W)
  local q2, r2 = divmod(r + f, W)
  if r2 > 0 then q2 = q2 + 1 end
  return burst - q - q2
end

-- ceil of i + f / limit, in microseconds
local function gcra_ceil(i, f)
  if f > 0 then return i + 1 end
  return i
end

ALGOS['gcra'] = {
  peek = function(key, now, limit, window_ms, burst, cost)
    local W = window_ms * 1000
    local v = redis.call('GET', key)
    local ti, tf = now, 0
    if v then
      local a, b = string.match(v, '^(%d+) (%d+)$')
      ti, tf = tonumber(a) or 0, tonumber(b) or 0
      -- f was kept over an older limit: round TAT up to the microsecond
      if tf >= limit then ti, tf = ti + 1, 0 end
    end
    -- x = max(TAT, now) - now
    local xi, xf = 0, 0
    if ti >= now then xi, xf = ti - now, tf end
    if v then repair_ttl(key, gcra_ceil(xi, xf)) end
    local r = { remaining = math.max(gcra_room(xi, xf, limit, W, burst), 0),
                reset_ms = ceil_ms(gcra_ceil(xi, xf)) }
    if cost > burst then
      r.ok, r.retry_after_ms = false, -1
      return r
    end
    -- n = x + T * cost: where TAT would be, from now, after this check
    local ci, cf = muldiv(W, cost, limit)
    local ni, nf = gcra_norm(xi + ci, xf + cf, limit)
    local gi, gf = muldiv(W, burst, limit)  -- tau
    r.ni, r.nf = ni, nf
    if ni < gi or (ni == gi and nf <= gf) then
      r.ok, r.retry_after_ms = true, 0
    else
      -- allowed once now has grown by n - tau
      local ei, ef = gcra_norm(ni - gi, nf - gf, limit)
      r.ok, r.retry_after_ms = false, ceil_ms(gcra_ceil(ei, ef))
    end
    return r
  end,

  commit = function(key, now, limit, window_ms, burst, cost, r)
    local W = window_ms * 1000
    redis.call('SET', key, string.format('%.0f %.0f', now + r.ni, r.nf))
    local left = gcra_ceil(r.ni, r.nf)
    set_ttl(key, left)
    return { remaining = math.max(gcra_room(r.ni, r.nf, limit, W, burst), 0),
             reset_ms = ceil_ms(left), retry_after_ms = 0 }
  end,
}
