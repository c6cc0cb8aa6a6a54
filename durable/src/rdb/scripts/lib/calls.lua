-- lib/calls.lua: commands of many values, sent in chunks clear of Lua's unpack limit.

-- The most values one command is sent from a Lua table. Redis's Lua 5.1 `unpack` raises
-- "too many results to unpack" past its C stack (LUAI_MAXCSTACK, 8000 slots, less what
-- the stack holds: measured on Redis 7.0, 7998 values pass at the top of an EVAL and
-- fail two calls deeper). Half of that leaves room for any depth these scripts reach;
-- it is even, so no chunk splits a pair (HSET's field and value, ZADD's score and
-- member).
local CHUNK = 4000

-- Runs `cmd key [opt] v...` for the values of `list`, in chunks of at most CHUNK, in
-- order (RPUSH keeps it), and returns the sum of the replies: for variadic writes whose
-- values (or pairs) each apply alone (HSET, HDEL, SADD, SREM, ZADD, ZREM, RPUSH), so a
-- split changes nothing, and whose reply is a count. An empty list sends nothing. Every
-- write whose values grow with a batch goes through here, so that no script writes and
-- then fails at the unpack limit. `from`: the values from this index on (default 1).
function call_all(cmd, key, list, opt, from)
  local n = #list
  if n <= CHUNK and not from then
    -- One command (the common case); none for an empty list.
    if n == 0 then
      return 0
    elseif opt then
      return redis.call(cmd, key, opt, unpack(list))
    end
    return redis.call(cmd, key, unpack(list))
  end
  n = 0
  for i = from or 1, #list, CHUNK do
    local last = math.min(i + CHUNK - 1, #list)
    if opt then
      n = n + redis.call(cmd, key, opt, unpack(list, i, last))
    else
      n = n + redis.call(cmd, key, unpack(list, i, last))
    end
  end
  return n
end

-- call_all (without `opt`) for a non-empty `list` whose first command is the script's
-- first write, sent through `read`: the key needs no check before it (a wrong type is
-- named, and nothing was written).
function first_all(want, cmd, key, list)
  local n = #list
  if n <= CHUNK then
    return read(want, cmd, key, unpack(list))
  end
  return read(want, cmd, key, unpack(list, 1, CHUNK)) + call_all(cmd, key, list, nil, CHUNK + 1)
end

-- `read(want, cmd, key, v...)` for the values of `list`, in chunks as call_all: the
-- answers, one per value, in order (HMGET, ZMSCORE, SMISMEMBER). An empty list sends
-- nothing and answers an empty table.
function read_all(want, cmd, key, list)
  local n = #list
  if n == 0 then
    return {}
  elseif n <= CHUNK then
    return read(want, cmd, key, unpack(list))
  end
  local out = {}
  for i = 1, n, CHUNK do
    local r = read(want, cmd, key, unpack(list, i, math.min(i + CHUNK - 1, n)))
    for x = 1, #r do
      out[#out + 1] = r[x]
    end
  end
  return out
end
