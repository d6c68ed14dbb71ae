-- fixed_window: a counter whose window opens at the first counted request and
-- lasts `window`.  Hash fields: c = count, s = window start (us).
-- Mirrors src/algo_fixed_window.c.

ALGOS['fw'] = {
  peek = function(key, now, limit, window_ms, burst, cost)
    local v = redis.call('HMGET', key, 'c', 's')
    local count, start = tonumber(v[1]) or 0, tonumber(v[2]) or 0
    local W = window_ms * 1000
    if count > 0 and now >= start + W then count = 0 end
    local left = 0
    if count > 0 then
      left = start + W - now
      repair_ttl(key, left)
    elseif v[1] then
      -- a worthless key found without a TTL must still go
      repair_ttl(key, 0)
    end
    local r = { remaining = math.max(limit - count, 0), reset_ms = ceil_ms(left) }
    if cost > limit then
      r.ok, r.retry_after_ms = false, -1
    elseif count + cost <= limit then
      r.ok, r.retry_after_ms = true, 0
    else
      r.ok, r.retry_after_ms = false, ceil_ms(left)
    end
    r.count, r.start = count, start
    return r
  end,

  commit = function(key, now, limit, window_ms, burst, cost, r)
    local count, start = r.count, r.start
    if count == 0 then start = now end
    count = count + cost
    local left = start + window_ms * 1000 - now
    redis.call('HSET', key, 'c', count, 's', start)
    set_ttl(key, left)
    return { remaining = math.max(limit - count, 0), reset_ms = ceil_ms(left),
             retry_after_ms = 0 }
  end,
}
