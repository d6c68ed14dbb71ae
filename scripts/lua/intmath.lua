-- intmath.lua: exact integer arithmetic for the algorithms whose numbers are
-- products of a count and a duration (sliding_window_counter, token_bucket,
-- gcra).  Lua numbers are doubles, exact only below 2^53, and limit x window
-- reaches 2^66 (1e9 units per day in microseconds); the C twins use 128-bit
-- products.  Here a product is formed only when it stays below 2^53; past
-- that, muldiv splits it so that every intermediate value stays below 2^53,
-- and both languages get the same floor and remainder.

-- Built by the modules that need it (a call pays for what it uses).
local function intmath()
  -- floor(x / c) and x - c * floor(x / c), for integers 0 <= x < 2^53, c > 0.
  local function divmod(x, c)
    local q = x / c
    q = q - q % 1
    local r = x - q * c
    -- a correctly rounded x / c never needs this; it costs nothing to be sure
    if r < 0 then
      q, r = q - 1, r + c
    elseif r >= c then
      q, r = q + 1, r - c
    end
    return q, r
  end

  -- floor(a * b / c) and (a * b) mod c for 0 <= b < c <= 2^31: a is split
  -- into hi * 2^21 + lo, so that r * 2^21 + lo * b < 2^21 * c + 2^21 * c
  -- <= 2^53.  Limits up to 2^31 (realistic ones: up to 1e9) take this path,
  -- at most three rounds for a window of a year.
  local function muldiv31(a, b, c)
    local p = a * b
    if p < 9007199254740992 then return divmod(p, c) end
    local hi = a / 2097152
    hi = hi - hi % 1
    local q, r = muldiv31(hi, b, c)
    local q2, r2 = divmod(r * 2097152 + (a - hi * 2097152) * b, c)
    return q * 2097152 + q2, r2
  end

  -- floor(a * b / c) and (a * b) mod c, exactly, for integers a, b >= 0 and
  -- 0 < c <= 2^51 (UNITS_MAX: a divisor is a window in us, a limit or a
  -- count), as long as the quotient is below 2^53.
  local function muldiv(a, b, c)
    local p = a * b
    -- a product below 2^53 is exact, and one that is not cannot round below it
    if p < 9007199254740992 then return divmod(p, c) end
    local bq, br = divmod(b, c)
    if c <= 2147483648 then
      local q, r = muldiv31(a, br, c)
      return a * bq + q, r
    end
    -- a * br / c, one 5-bit digit of a at a time, most significant first:
    -- with r < c <= 2^47, r * 32 + digit * br < 63 * 2^47 < 2^53; a larger
    -- c (a count or a limit past 2^47, only with budgets) one bit at a
    -- time: r * 2 + bit * br < 3 * 2^51 < 2^53.
    local base = 32
    if c > 140737488355328 then base = 2 end
    local m = 1
    while m * base <= a do m = m * base end
    local q, r = 0, 0
    while m >= 1 do
      local hq, hr = divmod(r * base + (floor(a / m) % base) * br, c)
      q, r = q * base + hq, hr
      m = m / base
    end
    return a * bq + q, r
  end
  return divmod, muldiv
end
