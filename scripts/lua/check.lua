-- check.lua: decide a batch of checks, each with every limit of its policy,
-- in one atomic call.  The daemon coalesces the checks that arrive in one
-- event-loop pass into one call, so the script's fixed cost (defining the
-- modules above, reading TIME) is paid once per batch, not once per check.
--
-- KEYS     the keys of every check, in order (a check's keys share one
--          Cluster hash tag): its limits' keys, then its once key (a 'once'
--          check only)
-- ARGV[1]  now in microseconds, or '' to read Redis TIME (the daemon always
--          sends ''; tests drive time explicitly)
-- ARGV[2]  n, the number of checks
-- then per check:
--   spec   its policy's limits, "<tag> <limit> <window_ms> <burst>" each,
--          separated by one space ("fw 100 60000 0 gcra 5 1000 5"), the
--          tag naming the module ('fwa': a fixed window aligned to the
--          epoch, whose keys still say 'fw'; 'fwp' and 'swcp': a calendar
--          period's, whose window is "b0,b1,b2,b3,b4,b5", the Unix seconds
--          at which six consecutive periods start, the daemon's clock in
--          the third: see period_frame in prelude.lua): the
--          same bytes for every check of a policy, so the daemon prebuilds
--          them and the script converts them once per call, not per check
--   cost   the cost (0 asks without consuming, < 0 gives back), then the
--          flags, in this order: 'f', force (consume the cost even when it
--          does not fit), 'o', once, 'r', reset, 'b', block, 'l', take a
--          lease (the policy's concurrency limit holds a slot under the
--          lease's id when the check is allowed), 'x', release (give the
--          lease's slot back: an admin check), 'd', delay (a check that
--          would fit within max_delay ms is reserved: consumed now, as if
--          forced, and answered 2), 'c', charge (consume the cost past
--          every limit, the block too, with nothing of it lost: see charge
--          below; never with 'l', 'x', 'd', 'r', 'b'), 'v', reserve (an
--          allowed check also writes its reservation's record: see reserve
--          below; with 'l' only), 's', settle a reservation (the cost is the
--          real one; alone: see settle below), 'i', list the key's open
--          reservations (cost 0, alone: see rsv_list below) ("3", "1f",
--          "2o", "2fo", "0r", "-3", "0rb", "1l", "0x", "1d", "1ld", "900c",
--          "5oc", "500v", "1lv", "420s", "0i")
--   block  the check's block key (same hash tag; see below)
--   lease  only for an 'l' or 'x' check: the lease's id (concurrency.lua)
--   max_delay  only for a 'd' check: in ms
--   px     only for a 'v' check: twice the policy's reservation_ttl, in ms
--          (how long its record is kept)
--   est    only for an 's' check: the estimate its reservation took
--   member only for a 'v' or 's' check: its reservation's record, "<32 hex
--          digits>.<estimate>.<limits hash>" (src/reservation.h): a settle
--          of another estimate, limits or nonce names another member
--   seq    only for a 'once' check: its writer's seq.  Such a check has one
--          more key after its limits' keys, the writer's last applied seq;
--          a seq not above it was applied already (a hybrid sync sent again
--          after its connection was lost): the check then only peeks.
--          A 'v', 's' or 'i' check has one more key after its limits' keys
--          instead, the key's reservations, "<key>:rsv": a sorted set of
--          the open records (member), each scored with its deadline (us).
--   index  only for a 'reset': the limit to reset (0 is the first), or -1
--          for every limit and the block
--   ms     only for a 'block': block for this long; 0 lifts the block
--
-- The block key holds the block's end (us, this script's clock) and expires
-- with it.  It is read by one GET next to the first limit's (read_first).
-- It is an argument, not one of KEYS, on purpose: it rarely exists, and a
-- Redis Cluster node answers a call whose keys are partly missing while
-- their slot migrates with TRYAGAIN, so with it among KEYS every check of a
-- migrating slot would fail until the move ends.  Undeclared, it is read
-- in the slot of the check's keys; where a migrating node cannot read it
-- here (it has moved, or never existed), the check goes on unblocked: a
-- block may be missed only while its slot migrates, and an admin operation
-- then fails (its check alone).
--
-- Returns one flat array: per check, allowed (1 or 0, or -blocked_ms while
-- the key is blocked: denied; 2 a reservation of a 'd' check: allowed after
-- the longest retry_after_ms of its limits; for a release, 1 when the lease
-- was held and had not ended, else 0), then per limit remaining, reset_ms,
-- retry_after_ms (zeros for a release: it reads nothing else).  remaining
-- < 0 is an overdraft of -remaining units (the daemon answers remaining 0
-- and that overdraft): what a charge, a penalty or a sync left past the
-- limit.  A settle answers 3 in place of allowed for a reservation it
-- does not hold (settled, never taken, or not the claim it was taken with),
-- 4 for one whose reservation_ttl has passed (then zeros); a settled one
-- answers as a charge does.  An 'i' check's answer (a check of cost 0)
-- is followed by its key's open reservations: their number, then
-- RSV_LIST (estimate, expires_in_ms) pairs, the soonest to end first,
-- zeros past the last (the length of every answer is known to the
-- daemon in advance).  A check is
-- allowed only when every limit allows it and the key is not blocked; a
-- denied check consumes nothing from any limit (unless forced).  An admin
-- check (reset, block, or a negative cost: give back, always applied) does
-- its operation, then answers as a check of cost 0; a release answers only
-- what it released.  Checks run in order, so two checks of one key in a
-- batch see each other exactly as two calls would.
--
-- Each check succeeds or fails on its own, as separate calls would: one
-- whose command fails (a key of the wrong type, WRONGTYPE) answers an error
-- in place of its `allowed`, then zeros, and the others of the batch are
-- decided as usual.  Every error can only come from peek's reads (the
-- writes are SETs and ZADDs to keys peek read as the right type, and DELs;
-- an admin check reads everything it needs before it writes), so a failed
-- check has written nothing.

