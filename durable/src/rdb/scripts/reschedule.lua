-- reschedule.lua: moves a waiting job to a new due time; O(1).
--
-- KEYS     meta, jobs, due, ready, flight, cseg, errors (contract.rs,
--          script_keys::RESCHEDULE); bucket keys are built from meta's prefix
-- ARGV     id, when ('a<ms>' or 'r<us>', as in schedule.lua)
-- Returns  { now, 1 } if the job was waiting (in a bucket, staged or ready) and now waits
--          for the new time; { now, 0 } if the id names no job, a job in flight (its
--          handler has it) or a dead job (see retry_dead.lua); { now, 2, seg, window }
--          if it names a cold job (cold.rs): the caller reads its record from segment
--          `seg` (window: its window's start) and moves it with cold_thaw.lua.
--
-- Keeps I1-I5: the job leaves its place (a ready one leaves a stale entry, counted in
-- skip) and is inserted as schedule.lua would, keeping its attempts and payload.
local now, armed, cold = meta('armed', 'cold')
if cold then
  cold_size(cold)
end
local id = ARGV[1]
local due = arg_when(2)
-- First every read and check (the job's place, the keys its new place needs), then
-- every write.
local rec = read('hash', 'HGET', JOBS, id)
if not rec then
  local seg = cold and read('hash', 'HGET', cold_key(id), id)
  if seg then
    local at = read('hash', 'HGET', CSEG, seg)
    return { now, 2, seg, at and tonumber(string.match(at, '^(%d+)|')) or -1 }
  end
  return { now, 0 }
end
local j = readable(rec, id)
if j.loc == 'x' or j.loc == 'd' then
  return { now, 0 }
end
-- The job's bucket is its first write (unplace, through `read`): not checked here.
local place = whereis(id, j, true)
if place == 'flight' then
  return { now, 0 }
end
if place == 'bucket' then
  expect(DUE, 'zset')
end
local moved = { due = due, loc = 's', att = j.att, max = j.max, skip = j.skip,
                payload = j.payload }
if place == 'ready' then
  moved.skip = moved.skip + 1
end
local b = batch(now)
insert(b, id, moved)
check_batch(b)
unplace(id, j, place)
flush(b, armed, true)
return { now, 1 }
