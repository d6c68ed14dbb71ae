-- concurrency: `limit` slots, each held by a lease until it is released or
-- ends (W after it was taken).  A sorted set per caller: member the lease's
-- id (32 hex digits the daemon drew; an anonymous slot, a penalty, is
-- 'a<now>.<n>'), score the lease's end (us).  The key expires with its
-- newest lease.  peek only reads: ended leases are skipped there and
-- dropped by the next write (a commit, a release, a reward), so the set
-- holds at most `limit` live members plus the ended ones a write drops.  An
-- allowed check of cost > 0 takes one slot whatever its cost; cost 0 only
-- asks.
--
-- What the answer costs: the newest lease's end (reset, and a TTL repair) is
-- a score to read, formatted by Redis and parsed here; it is read only when
-- no slot is taken.  peek leaves reset nil when the check fits and the
-- driver (check.lua) asks cc_late when no commit follows.  A commit knows
-- the newest is the lease it took, unless a lease ends later (taken before
-- the clock stepped back): one ZCOUNT of integer reply says.  Strings that
-- depend only on now and W are formatted once per call, not per check.
-- Mirrors src/algo_concurrency.c.

-- The lease the check being run takes if allowed (its id), nil for none:
-- set by the driver (check.lua) before each check, read by commit.
local cc_lease = nil

-- now as a score, and past it as a bound (live: score > now), formatted once
-- per call
local cc_now, cc_snow, cc_after = nil, nil, nil
local function cc_score_now(now)
  if now ~= cc_now then
    cc_now, cc_snow = now, string.format('%d', now)
    cc_after = '(' .. cc_snow
  end
  return cc_snow
end

-- Give lease `id` of `key` back: 1 when it was held and had not ended, else
-- 0 (an unknown lease, one already released, one that ended).  The ended
-- leases go first, so ZREM's own answer says it: two commands of integer
-- replies, no score read.
local function cc_release(key, now, id)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', cc_score_now(now))
  return redis.call('ZREM', key, id)
end

-- After a peek that left them nil and no commit: reset (ms until the newest
-- lease ends, 0 when it has) and what a repair of a key found without a TTL
-- needs (nil: no key).
local function cc_late(key, now)
  local r = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if r[2] == nil then return 0, nil end
  local left = tonumber(r[2]) - now
  return ceil_ms(left), left
end

OWN_READ['cc'] = true
MODULES['cc'] = function(with_give)
  local call, format = redis.call, string.format

  -- -> ok, remaining, reset (nil: cc_late's), retry, repair, live
  local function peek(key, now, limit, W, burst, cost)
    cc_score_now(now)
    local live = call('ZCOUNT', key, cc_after, '+inf')
    local need = 0
    if cost > 0 then need = 1 end
    local room = limit - live
    if room < 0 then room = 0 end
    if live + need <= limit then return true, room, nil, 0, nil, live end
    -- the (live + need - limit)th lease to end frees the slot needed
    local e = call('ZRANGEBYSCORE', key, cc_after, '+inf', 'WITHSCORES', 'LIMIT',
                   format('%d', live + need - limit - 1), '1')
    local retry = ceil_ms(tonumber(e[2]) - now)
    if retry < 1 then retry = 1 end
    local reset, repair = cc_late(key, now)
    return false, room, reset, retry, repair, live
  end

  -- a lease's end (and past it, as a ZCOUNT bound), its TTL and reset,
  -- formatted once per (now, W)
  local t_now, t_W, t_score, t_after, t_ttl, t_reset
  local function commit(key, now, limit, W, burst, cost, live)
    if now ~= t_now or W ~= t_W then
      t_now, t_W, t_score = now, W, format('%d', now + W)
      t_after, t_reset, t_ttl = '(' .. t_score, ceil_ms(W), format('%d', ttl_ms(W))
    end
    local taken = true
    call('ZREMRANGEBYSCORE', key, '-inf', cc_score_now(now))
    if cc_lease then
      call('ZADD', key, t_score, cc_lease)
    elseif live < limit then
      -- an anonymous slot: a name no other member has (a clock that steps
      -- back may meet the name of one taken at the same time before)
      local n = live + 1
      while call('ZADD', key, 'NX', t_score, format('a%d.%d', now, n)) == 0 do n = n + 1 end
    else
      taken = false -- forced with no slot free: nothing taken
    end
    if taken then live = live + 1 end
    local room = limit - live
    if room < 0 then room = 0 end
    if taken and call('ZCOUNT', key, t_after, '+inf') == 0 then
      call('PEXPIRE', key, t_ttl)
      return room, t_reset
    end
    -- the newest lease is another (live >= 1: there is one)
    local reset, left = cc_late(key, now)
    call('PEXPIRE', key, format('%d', ttl_ms(left)))
    return room, reset
  end

  if not with_give then return peek, commit end
  -- the `units` leases that end last give their slots back
  local function give(key, now, limit, W, burst, units)
    call('ZREMRANGEBYSCORE', key, '-inf', cc_score_now(now))
    call('ZREMRANGEBYRANK', key, format('%d', -units), '-1')
  end

  return peek, commit, give
end