-- A calendar period's boundaries as the spec gives them, "b0,b1,...,b5" in
-- seconds -> { b0, ..., b5 } in us (period_frame in prelude.lua); nil when
-- they are not six rising whole numbers.
local function bounds_of(s)
  local B, n = {}, 0
  for x in string.gmatch(s, '[^,]+') do
    local v = tonumber(x)
    n = n + 1
    if v == nil or v % 1 ~= 0 or v < 0 or v > 9007199254 or (n > 1 and v * 1000000 <= B[n - 1]) then
      return nil
    end
    B[n] = v * 1000000
  end
  if n == 6 then return B end
end

-- A plain check (cf.plain: cost >= 0, no flag) of a spec of one limit
-- whose module reads its key as read_first does (sp.plain): run1 for it,
-- without the flags' tests and the calls such a check never needs (most
-- checks are these: docs/BENCHMARKS.md, "Redis per check").  A module may
-- give its own, peek and commit in one (fixed_window.lua): the fourth value
-- of its constructor, algo()'s m[4], and its one-check function, m[5].
--
-- The check at ARGV[b] (its spec s, cost c, block key; its key KEYS[k + 1],
-- its answer into out[o + 1] ... out[o + 4]) and every check after it of
-- the same spec and cost, in one call (a batch is mostly runs of one
-- policy's plain checks: a Lua call and the driver's tests per run, not
-- per check) -> o, k, b past them.
--
-- A plain check raises nothing: the driver calls it without a pcall (0.8k
-- instructions a check).  Its key's read is a redis.pcall whose error
-- (WRONGTYPE) is returned as the check's answer, as the pcall answered it;
-- past that read nothing can fail but a period's clock (period_frame), so a
-- period's plain check is run_plain_p, plain1 under a pcall.
--
-- plain1 decides one check (key, bkey): what a call of one check takes
-- (a lone check through run_plain's loop and table costs ~1.5-2k more,
-- docs/BENCHMARKS.md) and a period's run, check by check under a pcall.
-- run_plain's loop is plain1 inline (a Lua call less a check, ~1.3k):
-- the same decision twice, which check_algo_diff's
-- plain_runs_answer_as_each_check_alone holds together (a run against
-- each of its checks alone).
local function plain1(sp, key, bkey, now, cost)
  local v = redis.pcall('GET', key)
  -- an error is a table: its length 0 (a value's length is tested first,
  -- the field read of a string costs ~0.3k instructions)
  if v and #v == 0 and v.err then return { err = tostring(v.err) }, 0, 0, 0 end
  local e = redis.pcall('GET', bkey)
  e = e and tonumber(e)
  local limit, W, burst = sp[3], sp[4], sp[5]
  local ok, rem, reset, retry, repair, a1, a2, a3, a4, a5 = sp[1](key, now, limit, W, burst, cost, v)
  if e and e > now then
    if repair then repair_ttl(key, repair) end
    return -ceil_ms(e - now), rem, reset, retry
  end
  if ok and cost > 0 then
    rem, reset = sp[2](key, now, limit, W, burst, cost, a1, a2, a3, a4, a5)
    return 1, rem, reset, retry
  end
  if repair then repair_ttl(key, repair) end
  return ok and 1 or 0, rem, reset, retry
end

local function run_plain(sp, now, cost, out, o, k, b, s, c)
  local peek, commit, limit, W, burst = sp[1], sp[2], sp[3], sp[4], sp[5]
  local pcall_ = redis.pcall
  repeat
    local key = KEYS[k + 1]
    local v = pcall_('GET', key)
    if v and #v == 0 and v.err then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = { err = tostring(v.err) }, 0, 0, 0
    else
      local e = pcall_('GET', ARGV[b + 2])
      e = e and tonumber(e)
      local ok, rem, reset, retry, repair, a1, a2, a3, a4, a5 = peek(key, now, limit, W, burst, cost, v)
      local a = 1
      if e and e > now then
        a = -ceil_ms(e - now)
      elseif ok and cost > 0 then
        rem, reset = commit(key, now, limit, W, burst, cost, a1, a2, a3, a4, a5)
        repair = nil
      elseif not ok then
        a = 0
      end
      if repair then repair_ttl(key, repair) end
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = a, rem, reset, retry
    end
    o, k, b = o + 4, k + 1, b + 3
  until ARGV[b] ~= s or ARGV[b + 1] ~= c
  return o, k, b
