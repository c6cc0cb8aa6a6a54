-- give_back.lua: a stopping worker hands back deliveries it will not finish, so that
-- they are ready again at once, not when their lease ends.
--
-- KEYS     meta, jobs, ready, flight, errors (contract.rs, script_keys::GIVE_BACK)
-- ARGV     pairs: id, delivery (at most MAX_BATCH pairs)
-- Returns  { now, given_back }: how many of those deliveries still held their job.
--
-- Only a delivery that still holds its job is given back: the job is in `flight` and its
-- record carries that delivery number (I1), as extend.lua checks. The job leaves
-- `flight` and is appended to `ready` (I3; I5: entries are only appended), due when it
-- was (it was due when claimed: I6), and its attempt count goes back to what it was
-- before the claim: the worker did not run the handler, or stopped it itself, which is
-- no failure of the job (Sidekiq and asynq put a stopping worker's jobs back without
-- counting a retry). Leaving `flight` can leave the lease marker `l` earlier than the
-- earliest lease end: harmless, the leader then wakes early, finds nothing ended, and
-- moves the marker. On a queue with a stream outlet, the jobs go to the stream instead
-- (lib/batch.lua's `outlet`).
local now = meta()
local ids, dels = arg_deliveries(1)
local n = #ids
if n == 0 then
  return { now, 0 }
end
-- First every read and check, then the writes.
local held = read_all('zset', 'ZMSCORE', FLIGHT, ids)
local recs = read_all('hash', 'HMGET', JOBS, ids)
local back, writes, seen = {}, {}, {}
for i = 1, n do
  local id = ids[i]
  -- An unreadable record is left to the leader, which quarantines it at lease end.
  local j = not seen[id] and held[i] and recs[i] and readable(recs[i])
  if j and j.loc == 's' and j.del == dels[i] then
    seen[id] = true
    j.att = math.max(j.att - 1, 0)
    j.del = nil
    back[#back + 1] = id
    writes[#writes + 1] = id
    writes[#writes + 1] = record(j)
  end
end
if #back > 0 then
  expect(READY, 'list')
  local out = outlet_check()
  call_all('ZREM', FLIGHT, back)
  call_all('HSET', JOBS, writes)
  if out then
    call_all('RPUSH', READY, outlet(out, back))
  else
    call_all('RPUSH', READY, back)
  end
end
return { now, #back }
