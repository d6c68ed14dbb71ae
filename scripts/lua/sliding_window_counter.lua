-- sliding_window_counter: counts of the current and the previous
-- epoch-aligned windows (window index = floor(now / W)), the previous one
-- weighted by the part of it still inside the sliding window:
--   estimate = prev * (W - elapsed) / W + curr.
-- Value w, c, p as state3 reads them (prelude): w = window index, c = its
-- count, p = the count of window w - 1, written with its TTL in one SET ... PX.
-- The weighted term is rounded up, which decides exactly like the real-valued
-- comparison because the rest of it is integer.  Products go through muldiv
-- (intmath.lua).  A forced commit counts past the limit.
-- Mirrors src/algo_sliding_window_counter.c.

MODULES['swc'] = function(with_give)
  local call, format = redis.call, string.format
  local divmod, muldiv = intmath()
  local function peek(key, now, limit, W, burst, cost, pre)
    local v = pre
    if v == nil then v = call('GET', key) end
    local cur, e = divmod(now, W)
    local curr, prev, repair = 0, 0, nil
    if v then
      local sw, c, p = state3(v)
      -- a clock that stepped back sees the stored window from its start
      if sw then
        if sw > cur then cur, e = sw, 0 end
        if sw == cur then
          curr, prev = c, p
        elseif sw == cur - 1 then
          prev = c
        end
      end
    end
    local room = limit - curr
    if prev > 0 then
      local q, rem = muldiv(prev, W - e, W)
      if rem > 0 then q = q + 1 end
      room = room - q
    end
    -- fully available once curr has aged out of the previous window too
    local reset = 0
    if curr > 0 then
      reset = (cur + 2) * W - now
    elseif prev > 0 then
      reset = (cur + 1) * W - now
    end
    if v then repair = reset end
    local rem = room
    if rem < 0 then rem = 0 end
    reset = ceil_ms(reset)
    if cost > limit then return false, rem, reset, -1, repair, cur, curr, prev, room end
    if cost > room then
      -- the first elapsed time e2 at which the estimate leaves room for cost:
      -- x * (W - e2) / W <= R  <=>  e2 >= W - floor(R * W / x)
      local R, t = limit - curr - cost, 0
      if R >= 0 then
        -- in this window, as prev fades (prev > R here)
        t = cur * W + W - muldiv(R, W, prev) - now
      else
        -- in the next window, as curr fades (curr > limit - cost here)
        t = (cur + 1) * W + W - muldiv(limit - cost, W, curr) - now
      end
      return false, rem, reset, ceil_ms(t), repair, cur, curr, prev, room
    end
    return true, rem, reset, 0, repair, cur, curr, prev, room
  end

  -- the last value and TTL written, as strings: the TTL is the same for
  -- every key of a policy in a call, the value for every new key (a format
  -- costs half a small command)
  local m_cur, m_c, m_p, m_value, m_reset, m_ttl
  local function commit(key, now, limit, W, burst, cost, cur, curr, prev, room)
    local reset, c = (cur + 2) * W - now, curr + cost
    if cur ~= m_cur or c ~= m_c or prev ~= m_p then
      m_cur, m_c, m_p, m_value = cur, c, prev, pack_state('<ddd', cur, c, prev)
    end
    if reset ~= m_reset then m_reset, m_ttl = reset, format('%d', ttl_ms(reset)) end
    -- value and TTL in one command
    call('SET', key, m_value, 'PX', m_ttl)
    room = room - cost
    if room < 0 then room = 0 end
    return room, ceil_ms(reset)
  end

  if not with_give then return peek, commit end
  -- the current window's count down first, then the previous one's, each
  -- floored at 0 (both 0: no key)
  local function give(key, now, limit, W, burst, units, cur, curr, prev)
    local c, p = curr - units, prev
    if c < 0 then
      p, c = p + c, 0
      if p < 0 then p = 0 end
    end
    if c == 0 and p == 0 then
      call('DEL', key)
      return
    end
    local reset = (cur + 1) * W - now
    if c > 0 then reset = reset + W end
    call('SET', key, pack_state('<ddd', cur, c, p), 'PX', format('%d', ttl_ms(reset)))
  end

  return peek, commit, give
end