end

-- plain1 under a pcall (a period's)
local function plain1_p(sp, key, bkey, now, cost)
  local ok, a, r, s, t = pcall(plain1, sp, key, bkey, now, cost)
  if ok then return a, r, s, t end
  if type(a) == 'table' then a = a.err end
  return { err = tostring(a) }, 0, 0, 0
end

local function run_plain_p(sp, now, cost, out, o, k, b, s, c)
  repeat
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = plain1_p(sp, KEYS[k + 1], ARGV[b + 2], now, cost)
    o, k, b = o + 4, k + 1, b + 3
  until ARGV[b] ~= s or ARGV[b + 1] ~= c
  return o, k, b
end

-- A spec string -> { per limit peek, commit, limit, W (us; a period's
-- boundaries), burst; n, the number of limits; ttl, the longest window
-- (ms); err, why it cannot run }.
local function spec_of(s)
  local find, sub = string.find, string.sub
  local sp, n, ttl, at, cc = nil, 0, 1000, 1, nil
  while at <= #s do
    local e1 = find(s, ' ', at, true)
    local e2 = e1 and find(s, ' ', e1 + 1, true)
    local e3 = e2 and find(s, ' ', e2 + 1, true)
    local e4 = e3 and (find(s, ' ', e3 + 1, true) or #s + 1)
    if not e4 then
      sp = sp or {}
      sp.err = 'bad spec ' .. s
      break
    end
    local tag = sub(s, at, e1 - 1)
    local m = algo(tag)
    if tag == 'cc' and not cc then cc = n + 1 end
    local l, w, b = tonumber(sub(s, e1 + 1, e2 - 1)), tonumber(sub(s, e2 + 1, e3 - 1)),
                    tonumber(sub(s, e3 + 1, e4 - 1))
    local W = w and w * 1000
    if m and PERIODIC[m[3]] then
      -- the once key lives as long as the daemon's period
      W = bounds_of(sub(s, e2 + 1, e3 - 1))
      w = W and (W[4] - W[3]) / 1000
    end
    local j = 5 * n
    n, at = n + 1, e4 + 1
    if m == nil then
      sp = sp or {}
      sp.err = 'unknown algorithm in ' .. s
    elseif not (l and w and b) or l < 1 or w < 1 then
      sp = sp or {}
      sp.err = 'bad limit in ' .. s
    elseif sp == nil then
      -- the first limit: the table in one allocation, room for n and ttl
      sp = { m[1], m[2], l, W, b, n = 1, ttl = 1000, own = OWN_READ[m[3]],
             plain = not OWN_READ[m[3]] and m[3] ~= 'cc' and
                     (m[4] or (PERIODIC[m[3]] and run_plain_p) or run_plain),
             one = m[5] or (PERIODIC[m[3]] and plain1_p or plain1) }
      if w > ttl then ttl = w end
    else
      sp[j + 1], sp[j + 2], sp[j + 3], sp[j + 4], sp[j + 5] = m[1], m[2], l, W, b
      if w > ttl then ttl = w end
    end
  end
  sp = sp or { err = 'empty spec' }
  -- cc: the index of the concurrency limit, the one that holds leases
  -- ttl as PX takes it: a number would be printed by Redis with '%.17g'
  -- on every once check (prelude.lua)
  sp.n, sp.ttl, sp.cc = n, string.format('%d', ttl), cc
  -- plain: the function a plain check of this spec takes, run_plain or its
  -- module's (one limit whose module reads its key as read_first does, no
  -- lease); false: run1/run.  one: what a lone plain check calls, its
  -- module's one-check function (m[5], with its plain), plain1 or plain1_p
  if n ~= 1 or sp.err then sp.plain = false end
  return sp
end

-- A cost string -> { cost, force, once, reset, block, admin, lease,
-- release, delay, charge (or settle), reserve, settle, args, list; err }: args,
-- the check has arguments after its block key (a plain check's driver
-- then tests one flag, not five).
local function cost_of(s)
  local cf = { tonumber(s), false, false, false, false, false, false, false, false, false,
               false, false, false, false }
  if cf[1] == nil then
    local c, f, o, r, b, l, x, d, ch, v, st, li =
      string.match(s, '^(-?%d+)(f?)(o?)(r?)(b?)(l?)(x?)(d?)(c?)(v?)(s?)(i?)$')
    cf[1], cf[2], cf[3], cf[4], cf[5] = tonumber(c) or 0, f == 'f', o == 'o', r == 'r', b == 'b'
    cf[7], cf[8], cf[9], cf[10] = l == 'l', x == 'x', d == 'd', ch == 'c'
    cf[11], cf[12], cf[14] = v == 'v', st == 's', li == 'i'
    if c == nil then cf.err = 'bad cost ' .. s end
    if cf[10] and (cf[1] < 0 or cf[4] or cf[5] or cf[7] or cf[8] or cf[9]) then
      cf.err = 'bad charge ' .. s
    end
    if cf[11] and (cf[1] < 0 or cf[2] or cf[3] or cf[4] or cf[5] or cf[8] or cf[9] or cf[10]) then
      cf.err = 'bad reserve ' .. s
    end
    if cf[12] and (cf[1] < 0 or cf[2] or cf[3] or cf[4] or cf[5] or cf[7] or cf[8] or cf[9] or
                   cf[10] or cf[11]) then
      cf.err = 'bad settle ' .. s
    end
    if cf[14] and (cf[1] ~= 0 or s ~= '0i') then cf.err = 'bad list ' .. s end
    cf[13] = cf[3] or cf[4] or cf[5] or cf[7] or cf[8] or cf[9] or cf[11] or cf[12] or cf[14]
    -- a settle goes the way of a charge (see run1)
    if cf[12] then cf[10] = true end
  end
  cf[6] = cf[1] < 0 or cf[4] or cf[5] or cf[8]
  -- plain: a check and nothing else (cost >= 0, no flag), run_plain's
  cf.plain = cf[1] >= 0 and not (cf[2] or cf[10] or cf[13] or cf.err)
  return cf
end

-- The first limit's value (false: missing) and the ms until the block ends
-- (0: none).  Two GETs, not one MGET: an MGET answers a table (dearer than a
-- GET: docs/BENCHMARKS.md) and nil for a key of the wrong type, which then
-- needed a GET
-- of its own to fail the check; a GET of the limit's key raises WRONGTYPE
-- itself (this check fails alone), one of the block key answers an error
-- table, taken as no block, as is a block key where a migrating Cluster
-- slot cannot read it (see above).  own: the limit's peek reads its key
-- itself (OWN_READ); only the block is read.
local function read_first(key, bkey, now, own)
  local v = nil
  if not own then v = redis.call('GET', key) end
  local e = redis.pcall('GET', bkey)
  e = e and tonumber(e)
  if e and e > now then return v, ceil_ms(e - now) end
  return v, 0
end

-- An admin check's operation: release, reset, block, give back, in that
-- order; ARGV[a] on are its arguments.  Every read (give back's peeks, of
-- the limits it does not reset) comes before any write but the release's
-- (a release comes alone).  Answers what the release says (nil: none).
local function admin(sp, cf, k, bkey, now, a)
  if cf[8] then
    if not sp.cc then error('a release needs a concurrency limit') end
    return cc_release(KEYS[k + sp.cc], now, cc_lease)
  end
  local call, n = redis.call, sp.n
  local reset, ms, units, st = nil, nil, -cf[1], {}
  if cf[4] then
    reset = tonumber(ARGV[a])
    if reset == nil or reset >= n or reset ~= math.floor(reset) then
      error('bad limit index ' .. tostring(ARGV[a]))
    end
    a = a + 1
  end
  if cf[5] then
    ms = tonumber(ARGV[a])
    if ms == nil or ms < 0 then error('bad block ' .. tostring(ARGV[a])) end
  end
  if reset and reset < 0 then units = 0 end
  for i = 1, n do
    local j = 5 * i - 5
    if units > 0 and reset ~= i - 1 then
      st[i] = { sp[j + 1](KEYS[k + i], now, sp[j + 3], sp[j + 4], sp[j + 5], 0) }
    end
  end
  if reset then
    for i = 1, n do
      if reset < 0 or reset == i - 1 then call('DEL', KEYS[k + i]) end
    end
    if reset < 0 then call('DEL', bkey) end
  end
  if ms and ms > 0 then
    call('SET', bkey, string.format('%d', now + ms * 1000), 'PX', string.format('%d', ms))
  elseif ms then
    call('DEL', bkey)
  end
  for i = 1, n do
    local j, p = 5 * i - 5, st[i]
    if p then
      -- the limit's module (a peek is its module's own), built with give
      local give
      for tag, m in pairs(ALGOS) do
        if m[1] == sp[j + 1] then
          local _, _, g = MODULES[tag](true)
          give = g
        end
      end
      give(KEYS[k + i], now, sp[j + 3], sp[j + 4], sp[j + 5], units, p[6], p[7], p[8], p[9], p[10])
    end
  end
