-- lib/reads.lua: what a script is sent and what it reads, checked: an argument that is
-- not what the Rust side sends, or a key of the wrong type, is an error naming it.

function int(n)
  return string.format('%d', n)
end

function garbage(key, what)
  error({ err = 'GARBAGE in ' .. key .. ': ' .. what })
end

-- The keys this call has found to hold the right type (or nothing), by name.
local TYPED = {}

-- Runs the command `cmd` on `key`, which should hold a `want`: its answer; or, if Redis
-- refuses it, GARBAGE naming the key if it holds another type (where Redis would say
-- WRONGTYPE without naming it), else Redis's error (a permission error, say). The key
-- then counts as checked (see `expect`). A script reads or checks every
-- key it will write before its first write, so that it either changes nothing or
-- finishes (Redis does not undo a script's writes when a later command of it fails).
-- A script's first write can go through `read` too, instead of a check and then the
-- write: if `key` holds another type, the error names it and nothing was written.
function read(want, cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    local found = redis.call('TYPE', key)['ok']
    if found ~= 'none' and found ~= want then
      garbage(key, 'expected a ' .. want .. ', found a ' .. found)
    end
    error(r)
  end
  TYPED[key] = true
  return r
end

-- Raises GARBAGE for `key` if it holds a type other than `want` (a missing key is
-- fine), by the cheapest read of that type (an integer answer; `TYPE` answers a status,
-- which costs Redis more to hand to Lua). A key checked or read already in this call is
-- not asked again.
function expect(key, want)
  if TYPED[key] then
    return
  end
  if want == 'zset' then
    read('zset', 'ZCARD', key)
  elseif want == 'hash' then
    read('hash', 'HLEN', key)
  elseif want == 'set' then
    read('set', 'SCARD', key)
  else
    read('list', 'LLEN', key)
  end
end

-- ARGV[i] as an integer at least `min` (0 if nil) and at most `max` (if given), or an
-- error naming the argument (the Rust side never sends one that is not: this guards the
-- scripts against other callers).
function arg_int(i, what, min, max)
  local n = tonumber(ARGV[i])
  if n == nil or n % 1 ~= 0 or n < (min or 0) or (max and n > max) then
    error({ err = 'ERR bad argument ' .. i .. ' (' .. what .. '): '
      .. string.format('%q', tostring(ARGV[i])) })
  end
  return n
end

function number(key, field, value)
  if value == false or value == nil then
    return nil
  end
  local n = tonumber(value)
  if n == nil then
    garbage(key, 'field ' .. field .. ' is ' .. string.format('%q', value) .. ', not a number')
  end
  return n
end

-- ARGV from `from` on as pairs of id and delivery number (at most MAX_BATCH pairs): the
-- ids, and the numbers, each an integer from 1.
function arg_deliveries(from)
  local given = #ARGV - from + 1
  local n = given / 2
  if n % 1 ~= 0 or n > MAX_BATCH then
    error({ err = 'ERR bad arguments: ' .. given .. ', not at most ' .. MAX_BATCH
      .. ' pairs of id and delivery' })
  end
  local ids, dels = {}, {}
  for i = 1, n do
    ids[i] = ARGV[from + 2 * i - 2]
    dels[i] = arg_int(from + 2 * i - 1, 'delivery', 1)
  end
  return ids, dels
end
