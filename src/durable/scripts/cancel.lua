-- cancel.lua: removes jobs that have not completed, wherever they are; O(1) per job.
--
-- KEYS[1]  meta
-- ARGV     ids (one or more)
-- Returns  for each id, 1 if a job was removed, 0 if the id names none (an id given
--          twice is removed once).
--
-- Keeps I1-I5. A job in a bucket, staged, in flight or dead is removed from there and its
-- record deleted; a bucket left empty leaves `due` too (I2). A job in `ready` (a list: no
-- O(1) removal) becomes a tombstone whose skip count makes a claim drop the stale entry.
-- Jobs of one bucket leave it with one SREM.
local recs = redis.call('HMGET', JOBS, unpack(ARGV))
local out, done = {}, {}
local buckets, order = {}, {}
local deletes, tombs, errs = {}, {}, {}
for i = 1, #ARGV do
  local id, rec = ARGV[i], recs[i]
  local j = nil
  if rec and not done[id] then
    j = readable(rec)
    if j == nil then
      -- A quarantined job (dead, its record unreadable) can be cancelled; any other
      -- unreadable record is an error naming it.
      if not redis.call('ZSCORE', DEAD, id) then
        garbage(JOBS, unreadable(id))
      end
      j = { loc = 'd', att = 1, skip = 0 }
    end
  end
  if j == nil or j.loc == 'x' then
    out[i] = 0
  else
    done[id] = true
    out[i] = 1
    local skip = j.skip
    if j.loc == 'd' then
      redis.call('ZREM', DEAD, id)
    elseif j.loc == 's' then
      if redis.call('ZREM', DUE, 'j' .. id) == 0 and redis.call('ZREM', FLIGHT, id) == 0 then
        skip = skip + 1
      end
    else
      local member = bucket_of(j)
      if buckets[member] == nil then
        buckets[member] = {}
        order[#order + 1] = member
      end
      local ids = buckets[member]
      ids[#ids + 1] = id
    end
    if skip > 0 then
      tombs[#tombs + 1] = id
      tombs[#tombs + 1] = record({ due = 0, loc = 'x', att = 0, max = 0, skip = skip,
                                   payload = '' })
    else
      deletes[#deletes + 1] = id
    end
    if j.att > 0 then
      errs[#errs + 1] = id
    end
  end
end
for _, member in ipairs(order) do
  local key = bucket_key(member)
  local ids = buckets[member]
  if redis.call('SREM', key, unpack(ids)) ~= #ids then
    garbage(JOBS, 'jobs ' .. string.format('%q', ids[1]) .. '... name bucket ' .. key
      .. ', which does not hold them all')
  end
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', DUE, member)
  end
end
if #deletes > 0 then
  redis.call('HDEL', JOBS, unpack(deletes))
end
if #tombs > 0 then
  redis.call('HSET', JOBS, unpack(tombs))
end
if #errs > 0 then
  redis.call('HDEL', ERRORS, unpack(errs))
end
return out
