-- recur_set.lua: sets a recurring schedule (lib/recur.lua).
--
-- KEYS     meta, recur, rnext, due, rlow (contract.rs, script_keys::RECUR)
-- ARGV     id, record (`kind|policy|max|period|spec|payload`), first: 'r<us>' (an
--          `every` schedule: its first occurrence that many microseconds from now) or
--          'c<t1>,<t2>,...' (a cron schedule: its next occurrences, computed in Rust;
--          those not after now are dropped)
-- Returns  { now, set }: set is 0 if the id already had this very record (left as it
--          is, its next occurrences too: a deploy that sets its schedules again moves
--          none of them), 1 if the schedule is new or replaced (counted from now on).
local now, armed = meta('armed')
local id, rec, first = ARGV[1], ARGV[2], ARGV[3]
if recur_spec(rec or '') == nil or not (string.match(first or '', '^r%d+$')
    or string.match(first or '', '^c[%d,]*$')) then
  error({ err = 'ERR bad arguments: not a schedule record and its first occurrences' })
end
local old = read('hash', 'HGET', RECUR, id)
if old == rec then
  return { now, 0 }
end
expect(RNEXT, 'hash')
expect(DUE, 'zset')
expect(RLOW, 'set')
local ts = {}
if string.sub(first, 1, 1) == 'r' then
  ts[1] = arg_when(3)
else
  for t in string.gmatch(string.sub(first, 2), '%d+') do
    local n = tonumber(t)
    if n > now and (#ts == 0 or n > ts[#ts]) then
      ts[#ts + 1] = n
    end
  end
end
redis.call('HSET', RECUR, id, rec)
redis.call('HSET', RNEXT, id, recur_value(now, ts, 1))
if #ts > 0 then
  redis.call('ZADD', DUE, ts[1], M_RECUR .. id)
  local b = batch(now)
  wake_at(b, ts[1])
  flush(b, armed, true)
else
  redis.call('ZREM', DUE, M_RECUR .. id)
end
if string.sub(rec, 1, 1) == 'c' and #ts < RLOW_AT then
  redis.call('SADD', RLOW, id)
else
  redis.call('SREM', RLOW, id)
end
return { now, 1 }
