-- concurrency: `limit` slots, each held by a lease until it is released or
-- ends (W after it was taken).  A sorted set per caller: member the lease's
-- id (32 hex digits the daemon drew; an anonymous slot, a penalty, is
-- 'a<now>.<n>'), score the lease's end (us).  The key expires with its last
-- lease.  peek only reads: ended leases are skipped there and dropped by
-- the next commit, so the set holds at most `limit` live members plus the
-- ended ones a commit drops.  An allowed check of cost > 0 takes one slot
-- whatever its cost; cost 0 only asks.
-- Mirrors src/algo_concurrency.c.

-- The lease the check being run takes if allowed (its id), nil for none:
-- set by the driver (check.lua) before each check, read by commit.
local cc_lease = nil

-- Give lease `id` of `key` back: 1 when it was held and had not ended, else
-- 0 (an unknown lease, one already released, one that ended).  Only that
-- member goes: a release costs two commands.
local function cc_release(key, now, id)
  local s = redis.call('ZSCORE', key, id)
  if not s then return 0 end
  redis.call('ZREM', key, id)
  if tonumber(s) > now then return 1 end
  return 0
end

OWN_READ['cc'] = true
MODULES['cc'] = function(with_give)
  local call, format = redis.call, string.format

  local function peek(key, now, limit, W, burst, cost)
    local s_now = '(' .. format('%d', now)
    local live = call('ZCOUNT', key, s_now, '+inf')
    local need, newest, reset, repair = 0, 0, 0, nil
    if cost > 0 then need = 1 end
    if live > 0 then
      newest = tonumber(call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
      repair = newest - now
      reset = ceil_ms(repair)
    elseif call('EXISTS', key) == 1 then
      -- only ended leases: worthless, but a key found without a TTL must go
      repair = 0
    end
    local room = limit - live
    if room < 0 then room = 0 end
    if live + need <= limit then return true, room, reset, 0, repair, live, newest end
    -- the (live + need - limit)th lease to end frees the slot needed
    local e = call('ZRANGEBYSCORE', key, s_now, '+inf', 'WITHSCORES', 'LIMIT',
                   format('%d', live + need - limit - 1), '1')
    local retry = ceil_ms(tonumber(e[2]) - now)
    if retry < 1 then retry = 1 end
    return false, room, reset, retry, repair, live, newest
  end

  local function commit(key, now, limit, W, burst, cost, live, newest)
    call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now))
    local score = format('%d', now + W)
    if cc_lease then
      call('ZADD', key, score, cc_lease)
    elseif live < limit then
      -- an anonymous slot: a name no other member has (a clock that steps
      -- back may meet the name of one taken at the same time before)
      local n = live + 1
      while call('ZADD', key, 'NX', score, format('a%d.%d', now, n)) == 0 do n = n + 1 end
    end
    if cc_lease or live < limit then
      live = live + 1
      if now + W > newest then newest = now + W end
    end
    local room = limit - live
    if room < 0 then room = 0 end
    if live == 0 then return room, 0 end
    call('PEXPIRE', key, format('%d', ttl_ms(newest - now)))
    return room, ceil_ms(newest - now)
  end

  if not with_give then return peek, commit end
  -- the `units` leases that end last give their slots back
  local function give(key, now, limit, W, burst, units)
    call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now))
    call('ZREMRANGEBYRANK', key, format('%d', -units), '-1')
  end

  return peek, commit, give
end
