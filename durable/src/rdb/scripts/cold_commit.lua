-- cold_commit.lua: the leader's move to the cold tier, step 3 (cold.rs), once segment
-- `seg` is in the store: the jobs it holds leave the wheel for the index.
--
-- KEYS     meta, jobs, due, cseg, cwin (contract.rs, script_keys::COLD_COMMIT); bucket
--          and index keys are built from meta's prefix
-- ARGV     token, seg, window (ms), bytes (the segment's size), then id, record pairs
--          (some or all of the segment's: a segment is committed in several calls)
-- Returns  { 0 } if `token` is not the current leadership's or its lease has ended; else
--          { 1, moved }: moved counts the jobs whose record in `jobs` is still exactly the segment's
--          (a job rescheduled, cancelled or scheduled anew since cold_take.lua read it
--          stays in the wheel, and its copy in the segment is never loaded: C2).
--
-- Keeps I1-I5 and C1: each moved job leaves its bucket (a bucket left empty leaves
-- `due`, I2) and `jobs`, and gains its index entry naming `seg`.
local now, token, expires, cold = meta('token', 'expires', 'cold')
if token ~= ARGV[1] or (tonumber(expires) or 0) <= now then
  return { 0 }
end
local seg = ARGV[2]
local window = arg_int(3, 'window', 0)
local bytes = arg_int(4, 'bytes', 0)
if #ARGV % 2 ~= 0 then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ' (id, record pairs after four)' })
end
local ids = {}
for i = 5, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
-- The index first grows to the size its entries will need (lib/cold.lua).
cold_size(cold)
cold = cold_resize(cold, cold_jobs() + #ids)
-- First every read and check, then every write.
local recs = read_all('hash', 'HMGET', JOBS, ids)
local buckets, border = {}, {}
local index, iorder = {}, {}
local gone = {}
for x = 1, #ids do
  local id, rec = ids[x], ARGV[4 + 2 * x]
  if recs[x] == rec then
    -- The record cold_take.lua judged, unchanged: its head alone is read (bucketed).
    local due, loc = bucketed(rec)
    if due then
      group(buckets, border, bucket_of({ due = due, loc = loc }), id)
      group(index, iorder, cold_key(id), id)
      gone[#gone + 1] = id
    end
  end
end
if #gone == 0 then
  return { 1, 0 }
end
expect(DUE, 'zset')
expect(CSEG, 'hash')
expect(CWIN, 'zset')
for _, member in ipairs(border) do
  expect(bucket_key(member), 'set')
end
for _, key in ipairs(iorder) do
  expect(key, 'hash')
end
for _, member in ipairs(border) do
  local key = bucket_key(member)
  call_all('SREM', key, buckets[member])
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', DUE, member)
  end
end
call_all('HDEL', JOBS, gone)
for _, key in ipairs(iorder) do
  local pairs_ = {}
  for _, id in ipairs(index[key]) do
    pairs_[#pairs_ + 1] = id
    pairs_[#pairs_ + 1] = seg
  end
  call_all('HSET', key, pairs_)
end
if redis.call('HEXISTS', CSEG, seg) == 1 then
  cold_left(seg, #gone)
else
  redis.call('HSET', CSEG, seg, int(window) .. '|' .. int(#gone) .. '|' .. int(bytes))
  redis.call('ZADD', CWIN, window, seg)
  redis.call('HINCRBY', META, 'cjobs', #gone)
end
if not cold then
  -- The first move, too small to grow the index (cold_resize wrote the size if it did).
  redis.call('HSET', META, 'cold', 'n1')
end
count('n_cold_out', #gone)
return { 1, #gone }
