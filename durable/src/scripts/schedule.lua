-- schedule.lua: adds jobs, each unless its id already names a job (idempotent on id).
--
-- KEYS     meta, jobs, due, ready (contract.rs,
--          script_keys::SCHEDULE); bucket keys are built from meta's prefix
-- ARGV     n, then n times: id, when, max_attempts, payload
--          when is 'a<ms>' (due at that time on the queue's clock) or 'r<us>' (due that
--          many microseconds from now, to the microsecond: see lib.lua's due_after)
-- Returns  { now, added_1, ..., added_n }: added is 1 for a new job, 0 for an id in use.
--
-- Keeps I1-I5: a new job goes to `ready` (due), the staged window (due before the
-- horizon) or the bucket of the coarsest level that starts at or after the horizon; an
-- id whose record is a tombstone is reused, and its skip count carried over (I5).
local now, m = meta({ 'armed', 'expires', 'busy' })
local h = horizon(now + LEAD)
-- Every argument is checked before anything is written (so is every key: `jobs` by its
-- read, the rest by flush's check_batch).
local n = arg_int(1, 'n', 1)
if #ARGV ~= 1 + 4 * n then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ' for ' .. n .. ' jobs' })
end
local ids, dues, maxes = {}, {}, {}
for i = 1, n do
  local base = 2 + (i - 1) * 4
  ids[i] = ARGV[base]
  dues[i] = arg_when(base + 1)
  maxes[i] = arg_int(base + 2, 'max_attempts', 1)
end
local recs = read_all('hash', 'HMGET', JOBS, ids)
local b = batch()
local out = { now }
local seen = {}
for i = 1, n do
  local base = 2 + (i - 1) * 4
  local id = ids[i]
  local skip = 0
  local taken = seen[id]
  if not taken and recs[i] then
    local old = parse(id, recs[i])
    taken = old.loc ~= 'x'
    skip = old.skip
  end
  if taken then
    out[#out + 1] = 0
  else
    insert(b, id, { due = dues[i], loc = 's', att = 0, max = maxes[i],
                    skip = skip, payload = ARGV[base + 3] }, now, h)
    seen[id] = true
    out[#out + 1] = 1
  end
end
flush(b, now, m)
local added = 0
for i = 2, #out do
  added = added + out[i]
end
count('scheduled', added)
return out
