-- sliding_window_counter: counts of the current and the previous
-- epoch-aligned windows (window index = floor(now / W)), the previous one
-- weighted by the part of it still inside the sliding window:
--   estimate = prev * (W - elapsed) / W + curr.
-- String value "<w>:<c>:<p>": w = window index, c = its count, p = the count
-- of window w - 1, written with its TTL in one SET ... PX.
-- The weighted term is rounded up, which decides exactly like the real-valued
-- comparison because the rest of it is integer.  Products go through muldiv
-- (intmath.lua).  A forced commit counts past the limit.
-- Mirrors src/algo_sliding_window_counter.c.

MODULES['swc'] = function() return {
  peek = function(key, now, limit, window_ms, burst, cost)
    local W = window_ms * 1000
    local v = redis.call('GET', key)
    local cur, e = divmod(now, W)
    local curr, prev = 0, 0
    if v then
      local sw, c, p
      local i = string.find(v, ':', 1, true)
      if i then
        local j = string.find(v, ':', i + 1, true)
        if j then
          sw = tonumber(string.sub(v, 1, i - 1))
          c = tonumber(string.sub(v, i + 1, j - 1))
          p = tonumber(string.sub(v, j + 1))
        end
      end
      -- a clock that stepped back sees the stored window from its start
      if sw then
        if sw > cur then cur, e = sw, 0 end
        if sw == cur then
          curr, prev = c or 0, p or 0
        elseif sw == cur - 1 then
          prev = c or 0
        end
      end
    end
    local q, rem = muldiv(prev, W - e, W)
    if rem > 0 then q = q + 1 end
    local room = limit - curr - q
    -- fully available once curr has aged out of the previous window too
    local reset = 0
    if curr > 0 then
      reset = (cur + 2) * W - now
    elseif prev > 0 then
      reset = (cur + 1) * W - now
    end
    local r = { ok = true, remaining = room, reset_ms = ceil_ms(reset),
                retry_after_ms = 0, repair = nil,
                cur = cur, curr = curr, prev = prev, room = room }
    if room < 0 then r.remaining = 0 end
    if v then r.repair = reset end
    if cost > limit then
      r.ok, r.retry_after_ms = false, -1
    elseif cost > room then
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
      r.ok, r.retry_after_ms = false, ceil_ms(t)
    end
    return r
  end,

  commit = function(key, now, limit, window_ms, burst, cost, r)
    local reset = (r.cur + 2) * window_ms * 1000 - now
    -- value and TTL in one command
    redis.call('SET', key, string.format('%.0f:%.0f:%.0f', r.cur, r.curr + cost, r.prev),
               'PX', ttl_ms(reset))
    r.remaining, r.reset_ms = r.room - cost, ceil_ms(reset)
    if r.remaining < 0 then r.remaining = 0 end
    return r
  end,
} end
