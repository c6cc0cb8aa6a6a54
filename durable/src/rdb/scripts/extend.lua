-- extend.lua: a worker extends the leases of the deliveries it still runs.
--
-- KEYS     meta, jobs, flight (contract.rs, script_keys::EXTEND)
-- ARGV     lease_ms, then pairs: id, delivery (at most MAX_BATCH pairs)
-- Returns  { now, extended }: how many of those deliveries still held their job.
--
-- Only a delivery that still holds its job is extended: the job is in `flight` and its
-- record carries that delivery number (I1), so a late handler of a job cancelled and
-- delivered again under the same id does not extend the new delivery's lease. Raising
-- lease ends can leave the lease marker `l` earlier than the earliest lease end:
-- harmless, the leader then wakes early, finds nothing ended, and moves the marker.
local now = meta()
local ends = now + arg_int(1, 'lease_ms', 1)
local ids, dels = arg_deliveries(2)
local n = #ids
if n == 0 then
  return { now, 0 }
end
-- First every read, then the one write. Both reads and the write go through
-- lib/calls.lua's read_all and call_all (Lua's unpack limit).
local held = read_all('zset', 'ZMSCORE', FLIGHT, ids)
local recs = read_all('hash', 'HMGET', JOBS, ids)
local args = {}
for i = 1, n do
  local j = held[i] and readable(recs[i]) or nil
  if j and j.loc == 's' and j.del == dels[i] then
    args[#args + 1] = ends
    args[#args + 1] = ids[i]
  end
end
call_all('ZADD', FLIGHT, args, 'XX')
return { now, #args / 2 }
