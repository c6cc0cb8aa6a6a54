-- recur_del.lua: removes recurring schedules (lib.lua, "Recurring schedules"). Jobs
-- already made from their occurrences stay (cancel them by their ids, `<id>@<ms>`).
--
-- KEYS[1]  meta
-- ARGV     ids (one or more)
-- Returns  for each id, 1 if a schedule was removed, 0 if the id names none.
expect(RECUR, 'hash')
local recs = redis.call('HMGET', RECUR, unpack(ARGV))
expect(RNEXT, 'hash')
expect(DUE, 'zset')
expect(RLOW, 'set')
local out, gone, members = {}, {}, {}
for i = 1, #ARGV do
  out[i] = recs[i] and 1 or 0
  gone[i] = ARGV[i]
  members[i] = 'r' .. ARGV[i]
end
redis.call('HDEL', RECUR, unpack(gone))
redis.call('HDEL', RNEXT, unpack(gone))
redis.call('ZREM', DUE, unpack(members))
redis.call('SREM', RLOW, unpack(gone))
return out
