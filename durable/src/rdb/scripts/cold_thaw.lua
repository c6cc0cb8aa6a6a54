-- cold_thaw.lua: reschedule.lua's second half for a cold job (cold.rs): its record, read
-- from its segment, goes back into the wheel at the new due time.
--
-- KEYS     meta, jobs, due, ready, cseg, errors (contract.rs, script_keys::COLD_LOAD);
--          bucket and index keys are built from meta's prefix
-- ARGV     id, seg, record (as segment `seg` holds it), when ('a<ms>' or 'r<us>')
-- Returns  { now, 1 } if the job moved; { now, 0 } if the index no longer names `seg`
--          for `id` (loaded, cancelled or moved since reschedule.lua looked: the caller
--          asks again).
--
-- Keeps I1-I5 and C1: the job is inserted as schedule.lua would, keeping its attempts
-- and payload; its index entry goes.
local now, armed, cold = meta('armed', 'cold')
local id, seg = ARGV[1], ARGV[2]
local due = arg_when(4)
cold_size(cold)
local key = cold_key(id)
if read('hash', 'HGET', key, id) ~= seg then
  return { now, 0 }
end
local held = read('hash', 'HGET', JOBS, id)
local old = readable(held, id)
if old and old.loc ~= 'x' then
  return { now, 0 }
end
local j = readable(ARGV[3], id)
local moved = { due = due, loc = 's', att = j.att, max = j.max, skip = old and old.skip or 0,
                payload = j.payload }
local b = batch(now)
insert(b, id, moved)
check_batch(b)
expect(CSEG, 'hash')
redis.call('HDEL', key, id)
cold_left(seg, -1)
flush(b, armed, true)
return { now, 1 }