end

-- 'once': whether the writer's seq was applied already
local function applied(once_key, seq)
  local last = redis.call('GET', once_key)
  return last and tonumber(last) >= tonumber(seq)
end

-- SET ... GET (Redis 6.2): one call where a read and a write took two.
-- redis.REDIS_VERSION_NUM exists from 7.0 (a 6.x server, under EVALSHA,
-- takes the two calls).
local SET_GET = (redis.REDIS_VERSION_NUM or 0) >= 0x060200

-- 'once' for a charge: whether the writer's seq was applied already, its
-- seq recorded in the same call when it was not.  A seq found applied (a
-- resend, rare) puts the newer record back, so that it never goes down; a
-- record that is no number (written by hand) is put back too, then fails
-- the check as applied() does.  Called once every read of the charge that
-- can fail has been made but the first limit's own (see charge).
local function applied_record(once_key, seq, ttl)
  local last = redis.call('SET', once_key, seq, 'PX', ttl, 'GET')
  if not last then return false end
  local l = tonumber(last)
  if l and l < tonumber(seq) then return false end
  redis.call('SET', once_key, last, 'PX', ttl)
  return l >= tonumber(seq)
end

-- The max_delay (ms) of the check being run, nil when it is not a 'd' one:
-- set by the driver before each check.
local delay_max = nil
-- A 'v' or 's' check's reservations key, its argument (a 'v' one's px, an
-- 's' one's estimate) and its record (the member): set by the driver
-- before each check (nil: not one).
local rsv_key, rsv_arg, rsv_member = nil, nil, nil

