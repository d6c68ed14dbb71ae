-- intmath.lua: exact integer arithmetic for the algorithms whose numbers are
-- products of a count and a duration (sliding_window_counter, token_bucket,
-- gcra).  Lua numbers are doubles, exact only below 2^53, and limit x window
-- reaches 2^66 (1e9 units per day in microseconds); the C twins use 128-bit
-- products.  Here a product is formed only when it stays below 2^53; past
-- that, muldiv works on 5-bit digits and keeps every intermediate value below
-- 2^53, so both languages get the same floor and remainder.

-- floor(x / c) and x - c * floor(x / c), for integers 0 <= x < 2^53, c > 0.
local function divmod(x, c)
  local q = math.floor(x / c)
  local r = x - q * c
  -- a correctly rounded x / c never needs this; it costs nothing to be sure
  if r < 0 then
    q, r = q - 1, r + c
  elseif r >= c then
    q, r = q + 1, r - c
  end
  return q, r
end

-- floor(a * b / c) and (a * b) mod c, exactly, for integers a, b >= 0 and
-- 0 < c <= 2^47, as long as the quotient is below 2^53.
local function muldiv(a, b, c)
  local p = a * b
  -- a product below 2^53 is exact, and one that is not cannot round below it
  if p < 9007199254740992 then return divmod(p, c) end
  local bq, br = divmod(b, c)
  -- a * br / c, one 5-bit digit of a at a time, most significant first:
  -- with r < c <= 2^47, r * 32 + digit * br < 63 * 2^47 < 2^53.
  local m = 1
  while m * 32 <= a do m = m * 32 end
  local q, r = 0, 0
  while m >= 1 do
    local hq, hr = divmod(r * 32 + (math.floor(a / m) % 32) * br, c)
    q, r = q * 32 + hq, hr
    m = m / 32
  end
  return a * bq + q, r
end
