-- fixed_window: a counter whose window opens at the first counted request and
-- lasts `window`.  Hash fields: c = count, s = window start (us).  A forced
-- commit counts past the limit; the window still closes on time.
-- Mirrors src/algo_fixed_window.c.

MODULES['fw'] = function() return {
  peek = function(key, now, limit, window_ms, burst, cost)
    local v = redis.call('HMGET', key, 'c', 's')
    local count, start = tonumber(v[1]) or 0, tonumber(v[2]) or 0
    local left = 0
    if count > 0 then
      left = start + window_ms * 1000 - now
      if left <= 0 then count, left = 0, 0 end
    end
    local r = { ok = true, remaining = limit - count, reset_ms = ceil_ms(left),
                retry_after_ms = 0, repair = nil, count = count, start = start }
    if count > limit then r.remaining = 0 end
    -- a worthless key found without a TTL must still go (left is 0 then)
    if v[1] then r.repair = left end
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
    redis.call('HSET', key, 'c', count, 's', start)
    set_ttl(key, left)
    r.remaining, r.reset_ms = limit - count, ceil_ms(left)
    if count > limit then r.remaining = 0 end
    return r
  end,
} end
