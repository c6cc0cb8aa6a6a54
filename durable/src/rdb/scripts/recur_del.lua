-- recur_del.lua: removes recurring schedules (lib/recur.lua). Jobs
-- already made from their occurrences stay (cancel them by their ids, `<id>@<ms>`).
--
-- KEYS     meta, recur, rnext, due, rlow (contract.rs, script_keys::RECUR)
-- ARGV     ids (one or more)
-- Returns  for each id, 1 if a schedule was removed, 0 if the id names none.
if #ARGV == 0 then
  error({ err = 'ERR bad arguments: no ids' })
end
local recs = read_all('hash', 'HMGET', RECUR, ARGV)
expect(RNEXT, 'hash')
expect(DUE, 'zset')
expect(RLOW, 'set')
local out, gone, members = {}, {}, {}
for i = 1, #ARGV do
  out[i] = recs[i] and 1 or 0
  gone[i] = ARGV[i]
  members[i] = M_RECUR .. ARGV[i]
end
call_all('HDEL', RECUR, gone)
call_all('HDEL', RNEXT, gone)
call_all('ZREM', DUE, members)
call_all('SREM', RLOW, gone)
return out