-- A reservation ('v') taken: its record, scored with its deadline (us),
-- half of the time it is kept, so that a settle past the deadline is told
-- apart from one of an id never given (a settle then finds it expired).
-- The records kept that long already go first (so the set holds what is
-- taken within twice the ttl, however long the key lives), and the set
-- lives as long as its newest record.
local function rsv_record(now)
  local call, half = redis.call, rsv_arg * 500
  call('ZREMRANGEBYSCORE', rsv_key, '-inf', string.format('%d', now - half))
  call('ZADD', rsv_key, string.format('%d', now + half), rsv_member)
  call('PEXPIRE', rsv_key, rsv_arg)
end

-- How many reservations an 'i' check lists (RL_RSV_LIST_MAX, backend.h).
local RSV_LIST = 100

-- An 'i' check: the open reservations of key (whose deadline is after
-- now) into out[o + 1]...: their number, then RSV_LIST pairs (estimate,
-- ms until the deadline), the soonest to end first, zeros past the last.
-- Only the estimate of a record is shown: its nonce would settle it.
local function rsv_list(key, now, out, o)
  local call, after = redis.call, '(' .. string.format('%d', now)
  local m = call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', 0, RSV_LIST)
  local n = #m / 2
  out[o + 1] = n < RSV_LIST and n or call('ZCOUNT', key, after, '+inf')
  for i = 1, RSV_LIST do
    local e, t = 0, 0
    if i <= n then
      e = tonumber(string.match(m[2 * i - 1], '^%x+%.(%d+)%.')) or 0
      t = ceil_ms(tonumber(m[2 * i]) - now)
    end
    out[o + 2 * i], out[o + 2 * i + 1] = e, t
  end
end

-- Zeros in place of a list (a failed 'i' check).
local function rsv_no_list(out, o)
  for i = o + 1, o + 1 + 2 * RSV_LIST do out[i] = 0 end
end

-- One limit of a charge: its key's value pre (nil: read it), done (nothing
-- to count) -> ok, remaining, reset_ms, retry_after_ms of a check of cost 0
-- after it.  Commit's numbers are those when the limit is not overdrawn
-- (remaining >= 0: a check of cost 0 fits, now); an overdraft peeks again,
-- from the value commit wrote (no read), or the key (the log, whose peek
-- reads its own), for when it is paid back.
local function charge_limit(sp, j, key, now, cost, pre, done, cc)
  local peek, limit, W, burst = sp[j + 1], sp[j + 3], sp[j + 4], sp[j + 5]
  local ok, rem, reset, retry, repair, a1, a2, a3, a4, a5 = peek(key, now, limit, W, burst, 0, pre)
  if done or cc then
    if reset == nil then reset, repair = cc_late(key, now) end
    if repair then repair_ttl(key, repair) end
    return ok, rem, reset, retry
  end
  charging = true
  local v
  rem, reset, v = sp[j + 2](key, now, limit, W, burst, cost, a1, a2, a3, a4, a5)
  charging = false
  if rem >= 0 then return true, rem, reset, 0 end
  ok, rem, reset, retry = peek(key, now, limit, W, burst, 0, v)
  return ok, rem, reset, retry
end

