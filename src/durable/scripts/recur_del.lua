-- recur_del.lua: removes recurring schedules (lib.lua, "Recurring schedules"). Jobs
-- already made from their occurrences stay (cancel them by their ids, `<id>@<ms>`).
--
-- KEYS     meta, recur, rnext, due, rlow (contract.rs, script_keys::RECUR)
-- ARGV     ids (one or more)
-- Returns  for each id, 1 if a schedule was removed, 0 if the id names none.
local recs = read('hash', 'HMGET', RECUR, unpack(ARGV))
expect(RNEXT, 'hash')
expect(DUE, 'zset')
expect(RLOW, 'set')
local out, gone, members = {}, {}, {}
for i = 1, #ARGV do
  out[i] = recs[i] and 1 or 0
  gone[i] = ARGV[i]
  members[i] = M_RECUR .. ARGV[i]
end
redis.call('HDEL', RECUR, unpack(gone))
redis.call('HDEL', RNEXT, unpack(gone))
redis.call('ZREM', DUE, unpack(members))
redis.call('SREM', RLOW, unpack(gone))
return out
