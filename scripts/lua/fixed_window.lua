-- fixed_window: a counter whose window lasts `window` and opens at the first
-- counted request ('fw'), or at the multiple of `window` since the epoch that
-- holds it ('fwa', align: epoch: every key and instance shares the window),
-- or whose window is the calendar period that holds now ('fwp': W is then
-- its boundaries, period_frame in prelude.lua).
-- Value count, start (in us) as state2 reads them (prelude), written with its
-- TTL in one SET ... PX.  A forced commit or a charge counts past the limit
-- (up to UNITS_MAX): the overdraft, limit - remaining, ends with the window
-- that holds it, as its count does.  Only opening a window knows the alignment: an open
-- window reads the same either way.  A period's stored window counts while
-- its start is the period's or later (a clock that stepped back), and every
-- write puts the period's start.
-- Mirrors src/algo_fixed_window.c.

local function fixed_window(with_give, aligned, periodic)
  local call, format = redis.call, string.format
  -- -> ok, remaining, reset, retry, repair, count, start, e: the count as
  -- it stands, the start a write puts, a period's end (nil for a window)
  local function peek(key, now, limit, W, burst, cost, pre)
    local v = pre
    if v == nil then v = call('GET', key) end
    local count, start, left, repair, e = 0, 0, 0, nil, nil
    if periodic then
      local _, s
      _, s, e = period_frame(now, W)
      if v then
        local c, st = state2(v)
        if c and c > 0 and st >= s then count, left = c, e - now end
        repair = left
      end
      start = s
    elseif v then
      local c, s = state2(v)
      if c then count, start = c, s end
      if count > 0 then
        left = start + W - now
        if left <= 0 then count, left = 0, 0 end
      end
      -- a worthless key found without a TTL must still go (left is 0 then)
      repair = left
    end
    -- room < 0: an overdraft (the daemon answers remaining 0, overdraft -room)
    local reset, room = ceil_ms(left), limit - count
    if cost > limit then return false, room, reset, -1, repair, count, start, e end
    if count + cost > limit then return false, room, reset, reset, repair, count, start, e end
    return true, room, reset, 0, repair, count, start, e
  end

  -- A window opened now: its value (cost, start) and TTL are the same
  -- for every new key of a policy in a call (most keys, when keys are
  -- many), so they are formatted once, not per check.  The TTL is the
  -- reset: ttl_ms and ceil_ms agree on a window still open (left > 0).
  local f_cost, f_now, f_W, f_value, f_ttl, f_reset
  -- the window that opens now with cost: f_value, f_ttl, f_reset
  local function open(now, W, cost, start, e)
    local s, stop = now, e
    if periodic then
      s = start
    else
      if aligned then
        -- now % W is now - floor(now / W) * W: the quotient may round
        -- to the next integer, which the fix below undoes, exactly
        local r = now % W
        if r < 0 then r = r + W elseif r >= W then r = r - W end
        s = now - r
      end
      stop = s + W
    end
    f_cost, f_now, f_W, f_reset = cost, now, W, ceil_ms(stop - now)
    f_value, f_ttl = pack_state('<dd', cost, s), format('%d', f_reset)
  end
  local function commit(key, now, limit, W, burst, cost, count, start, e)
    local reset, value, ttl
    if count == 0 then
      if cost ~= f_cost or now ~= f_now or W ~= f_W then open(now, W, cost, start, e) end
      count, reset, value, ttl = cost, f_reset, f_value, f_ttl
    else
      count, reset = count + cost, ceil_ms((e or start + W) - now)
      if count > UNITS_MAX then count = UNITS_MAX end
      value, ttl = pack_state('<dd', count, start), format('%d', reset)
    end
    -- value and TTL in one command
    call('SET', key, value, 'PX', ttl)
    -- the value written: a charge's answer peeks it (check.lua)
    return limit - count, reset, value
  end

  -- A plain check (check.lua, run_plain: cost >= 0, no flag) of a spec of
  -- this one limit: run_plain, peek and commit in one function, with
  -- state2's packed case and commit's open and new windows inline.  The
  -- answer is a few comparisons; as calls (run_plain -> peek -> state2,
  -- commit -> ceil_ms) they cost 1.4k instructions of a 40k check
  -- (docs/BENCHMARKS.md, "Redis per check"; a new window's commit, 0.3-1.3k
  -- more).  Not for a period (run_plain).
  --
  -- Two functions of one decision, as check.lua's plain1 and run_plain:
  -- one decides the check it is given and returns its answer (a call of
  -- one check, the driver's lone path); plain, like run_plain, decides the
  -- check at ARGV[b] (its spec, s) and every one after it of the same spec
  -- and cost (c) in one call, its answers into out: one Lua call per run
  -- of them, not per check.  A lone check through plain would pay its
  -- loop, its table's stores and KEYS and ARGV read by index, ~2k
  -- instructions more than one's four returned values (docs/BENCHMARKS.md);
  -- check_algo_diff's plain_runs_answer_as_each_check_alone holds the two
  -- together (a run against each of its checks alone).
  local plain, one = nil, nil
  if not periodic then
    local pcall_ = redis.pcall
    one = function(sp, key, bkey, now, cost)
      -- read_first's reads: the block key's errors are no block; the
      -- key's (WRONGTYPE) are this check's answer, returned, not raised
      -- (the driver calls a plain check without a pcall)
      local v = pcall_('GET', key)
      local e = pcall_('GET', bkey)
      e = e and tonumber(e)
      local limit, W = sp[3], sp[4]
      local count, start, left = 0, 0, 0
      if v then
        local c, s
        if #v == 16 then
          c, s = unpack_state('<dd', v)
          if not (c >= 0 and c < 9007199254740992 and c % 1 == 0 and
                  s >= 0 and s < 9007199254740992 and s % 1 == 0) then c = nil end
        end
        -- the text layout of 0.1, or no state
        if c == nil then
          if v.err then return { err = tostring(v.err) }, 0, 0, 0 end
          c, s = state2(v)
        end
        if c then count, start = c, s end
        if count > 0 then
          left = start + W - now
          if left <= 0 then count, left = 0, 0 end
        end
      end
      local blocked = e and e > now
      if cost > 0 and cost <= limit and count + cost <= limit and not blocked then
        if count == 0 then
          -- commit's new window: no call once its memo holds this one
          if cost ~= f_cost or now ~= f_now or W ~= f_W then open(now, W, cost) end
          call('SET', key, f_value, 'PX', f_ttl)
          return 1, limit - cost, f_reset, 0
        end
        -- commit's open window: ceil_ms(left) is its reset and TTL
        count = count + cost
        if count > UNITS_MAX then count = UNITS_MAX end
        local reset = (left + 999) / 1000
        reset = reset - reset % 1
        call('SET', key, pack_state('<dd', count, start), 'PX', format('%d', reset))
        return 1, limit - count, reset, 0
      end
      -- nothing counted: peek's answer, a key found without a TTL repaired
      local reset, retry = ceil_ms(left), 0
      if cost > limit then retry = -1 elseif count + cost > limit then retry = reset end
      if v then repair_ttl(key, left) end
      if blocked then return -ceil_ms(e - now), limit - count, reset, retry end
      if retry ~= 0 then return 0, limit - count, reset, retry end
      return 1, limit - count, reset, 0
    end

    plain = function(sp, now, cost, out, o, k, b, s, c)
      local limit, W = sp[3], sp[4]
      repeat
        local key = KEYS[k + 1]
        -- read_first's reads: the block key's errors are no block; the
        -- key's (WRONGTYPE) are this check's answer, not raised (the
        -- driver calls a plain check without a pcall)
        local v = pcall_('GET', key)
        local e = pcall_('GET', ARGV[b + 2])
        e = e and tonumber(e)
        local count, start, left, bad = 0, 0, 0, false
        if v then
          local n, t
          if #v == 16 then
            n, t = unpack_state('<dd', v)
            if not (n >= 0 and n < 9007199254740992 and n % 1 == 0 and
                    t >= 0 and t < 9007199254740992 and t % 1 == 0) then n = nil end
          end
          -- the text layout of 0.1, or no state
          if n == nil then
            if v.err then bad = true else n, t = state2(v) end
          end
          if n then count, start = n, t end
          if count > 0 then
            left = start + W - now
            if left <= 0 then count, left = 0, 0 end
          end
        end
        local blocked = e and e > now
        if bad then
          out[o + 1], out[o + 2], out[o + 3], out[o + 4] = { err = tostring(v.err) }, 0, 0, 0
        elseif cost > 0 and cost <= limit and count + cost <= limit and not blocked then
          if count == 0 then
            -- commit's new window: no call once its memo holds this one
            if cost ~= f_cost or now ~= f_now or W ~= f_W then open(now, W, cost) end
            call('SET', key, f_value, 'PX', f_ttl)
            out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 1, limit - cost, f_reset, 0
          else
            -- commit's open window: ceil_ms(left) is its reset and TTL
            count = count + cost
            if count > UNITS_MAX then count = UNITS_MAX end
            local reset = (left + 999) / 1000
            reset = reset - reset % 1
            call('SET', key, pack_state('<dd', count, start), 'PX', format('%d', reset))
            out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 1, limit - count, reset, 0
          end
        else
          -- nothing counted: peek's answer, a key found without a TTL repaired
          local reset, retry, a = ceil_ms(left), 0, 1
          if cost > limit then retry = -1 elseif count + cost > limit then retry = reset end
          if v then repair_ttl(key, left) end
          if blocked then a = -ceil_ms(e - now) elseif retry ~= 0 then a = 0 end
          out[o + 1], out[o + 2], out[o + 3], out[o + 4] = a, limit - count, reset, retry
        end
        o, k, b = o + 4, k + 1, b + 3
      until ARGV[b] ~= s or ARGV[b + 1] ~= c
      return o, k, b
    end
  end

  if not with_give then return peek, commit, nil, plain, one end
  -- the count down by units, floored at 0 (then no key); the window stays
  local function give(key, now, limit, W, burst, units, count, start, e)
    if count == 0 then return end
    count = count - units
    if count <= 0 then
      call('DEL', key)
      return
    end
    call('SET', key, pack_state('<dd', count, start), 'PX',
         format('%d', ttl_ms((e or start + W) - now)))
  end

  return peek, commit, give, plain, one
end

MODULES['fw'] = function(with_give) return fixed_window(with_give, false, false) end
MODULES['fwa'] = function(with_give) return fixed_window(with_give, true, false) end
PERIODIC['fwp'] = true
MODULES['fwp'] = function(with_give) return fixed_window(with_give, false, true) end