-- A charge ('c'): every limit's cost counted now, past its limit, during a
-- block too (the block denies checks; a charge records work already done),
-- with nothing of it lost (charging: token_bucket and gcra carry the whole
-- debt, the sliding log forgets no unit); a concurrency limit is not
-- charged (a charge holds no slot).  Answered as a check of cost 0 made
-- right after it.  Its keys from KEYS[k + 1], its answer into out[o + 1]...
-- (out nil: returned, for run1's one limit).
local function charge(sp, cost, k, bkey, once_key, seq, now, out, o)
  local n = sp.n
  local pre, blocked = read_first(KEYS[k + 1], bkey, now, sp.own)
  -- the seq recorded with its read (SET ... GET) once the first limit's
  -- key has been read, which is what can fail (WRONGTYPE) for a policy of
  -- one limit; else (more limits, or a limit whose peek reads its own key)
  -- after the commits, as a check's
  local late = once_key and (sp.n > 1 or sp.own or not SET_GET)
  local done = cost <= 0
  if not done and once_key then
    if late then done = applied(once_key, seq) else done = applied_record(once_key, seq, sp.ttl) end
  end
  local ok, rem, reset, retry = charge_limit(sp, 0, KEYS[k + 1], now, cost, pre, done,
                                             sp.cc == 1)
  local allowed = blocked == 0 and ok
  if out == nil then
    if not done and late then redis.call('SET', once_key, seq, 'PX', sp.ttl) end
    if blocked > 0 then return -blocked, rem, reset, retry end
    return allowed and 1 or 0, rem, reset, retry
  end
  out[o + 2], out[o + 3], out[o + 4] = rem, reset, retry
  for i = 2, n do
    ok, out[o + 3 * i - 1], out[o + 3 * i], out[o + 3 * i + 1] =
      charge_limit(sp, 5 * i - 5, KEYS[k + i], now, cost, nil, done, sp.cc == i)
    if not ok then allowed = false end
  end
  if not done and late then redis.call('SET', once_key, seq, 'PX', sp.ttl) end
  if blocked > 0 then out[o + 1] = -blocked elseif allowed then out[o + 1] = 1
  else out[o + 1] = 0 end
end

-- Give `units` back to every limit but a concurrency one (a settle's
-- estimate was never a slot), as an admin's give back does.
-- The give of each module, by its peek: built once per library (FCALL).
local GIVES = {}
local function give_back(sp, k, now, units)
  for i = 1, sp.n do
    local j = 5 * i - 5
    if sp.cc ~= i then
      local key, limit, W, burst, peek = KEYS[k + i], sp[j + 3], sp[j + 4], sp[j + 5], sp[j + 1]
      local give = GIVES[peek]
      if give == nil then
        for tag, m in pairs(ALGOS) do
          if m[1] == peek then
            local _, _, g = MODULES[tag](true)
            give = g
          end
        end
        GIVES[peek] = give
      end
      local _, _, _, _, _, a1, a2, a3, a4, a5 = peek(key, now, limit, W, burst, 0)
      give(key, now, limit, W, burst, units, a1, a2, a3, a4, a5)
    end
  end
end

-- A settle ('s') of the reservation whose record is rsv_member of rsv_key
-- (its name holds the estimate and limits the id claims), at the real
-- cost: when the record is there and its deadline has not passed, it goes
-- (the ZREM: of two settles, one finds it) and the
-- difference from the estimate (rsv_arg) is applied, more charged past the
-- limit (as a charge), less given back (as a give back); answered as a
-- charge is.  Else nothing changes and the answer is 3 (no such
-- reservation) or 4 (its ttl passed: it stays charged at its estimate, and
-- its record goes), then zeros.  Answers as charge does (out nil: returned,
-- for run1).
local function settle(sp, cost, k, bkey, now, out, o)
  local v = redis.call('ZSCORE', rsv_key, rsv_member)
  local code = nil
  if not v then
    code = 3
  else
    redis.call('ZREM', rsv_key, rsv_member)
    if tonumber(v) <= now then code = 4 end
  end
  if code then
    if out == nil then return code, 0, 0, 0 end
    out[o + 1] = code
    for i = o + 2, o + 1 + 3 * sp.n do out[i] = 0 end
    return
  end
  local d = cost - tonumber(rsv_arg)
  if d < 0 then
    give_back(sp, k, now, -d)
    d = 0
  end
  return charge(sp, d, k, bkey, nil, nil, now, out, o)
end

-- One check of one limit (most checks), its keys from KEYS[k + 1], its
-- admin arguments from ARGV[a]: allowed (1, 0 or -blocked_ms), remaining,
-- reset_ms, retry_after_ms.
local function run1(sp, cf, k, bkey, once_key, seq, now, a)
  if sp.err or cf.err then error(sp.err or cf.err) end
  local cost, force, limit, W, burst = cf[1], cf[2], sp[3], sp[4], sp[5]
  if cf[10] then
    if cf[12] then return settle(sp, cost, k, bkey, now) end
    return charge(sp, cost, k, bkey, once_key, seq, now)
  end
  -- a release answers only whether the lease was held: nothing else is read
  if cf[8] then return admin(sp, cf, k, bkey, now, a), 0, 0, 0 end
  if cf[6] then
    admin(sp, cf, k, bkey, now, a)
    cost, force = 0, false
  end
  local key = KEYS[k + 1]
  local v, blocked = read_first(key, bkey, now, sp.own)
  local ok, rem, reset, retry, repair, a1, a2, a3, a4, a5 = sp[1](key, now, limit, W, burst, cost, v)
  -- a slot's end is a bound, not a promise: never reserved for
  local reserve = delay_max and not ok and blocked == 0 and retry >= 0 and retry <= delay_max and
                  not sp.cc
  if ((ok and blocked == 0) or force or reserve) and cost > 0 and
     not (once_key and applied(once_key, seq)) then
    reserving = reserve and true or false
    rem, reset = sp[2](key, now, limit, W, burst, cost, a1, a2, a3, a4, a5)
    reserving = false
    -- kept as long as the counts it guards; the seq as the daemon wrote it
    if once_key then redis.call('SET', once_key, seq, 'PX', sp.ttl) end
    if rsv_key and ok and blocked == 0 then rsv_record(now) end
  else
    -- a peek that left them to be read when no slot is taken (concurrency)
    if reset == nil then reset, repair = cc_late(key, now) end
    if repair then repair_ttl(key, repair) end
  end
  if reserve and cost > 0 then return 2, rem, reset, retry end
  if blocked > 0 then return -blocked, rem, reset, retry end
  if ok then return 1, rem, reset, retry end
  return 0, rem, reset, retry
end

-- One check of several limits, its keys from KEYS[k + 1], its admin
-- arguments from ARGV[a], its answer into out[o + 1]...; st holds peek's
-- answers per limit, reused.
local function run(sp, cf, k, bkey, once_key, seq, now, out, o, st, a)
  if sp.err or cf.err then error(sp.err or cf.err) end
  local n, cost, force = sp.n, cf[1], cf[2]
  local rems, resets, retries, repairs = st[1], st[2], st[3], st[4]
  local s1, s2, s3, s4, s5 = st[5], st[6], st[7], st[8], st[9]
  if cf[10] then
    if cf[12] then return settle(sp, cost, k, bkey, now, out, o) end
    return charge(sp, cost, k, bkey, once_key, seq, now, out, o)
  end
  if cf[8] then
    out[o + 1] = admin(sp, cf, k, bkey, now, a)
    for i = o + 2, o + 1 + 3 * n do out[i] = 0 end
    return
  end
  if cf[6] then
    admin(sp, cf, k, bkey, now, a)
    cost, force = 0, false
  end
  local pre, blocked = read_first(KEYS[k + 1], bkey, now, sp.own)
  local allowed = blocked == 0
  for i = 1, n do
    local j = 5 * i - 5
    local ok
    ok, rems[i], resets[i], retries[i], repairs[i], s1[i], s2[i], s3[i], s4[i], s5[i] =
      sp[j + 1](KEYS[k + i], now, sp[j + 3], sp[j + 4], sp[j + 5], cost, pre)
    pre = nil
    if not ok then allowed = false end
  end
  local reserve = delay_max and not allowed and blocked == 0 and cost > 0
  for i = 1, n do
    if reserve and (retries[i] < 0 or retries[i] > delay_max) then reserve = false end
  end
  -- a slot's end is a bound, not a promise: reserved only with a slot free
  if reserve and sp.cc and retries[sp.cc] > 0 then reserve = false end
  if allowed then out[o + 1] = 1 elseif reserve then out[o + 1] = 2
  elseif blocked > 0 then out[o + 1] = -blocked
  else out[o + 1] = 0 end
  if (allowed or force or reserve) and cost > 0 and not (once_key and applied(once_key, seq)) then
    reserving = reserve and true or false
    for i = 1, n do
      local j = 5 * i - 5
      out[o + 3 * i - 1], out[o + 3 * i] =
        sp[j + 2](KEYS[k + i], now, sp[j + 3], sp[j + 4], sp[j + 5], cost,
                  s1[i], s2[i], s3[i], s4[i], s5[i])
      out[o + 3 * i + 1] = retries[i]
    end
    reserving = false
    if once_key then redis.call('SET', once_key, seq, 'PX', sp.ttl) end
    if rsv_key and allowed then rsv_record(now) end
  else
    for i = 1, n do
      -- a peek that left them to be read when no slot is taken (concurrency)
      if resets[i] == nil then resets[i], repairs[i] = cc_late(KEYS[k + i], now) end
      local r = repairs[i]
      if r then repair_ttl(KEYS[k + i], r) end
      out[o + 3 * i - 1], out[o + 3 * i], out[o + 3 * i + 1] = rems[i], resets[i], retries[i]
    end
  end
end

-- Specs and costs as read from their strings, kept while the library lives
-- (FCALL): a policy's limits are read once, not on every call (most calls
-- carry one check).  Under EVALSHA the whole script runs per call: they last
-- one call, as before.  Bounded: old policies do not pile up over reloads.
local SPECS, COSTS, NCACHED = {}, {}, 0
local function cached(s, c)
  local sp, cf = SPECS[s], COSTS[c]
  if sp == nil or cf == nil then
    if NCACHED >= 512 then SPECS, COSTS, NCACHED = {}, {}, 0 end
    if sp == nil then sp = spec_of(s); SPECS[s] = sp end
    if cf == nil then cf = cost_of(c); COSTS[c] = cf end
    NCACHED = NCACHED + 1
  end
  return sp, cf
