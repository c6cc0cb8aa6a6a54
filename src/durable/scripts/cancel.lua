-- cancel.lua: removes a job that has not completed, wherever it is; O(1).
--
-- KEYS[1]  meta
-- ARGV     id
-- Returns  1 if a job was removed, 0 if the id names none.
--
-- Keeps I1-I5. A job in a bucket, staged, in flight or dead is removed from there and its
-- record deleted (a bucket left empty leaves `due` too, I2); a job in `ready` (a list: no
-- O(1) removal) becomes a tombstone whose skip count makes a claim drop the stale entry.
local id = ARGV[1]
local rec = redis.call('HGET', JOBS, id)
if not rec then
  return 0
end
local j = parse(id, rec)
local skip = j.skip
if j.loc == 'x' then
  return 0
elseif j.loc == 'd' then
  redis.call('ZREM', DEAD, id)
elseif not unplace(id, j) and redis.call('ZREM', FLIGHT, id) == 0 then
  skip = skip + 1
end
if skip > 0 then
  redis.call('HSET', JOBS, id, record({ due = 0, loc = 'x', att = 0, max = 0, skip = skip,
                                        payload = '' }))
else
  redis.call('HDEL', JOBS, id)
end
if j.att > 0 then
  redis.call('HDEL', ERRORS, id)
end
return 1
