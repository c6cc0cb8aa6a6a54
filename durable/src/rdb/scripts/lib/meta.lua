-- lib/meta.lua: meta's clock (Redis TIME or the manual clock) and counters.

-- The clock's last reading (`meta`), as whole seconds and microseconds within the
-- second: what a relative due time is counted from (see `arg_when`).
local CLOCK_S, CLOCK_US = 0, 0

-- ARGV[i] when it is a time argument: 'a<ms>' (at that time) or 'r<us>' (that long
-- after the clock's last reading, `meta`'s), as the due time in ms. A relative time is
-- due never before that instant, to the microsecond, rounded up to the ms (counted from
-- "now" in whole ms, it could be due up to 0.999 ms early); exact in doubles below 2^50
-- us (35 years), and past that a millisecond later than the rounded sum, which is never
-- early either.
function arg_when(i)
  local kind, t = string.match(ARGV[i] or '', '^([ar])(%d+)$')
  if kind == nil then
    error({ err = 'ERR bad argument ' .. i .. ' (when): ' .. string.format('%q', tostring(ARGV[i])) })
  end
  t = tonumber(t)
  if kind == 'a' then
    return t
  elseif t <= 0 then
    -- Due at the reading itself: due now, by the clock's own (rounded down) "now".
    return CLOCK_S * 1000 + (CLOCK_US - CLOCK_US % 1000) / 1000
  elseif t < 2 ^ 50 then
    return CLOCK_S * 1000 + math.ceil((CLOCK_US + t) / 1000)
  end
  return CLOCK_S * 1000 + math.ceil(t / 1000) + 1
end

-- `ms` after the clock's last reading (`meta`'s), rounded up to the ms: never before
-- that instant, as `arg_when`'s relative times (`now + ms` could be up to 0.999 ms
-- early, "now" being rounded down). 0 or less: "now" itself.
function after_ms(ms)
  if ms <= 0 then
    return CLOCK_S * 1000 + (CLOCK_US - CLOCK_US % 1000) / 1000
  end
  return CLOCK_S * 1000 + math.ceil((CLOCK_US + ms * 1000) / 1000)
end

-- "Now" in ms on this queue's clock, rounded down ("now" never runs ahead): meta's
-- `clock` (a manual clock, which only tests set) or Redis TIME; then meta's fields
-- named (at most four), as stored (strings, or false when missing). One HMGET.
function meta(...)
  local v = read('hash', 'HMGET', META, 'clock', ...)
  local manual = v[1] and tonumber(v[1])
  if v[1] and not manual then
    garbage(META, 'field clock is ' .. string.format('%q', v[1]) .. ', not a number')
  elseif manual then
    CLOCK_S, CLOCK_US = math.floor(manual / 1000), (manual % 1000) * 1000
    return manual, v[2], v[3], v[4], v[5]
  end
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  CLOCK_S, CLOCK_US = s, us
  return s * 1000 + (us - us % 1000) / 1000, v[2], v[3], v[4], v[5]
end

-- Adds `by` to meta's counter `field` (`n_<name>`: what /metrics reports, cluster-wide):
-- one HINCRBY, only when there is something to count.
function count(field, by)
  if by > 0 then
    -- A number argument costs Redis a printf; the common 1 is sent as text.
    local text = by == 1 and '1' or string.format('%d', by)
    local r = redis.pcall('HINCRBY', META, field, text)
    if type(r) == 'table' and r.err then
      if not string.find(r.err, 'not an integer', 1, true) then
        -- Not the value's fault (acl_check has checked the grant): Redis's own error.
        error(r)
      end
      -- A counter that is not an integer starts again, rather than fail a script that
      -- has written already (meta's type was checked when the script read it).
      redis.call('HSET', META, field, text)
    end
  end
end