end

-- Everything above only defines; from the next line on is the call.  Under
-- EVALSHA (a server without FUNCTION) Redis runs the whole script on every
-- call.  As a function library (FCALL) the definitions run once per library
-- (at its first call): scripts/embed-lua.sh makes the lines from the marker
-- on the body of the function it calls, after setting KEYS and ARGV (the
-- library's upvalues there, Redis's globals here).  The same Lua on both.
-- @call
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- one check of one limit (coalescing off, or a quiet moment): no tables,
-- and no tonumber for n (glibc's strtod, even for '1': docs/BENCHMARKS.md)
if ARGV[2] == '1' then
  local sp, cf = cached(ARGV[3], ARGV[4])
  if sp.plain and cf.plain then
    -- it raises nothing (run_plain): its error is its answer's first;
    -- a function of one check, not the run's (its loop and table cost a
    -- lone check ~2k instructions: docs/BENCHMARKS.md)
    local a, r, s, t = sp.one(sp, KEYS[1], ARGV[5], now, cf[1])
    return { a, r, s, t }
  end
  if sp.n == 1 then
    local once_key, seq, ab = nil, nil, 6
    cc_lease, delay_max, rsv_key = nil, nil, nil
    if cf[13] then
      if cf[7] or cf[8] then cc_lease, ab = ARGV[6], 7 end
      if cf[9] then delay_max, ab = tonumber(ARGV[ab]), ab + 1 end
      if cf[11] or cf[12] then
        rsv_key, rsv_arg, rsv_member, ab = KEYS[2], ARGV[ab], ARGV[ab + 1], ab + 2
      end
      if cf[3] then once_key, seq, ab = KEYS[2], ARGV[ab], ab + 1 end
      if cf[14] then
        -- a check of cost 0 then the list (see rsv_list)
        local out = {}
        local ok, a, r, s, t = pcall(run1, sp, cf, 0, ARGV[5], nil, nil, now, ab)
        local lok, lerr = true, nil
        if ok then lok, lerr = pcall(rsv_list, KEYS[2], now, out, 4) end
        if ok and lok then
          out[1], out[2], out[3], out[4] = a, r, s, t
        else
          if ok then a = lerr end
          if type(a) == 'table' then a = a.err end
          out[1], out[2], out[3], out[4] = { err = tostring(a) }, 0, 0, 0
          rsv_no_list(out, 4)
        end
        return out
      end
    end
    local ok, a, r, s, t = pcall(run1, sp, cf, 0, ARGV[5], once_key, seq, now, ab)
    if ok then return { a, r, s, t } end
    if type(a) == 'table' then a = a.err end
    return { { err = tostring(a) }, 0, 0, 0 }
  end
