-- fixed_window: a counter whose window opens at the first counted request and
-- lasts `window`.  String value "<count>:<start>" (start in us), written with
-- its TTL in one SET ... PX.  A forced commit counts past the limit; the
-- window still closes on time.
-- Mirrors src/algo_fixed_window.c.

MODULES['fw'] = function() return {
  peek = function(key, now, limit, window_ms, burst, cost)
    local v = redis.call('GET', key)
    local count, start, left = 0, 0, 0
    if v then
      local p = string.find(v, ':', 1, true)
      if p then
        count = tonumber(string.sub(v, 1, p - 1)) or 0
        start = tonumber(string.sub(v, p + 1)) or 0
      end
      if count > 0 then
        left = start + window_ms * 1000 - now
        if left <= 0 then count, left = 0, 0 end
      end
    end
    local r = { ok = true, remaining = limit - count, reset_ms = ceil_ms(left),
                retry_after_ms = 0, repair = nil, count = count, start = start }
    if count > limit then r.remaining = 0 end
    -- a worthless key found without a TTL must still go (left is 0 then)
    if v then r.repair = left end
    if cost > limit then
      r.ok, r.retry_after_ms = false, -1
    elseif count + cost > limit then
      r.ok, r.retry_after_ms = false, r.reset_ms
    end
    return r
  end,

  commit = function(key, now, limit, window_ms, burst, cost, r)
    local count, start = r.count + cost, r.start
    if r.count == 0 then start = now end
    local left = start + window_ms * 1000 - now
    -- value and TTL in one command
    redis.call('SET', key, string.format('%.0f:%.0f', count, start),
               'PX', ttl_ms(left))
    r.remaining, r.reset_ms = limit - count, ceil_ms(left)
    if count > limit then r.remaining = 0 end
    return r
  end,
} end
