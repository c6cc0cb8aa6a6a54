-- cancel.lua: removes jobs that have not completed, wherever they are; O(1) per job.
--
-- KEYS     meta, jobs, due, flight, dead, errors, cseg (contract.rs,
--          script_keys::CANCEL); bucket keys are built from meta's prefix
-- ARGV     ids (one or more)
-- Returns  for each id, 1 if a job was removed, 0 if the id names none (an id given
--          twice is removed once).
--
-- Keeps I1-I5. A job in a bucket, staged, in flight or dead is removed from there and its
-- record deleted; a bucket left empty leaves `due` too (I2). A job in `ready` (a list: no
-- O(1) removal) becomes a tombstone whose skip count makes a claim drop the stale entry.
-- A job whose record names a place that does not hold it is removed all the same. A cold
-- job (cold.rs) loses its index entry, so its segment's copy is never loaded (C2).
if #ARGV == 0 then
  error({ err = 'ERR bad arguments: no ids' })
end
-- First every read and check, then every write.
local recs = read_all('hash', 'HMGET', JOBS, ARGV)
local cold = read('hash', 'HGET', META, 'cold')
if cold then
  cold_size(cold)
end
local colds = {}  -- index key, id, segment: the cold jobs to remove
local out, done = {}, {}
local jobs = {}   -- id, job, place: the jobs to remove
local errs = {}
for i = 1, #ARGV do
  local id, rec = ARGV[i], recs[i]
  local j = nil
  if rec and not done[id] then
    j = readable(rec)
    if j == nil then
      -- A quarantined job (dead, its record unreadable) can be cancelled; any other
      -- unreadable record is an error naming it.
      if not read('zset', 'ZSCORE', DEAD, id) then
        garbage(JOBS, unreadable(id))
      end
      j = { loc = 'd', att = 1, skip = 0 }
    end
  end
  local seg = not rec and cold and not done[id] and read('hash', 'HGET', cold_key(id), id)
  if seg then
    done[id] = true
    out[i] = 1
    colds[#colds + 1] = { cold_key(id), id, seg }
  elseif j == nil or j.loc == 'x' then
    out[i] = 0
  else
    done[id] = true
    out[i] = 1
    local place = 'dead'
    if j.loc ~= 'd' then
      -- A bucket is checked below (or is the first write).
      place = whereis(id, j, true)
    end
    jobs[#jobs + 1] = { id, j, place }
    if j.att > 0 then
      errs[#errs + 1] = id
    end
  end
end
if #errs > 0 then
  expect(ERRORS, 'hash')
end
if #colds > 0 then
  expect(CSEG, 'hash')
end
-- Jobs of one bucket leave it with one SREM.
local buckets, order = {}, {}
for _, x in ipairs(jobs) do
  if x[3] == 'dead' then
    expect(DEAD, 'zset')
  elseif x[3] == 'bucket' then
    -- A bucket emptied here leaves `due`.
    expect(DUE, 'zset')
    group(buckets, order, bucket_of(x[2]), x[1])
  end
end
-- Every bucket but the first, whose SREM is the first write (through `read`).
for i = 2, #order do
  expect(bucket_key(order[i]), 'set')
end
-- Every check passed: the writes, the buckets first.
for i, member in ipairs(order) do
  local key = bucket_key(member)
  if i == 1 then
    first_all('set', 'SREM', key, buckets[member])
  else
    call_all('SREM', key, buckets[member])
  end
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', DUE, member)
  end
end
local deletes, tombs = {}, {}
for _, x in ipairs(jobs) do
  local id, j, place = x[1], x[2], x[3]
  if place == 'dead' then
    redis.call('ZREM', DEAD, id)
  elseif place ~= 'bucket' then
    unplace(id, j, place)
  end
  if place == 'ready' then
    -- Still in the list: a tombstone whose skip count makes a claim drop the entry.
    tombs[#tombs + 1] = id
    tombs[#tombs + 1] = record({ due = 0, loc = 'x', att = 0, max = 0, skip = j.skip + 1,
                                 payload = '' })
  elseif j.skip > 0 then
    tombs[#tombs + 1] = id
    tombs[#tombs + 1] = record({ due = 0, loc = 'x', att = 0, max = 0, skip = j.skip,
                                 payload = '' })
  else
    deletes[#deletes + 1] = id
  end
end
-- Through lib/calls.lua's call_all, as every write of many values (Lua's unpack limit).
call_all('HDEL', JOBS, deletes)
call_all('HSET', JOBS, tombs)
call_all('HDEL', ERRORS, errs)
for _, c in ipairs(colds) do
  redis.call('HDEL', c[1], c[2])
  cold_left(c[3], -1)
end
return out
