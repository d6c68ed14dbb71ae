-- token_bucket: `burst` tokens of capacity, refilled continuously at `limit`
-- tokens per window.  The state is what the bucket misses rather than what it
-- holds, so that no state at all is a full bucket: missing tokens
-- D = d + f / W (W = window in us, 0 <= f < W, an exact fraction) as of time
-- t.  Refill lowers D by limit * elapsed / W, computed exactly with muldiv
-- (intmath.lua), so the outcome does not depend on how often anyone asks.
-- A forced commit may take more than the bucket holds: D > burst is a debt,
-- which refill pays back before any token is free again, of one bucket at
-- most (D <= 2 x burst, algo_most_owed in src/algo.h); a charge's debt is
-- carried whole, up to owed_max (prelude.lua): D - burst tokens of
-- overdraft, paid back at limit per window, exactly.  Every argument of
-- muldiv/divmod stays >= 0 (D itself never goes below 0).
-- Value d, f, t as state3 reads them (prelude), written with its TTL in one
-- SET ... PX.
-- Mirrors src/algo_token_bucket.c.

MODULES['tb'] = function(with_give)
  local call, format = redis.call, string.format
  local divmod, muldiv = intmath()
  -- Microseconds, rounded up, until D has fallen to `x` tokens (0 if it has).
  local function tb_wait(d, f, x, W, limit)
    if d < x or (d == x and f == 0) then return 0 end
    -- ceil(((d - x) * W + f) / limit)
    local q, r = muldiv(d - x, W, limit)
    local q2, r2 = divmod(r + f, limit)
    if r2 > 0 then q2 = q2 + 1 end
    return q + q2
  end

  local function peek(key, now, limit, W, burst, cost, pre)
    local v = pre
    if v == nil then v = call('GET', key) end
    local d, f, t, repair = 0, 0, 0, nil
    if v then
      local a, b, c = state3(v)
      if a then d, f, t = a, b, c end
    end
    -- a clock that stepped back refills nothing until it catches up; every
    -- duration is still measured from `now` (skew)
    local at = now
    if t > now then at = t end
    local skew = at - now
    local reset = 0
    if d ~= 0 or f ~= 0 then
      local wait = tb_wait(d, f, 0, W, limit)
      if at - t >= wait then
        d, f = 0, 0
      else
        local q, r = muldiv(limit, at - t, W)
        d, f = d - q, f - r
        if f < 0 then d, f = d - 1, f + W end
        -- D W fell by exactly limit (at - t), an integer multiple of
        -- limit: the wait by exactly at - t, no second tb_wait needed
        reset = wait - (at - t) + skew
      end
    end
    if v then repair = reset end
    -- floor(tokens) = burst - ceil(D)
    local room = burst - d
    if f > 0 then room = room - 1 end
    -- room < 0: an overdraft (the daemon answers remaining 0)
    local rem = room
    local reset_ms = ceil_ms(reset)
    if cost > burst then return false, rem, reset_ms, -1, repair, d, f, at, skew end
    if cost > room then
      return false, rem, reset_ms, ceil_ms(tb_wait(d, f, burst - cost, W, limit) + skew),
             repair, d, f, at, skew
    end
    return true, rem, reset_ms, 0, repair, d, f, at, skew
  end

  -- the last value and TTL written, as strings: every new key of a policy
  -- in a call gets the same (a format costs half a small command)
  local m_d, m_f, m_at, m_value, m_reset, m_ttl
  local function commit(key, now, limit, W, burst, cost, d, f, at, skew)
    d = d + cost
    if charging then
      -- owed_max >= 2 x burst (a bucket refills within 366 days): its
      -- digit-wise division only for a debt that large
      if d >= 2 * burst then
        local most = owed_max(limit, W, muldiv)
        if d >= most then d, f = most, 0 end
      end
    elseif d >= 2 * burst and not reserving then
      d, f = 2 * burst, 0
    end
    local reset = tb_wait(d, f, 0, W, limit) + skew
    -- value and TTL in one command
    if d ~= m_d or f ~= m_f or at ~= m_at then
      m_d, m_f, m_at, m_value = d, f, at, pack_state('<ddd', d, f, at)
    end
    if reset ~= m_reset then m_reset, m_ttl = reset, format('%d', ttl_ms(reset)) end
    call('SET', key, m_value, 'PX', m_ttl)
    local room = burst - d
    if f > 0 then room = room - 1 end
    return room, ceil_ms(reset), m_value
  end

  if not with_give then return peek, commit end
  -- units tokens back, the bucket full at most (then no key)
  local function give(key, now, limit, W, burst, units, d, f, at, skew)
    d = d - units
    if d < 0 or (d == 0 and f == 0) then
      call('DEL', key)
      return
    end
    call('SET', key, pack_state('<ddd', d, f, at), 'PX',
         format('%d', ttl_ms(tb_wait(d, f, 0, W, limit) + skew)))
  end

  return peek, commit, give
end
