-- gcra: the generic cell rate algorithm.  One value per key, the theoretical
-- arrival time TAT.  Emission interval T = W / limit, tolerance tau =
-- T * burst; a check of `cost` is allowed when
--   max(TAT, now) + T * cost - now <= tau   (equality allows),
-- and then TAT becomes max(TAT, now) + T * cost (a forced commit too, past
-- tau, but no further than 2 x tau ahead: algo_most_owed in src/algo.h).
-- T is rarely a whole number of microseconds,
-- so times are kept exactly as i + f / limit (0 <= f < limit) and compared
-- as pairs; products go through muldiv (intmath.lua).
-- Value i, f of TAT as state2 reads them (prelude).  Mirrors src/algo_gcra.c.

MODULES['gcra'] = function(with_give)
  local call, format = redis.call, string.format
  local divmod, muldiv = intmath()
  -- Pair (i, f) normalised after f may have left [0, limit).
  local function gcra_norm(i, f, limit)
    if f >= limit then return i + 1, f - limit end
    if f < 0 then return i - 1, f + limit end
    return i, f
  end

  -- floor(burst - x / T) with x = i + f / limit >= 0: whole units free;
  -- below 0, the overdraft a forced commit or a charge left (the daemon
  -- answers remaining 0).
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

  -- (i, f) + T * units: where TAT would be, from now, after a check
  local function gcra_next(i, f, units, W, limit)
    local ci, cf = muldiv(W, units, limit)
    return gcra_norm(i + ci, f + cf, limit)
  end

  -- tau = T * burst as a pair: the same for every check of a policy, so
  -- the last one is kept (a batch is mostly one policy)
  local tW, tB, tL, ti, tf
  local function tau(W, burst, limit)
    if W ~= tW or burst ~= tB or limit ~= tL then
      ti, tf = muldiv(W, burst, limit)
      tW, tB, tL = W, burst, limit
    end
    return ti, tf
  end

  local function peek(key, now, limit, W, burst, cost, pre)
    local v = pre
    if v == nil then v = call('GET', key) end
    -- x = max(TAT, now) - now
    local xi, xf, left, repair = 0, 0, 0, nil
    if v then
      local ti, tf = state2(v)
      if ti == nil then ti, tf = 0, 0 end
      -- f was kept over an older limit: round TAT up to the microsecond
      if tf >= limit then ti, tf = ti + 1, 0 end
      if ti >= now then
        xi, xf = ti - now, tf
        left = gcra_ceil(xi, xf)
      end
      repair = left
    end
    local room, reset = gcra_room(xi, xf, limit, W, burst), ceil_ms(left)
    if cost > burst then return false, room, reset, -1, repair, xi, xf end
    local ni, nf = gcra_next(xi, xf, cost, W, limit)
    local gi, gf = tau(W, burst, limit)
    if ni > gi or (ni == gi and nf > gf) then
      -- allowed once now has grown by n - tau
      local ei, ef = gcra_norm(ni - gi, nf - gf, limit)
      return false, room, reset, ceil_ms(gcra_ceil(ei, ef)), repair, xi, xf, ni, nf
    end
    -- commit's TAT (ni, nf) as well: within tau, so within 2 tau
    return true, room, reset, 0, repair, xi, xf, ni, nf, true
  end

  -- (ni, nf): peek's next TAT for this cost, if it got that far; fits: it
  -- is within tau
  -- the last value and TTL written, as strings: every new key of a policy
  -- in a call gets the same (a format costs half a small command)
  local m_at, m_f, m_value, m_left, m_ttl
  local function commit(key, now, limit, W, burst, cost, xi, xf, ni, nf, fits)
    if charging then
      -- TAT moved by the whole charge, up to owed_max units ahead;
      -- owed_max >= 2 x burst (a bucket refills within 366 days), so it is
      -- computed only for a charge or a TAT past that
      local most = nil
      if cost > 2 * burst then
        most = owed_max(limit, W, muldiv)
        if cost > most then cost = most end
      end
      ni, nf = gcra_next(xi, xf, cost, W, limit)
      local ti, tf = tau(W, burst, limit)
      ti, tf = gcra_norm(2 * ti, 2 * tf, limit)
      if ni > ti or (ni == ti and nf > tf) then
        most = most or owed_max(limit, W, muldiv)
        local mi, mf = muldiv(W, most, limit)
        if ni > mi or (ni == mi and nf > mf) then ni, nf = mi, mf end
      end
      fits = true
    elseif ni == nil then
      local most = 2 * burst
      if cost > most and not reserving then cost = most end
      ni, nf = gcra_next(xi, xf, cost, W, limit)
    end
    if not fits and not reserving then
      -- a forced commit: TAT no further than 2 x tau ahead
      -- T * 2 burst = 2 tau, exactly
      local mi, mf = tau(W, burst, limit)
      mi, mf = gcra_norm(2 * mi, 2 * mf, limit)
      if ni > mi or (ni == mi and nf > mf) then ni, nf = mi, mf end
    end
    local left = gcra_ceil(ni, nf)
    -- value and TTL in one command
    if now + ni ~= m_at or nf ~= m_f then
      m_at, m_f = now + ni, nf
      m_value = pack_state('<dd', m_at, nf)
    end
    if left ~= m_left then m_left, m_ttl = left, format('%d', ttl_ms(left)) end
    call('SET', key, m_value, 'PX', m_ttl)
    return gcra_room(ni, nf, limit, W, burst), ceil_ms(left), m_value
  end

  if not with_give then return peek, commit end
  -- TAT back by T * units, not before now (then no key); TAT is at most
  -- 2 x tau ahead, so more than 2 x burst units change nothing more
  local function give(key, now, limit, W, burst, units, xi, xf)
    if units > 2 * burst then units = 2 * burst end
    local ci, cf = muldiv(W, units, limit)
    local ni, nf = gcra_norm(xi - ci, xf - cf, limit)
    if ni < 0 or (ni == 0 and nf == 0) then
      call('DEL', key)
      return
    end
    call('SET', key, pack_state('<dd', now + ni, nf), 'PX', format('%d', ttl_ms(gcra_ceil(ni, nf))))
  end

  return peek, commit, give
end