end

local out, st = {}, nil
local o, k, b, i, ncheck = 0, 0, 3, 0, tonumber(ARGV[2])
while i < ncheck do
  local s, c = ARGV[b], ARGV[b + 1]
  local sp, cf = SPECS[s], COSTS[c]
  if sp == nil or cf == nil then sp, cf = cached(s, c) end
  local plain = cf.plain and sp.plain
  if plain then
    -- it raises nothing (run_plain): its error is its answer's first;
    -- it decides the checks of this spec and cost that follow too
    local k0 = k
    o, k, b = plain(sp, now, cf[1], out, o, k, b, s, c)
    i = i + k - k0
  else
    i = i + 1
    local n, once_key, seq, bkey = sp.n, nil, nil, ARGV[b + 2]
    b = b + 3
    cc_lease, delay_max, rsv_key = nil, nil, nil
    if cf[13] then
      if cf[7] or cf[8] then
        cc_lease = ARGV[b]
        b = b + 1
      end
      if cf[9] then
        delay_max = tonumber(ARGV[b])
        b = b + 1
      end
      if cf[11] or cf[12] then
        rsv_key, rsv_arg, rsv_member = KEYS[k + n + 1], ARGV[b], ARGV[b + 1]
        b = b + 2
      end
      -- an 'i' check: its list's key (a check of cost 0 writes nothing there)
      if cf[14] then rsv_key = KEYS[k + n + 1] end
      if cf[3] then
        once_key, seq = KEYS[k + n + 1], ARGV[b]
        b = b + 1
      end
    end
    local a = b
    if cf[13] then
      if cf[4] then b = b + 1 end
      if cf[5] then b = b + 1 end
    end
    local ok, err, x2, x3, x4
    if n == 1 then
      ok, err, x2, x3, x4 = pcall(run1, sp, cf, k, bkey, once_key, seq, now, a)
      if ok then out[o + 1], out[o + 2], out[o + 3], out[o + 4] = err, x2, x3, x4 end
    else
      if st == nil then st = { {}, {}, {}, {}, {}, {}, {}, {}, {} } end
      ok, err = pcall(run, sp, cf, k, bkey, once_key, seq, now, out, o, st, a)
    end
    if not ok then
      -- redis.call raises a table { err = "WRONGTYPE ..." }, Lua a string
      if type(err) == 'table' then err = err.err end
      out[o + 1] = { err = tostring(err) }
      for i = o + 2, o + 1 + 3 * n do out[i] = 0 end
    end
    o = o + 1 + 3 * n
    k = k + n
    if once_key or rsv_key then
      k = k + 1
      if cf[14] then
        -- an 'i' check: its list (see rsv_list)
        local lok = ok and pcall(rsv_list, rsv_key, now, out, o)
        if not lok then
          if ok then out[o - 3 * n] = { err = 'the reservations could not be read' } end
          rsv_no_list(out, o)
        end
        o = o + 1 + 2 * RSV_LIST
      end
    end
  end
end
return out
