-- sliding_window_counter: counts of the current and the previous
-- epoch-aligned windows (window index = floor(now / W)), the previous one
-- weighted by the part of it still inside the sliding window:
--   estimate = prev * (W - elapsed) / W + curr.
-- Value w, c, p as state3 reads them (prelude): w = window index, c = its
-- count, p = the count of window w - 1, written with its TTL in one SET ... PX.
-- The weighted term is rounded up, which decides exactly like the real-valued
-- comparison because the rest of it is integer.  Products go through muldiv
-- (intmath.lua).  A forced commit counts past the limit.
--
-- 'swcp': the windows are calendar periods of their real lengths (W: their
-- boundaries, period_frame in prelude.lua) and w the period's start (us).
-- The sliding window is as long as the current period (Lc), so the part of
-- the previous one (Lp) inside it is e - now, at most Lp:
--   estimate = prev * min(e - now, Lp) / Lp + curr,
-- the formula above when both are W.  A later period's counts (a clock that
-- stepped back) count as the current one's.
-- Mirrors src/algo_sliding_window_counter.c.

local function sliding_counter(with_give, periodic)
  local call, format = redis.call, string.format
  local divmod, muldiv = intmath()
  -- -> ok, remaining, reset, retry, repair, id, curr, prev, room, e2: what
  -- w is for the current window, its counts, and the next window's end
  local function peek(key, now, limit, W, burst, cost, pre)
    local v = pre
    if v == nil then v = call('GET', key) end
    local sw, c, pc
    if v then sw, c, pc = state3(v) end
    local curr, prev, repair = 0, 0, nil
    local id, p, s, e, e2
    if periodic then
      p, s, e, e2 = period_frame(now, W)
      id = s
      if sw then
        if sw >= s then
          curr, prev = c, pc
        elseif sw == p then
          prev = c
        end
      end
    else
      id = divmod(now, W)
      -- a clock that stepped back sees the stored window from its start
      if sw and sw > id then id = sw end
      p = id * W - W
      s = p + W
      e = s + W
      e2 = e + W
      if sw then
        if sw == id then
          curr, prev = c, pc
        elseif sw == id - 1 then
          prev = c
        end
      end
    end
    local lp, room = s - p, limit - curr
    if prev > 0 then
      local part = e - now
      if part > lp then part = lp end
      local q, rem = muldiv(prev, part, lp)
      if rem > 0 then q = q + 1 end
      room = room - q
    end
    -- fully available once curr has aged out of the previous window too
    local reset = 0
    if curr > 0 then
      reset = e2 - now
    elseif prev > 0 then
      reset = e - now
    end
    if v then repair = reset end
    -- room < 0: an overdraft, the previous window's count weighed as any
    -- (the daemon answers remaining 0)
    local rem = room
    reset = ceil_ms(reset)
    if cost > limit then return false, rem, reset, -1, repair, id, curr, prev, room, e2 end
    if cost > room then
      -- the first time t at which the estimate leaves room for cost, the
      -- part inside being e - t:  x * (e - t) / L <= R  <=>  t >= e - floor(R * L / x)
      local R, t = limit - curr - cost, 0
      if R >= 0 then
        -- in this window, as prev fades (prev > R here)
        t = e - muldiv(R, lp, prev)
      else
        -- in the next window, as curr fades (curr > limit - cost here);
        -- not before it starts (a period may be shorter than this one)
        t = e2 - muldiv(limit - cost, e - s, curr)
        if t < e then t = e end
      end
      return false, rem, reset, ceil_ms(t - now), repair, id, curr, prev, room, e2
    end
    return true, rem, reset, 0, repair, id, curr, prev, room, e2
  end

  -- the last value and TTL written, as strings: the TTL is the same for
  -- every key of a policy in a call, the value for every new key (a format
  -- costs half a small command)
  local m_id, m_c, m_p, m_value, m_reset, m_ttl
  local function commit(key, now, limit, W, burst, cost, id, curr, prev, room, e2)
    local reset, c = e2 - now, curr + cost
    if c > UNITS_MAX then c = UNITS_MAX end
    if id ~= m_id or c ~= m_c or prev ~= m_p then
      m_id, m_c, m_p, m_value = id, c, prev, pack_state('<ddd', id, c, prev)
    end
    if reset ~= m_reset then m_reset, m_ttl = reset, format('%d', ttl_ms(reset)) end
    -- value and TTL in one command
    call('SET', key, m_value, 'PX', m_ttl)
    return room - (c - curr), ceil_ms(reset), m_value
  end

  if not with_give then return peek, commit end
  -- the current window's count down first, then the previous one's, each
  -- floored at 0 (both 0: no key)
  local function give(key, now, limit, W, burst, units, id, curr, prev, room, e2)
    local c, p = curr - units, prev
    if c < 0 then
      p, c = p + c, 0
      if p < 0 then p = 0 end
    end
    if c == 0 and p == 0 then
      call('DEL', key)
      return
    end
    local reset = e2 - now
    if c == 0 then
      -- until the end of the current window
      if periodic then
        local _, _, e = period_frame(now, W)
        reset = e - now
      else
        reset = reset - W
      end
    end
    call('SET', key, pack_state('<ddd', id, c, p), 'PX', format('%d', ttl_ms(reset)))
  end

  return peek, commit, give
end

MODULES['swc'] = function(with_give) return sliding_counter(with_give, false) end
PERIODIC['swcp'] = true
MODULES['swcp'] = function(with_give) return sliding_counter(with_give, true) end
