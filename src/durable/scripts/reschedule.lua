-- reschedule.lua: moves a waiting job to a new due time; O(1).
--
-- KEYS[1]  meta
-- ARGV     id, when ('a<ms>' or 'r<us>', as in schedule.lua)
-- Returns  { now, 1 } if the job was waiting (in a bucket, staged or ready) and now waits
--          for the new time; { now, 0 } if the id names no job, a job in flight (its
--          handler has it) or a dead job (see retry_dead.lua).
--
-- Keeps I1-I5: the job leaves its place (a ready one leaves a stale entry, counted in
-- skip) and is inserted as schedule.lua would, keeping its attempts and payload.
local now, m = meta({ 'armed', 'expires', 'busy' })
local id, when = ARGV[1], ARGV[2]
local rec = redis.call('HGET', JOBS, id)
if not rec then
  return { now, 0 }
end
local j = parse(id, rec)
if j.loc == 'x' or j.loc == 'd' then
  return { now, 0 }
end
if not unplace(id, j) then
  if redis.call('ZSCORE', FLIGHT, id) then
    return { now, 0 }
  end
  j.skip = j.skip + 1
end
local t = tonumber(string.sub(when, 2))
j.due = t
if string.sub(when, 1, 1) == 'r' then
  j.due = due_after(t)
end
local b = batch()
insert(b, id, j, now, horizon(now + LEAD))
flush(b, now, m)
return { now, 1 }
