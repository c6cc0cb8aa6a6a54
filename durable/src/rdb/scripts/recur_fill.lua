-- recur_fill.lua: the leader appends occurrences to cron schedules that run low
-- (lib/recur.lua); fenced like tick.lua.
--
-- KEYS     meta, recur, rnext, due, rlow (contract.rs, script_keys::RECUR)
-- ARGV     token, then triples: id, the `rnext` value the times were computed from (''
--          if it had none), times ('t1,t2,...'; '' when the Rust side cannot compute
--          any: the schedule then waits, out of `rlow`, until it is set again)
-- Returns  { 0 } if `token` is not the current leadership's or its lease has ended;
--          else { 1, appended_1, ... }: how many times each schedule gained.
--
-- Keeps R1: only times after both `last` and the last known time are appended, and only
-- if `rnext` still holds what the times were computed from (a schedule set again or
-- removed meanwhile is left alone).
local now, token, expires = meta('token', 'expires')
if token ~= ARGV[1] or (tonumber(expires) or 0) <= now then
  return { 0 }
end
if #ARGV % 3 ~= 1 then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ', not a token and triples' })
end
local n = math.floor((#ARGV - 1) / 3)
local ids = {}
for i = 1, n do
  ids[i] = ARGV[2 + (i - 1) * 3]
end
local out = { 1 }
if n == 0 then
  return out
end
local nexts = read_all('hash', 'HMGET', RNEXT, ids)
expect(DUE, 'zset')
expect(RLOW, 'set')
for i = 1, n do
  local base = 2 + (i - 1) * 3
  local id, seen, add = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local cur = nexts[i]
  local gained = 0
  if cur == false then
    redis.call('SREM', RLOW, id)
  elseif cur == seen then
    local last, ts = recur_times(cur)
    if last == nil then
      -- Not a list of times: the tick has stopped waking for it already; it leaves
      -- `rlow` rather than fail every refill (`Queue::schedules` names it).
      last, ts, add = 0, {}, ''
    end
    for t in string.gmatch(add, '%d+') do
      local x = tonumber(t)
      if x > last and (#ts == 0 or x > ts[#ts]) then
        ts[#ts + 1] = x
        gained = gained + 1
      end
    end
    if gained > 0 then
      redis.call('HSET', RNEXT, id, recur_value(last, ts, 1))
    end
    if #ts > 0 then
      redis.call('ZADD', DUE, ts[1], M_RECUR .. id)
    end
    redis.call('SREM', RLOW, id)
  end
  out[#out + 1] = gained
end
return out
