-- extend.lua: a worker extends the leases of the deliveries it still runs.
--
-- KEYS     meta, flight (contract.rs, script_keys::EXTEND)
-- ARGV     lease_ms, then ids
-- Returns  { now, extended }: how many of the ids were in flight.
--
-- Only jobs still in `flight` are touched (ZADD XX). Raising lease ends can leave the
-- lease marker `l` earlier than the earliest lease end: harmless, the leader then wakes
-- early, finds nothing ended, and moves the marker.
local now = meta()
local ends = now + arg_int(1, 'lease_ms', 1)
local ids, args = {}, {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
  args[#args + 1] = ends
  args[#args + 1] = ARGV[i]
end
if #ids == 0 then
  return { now, 0 }
end
-- Counted by reading: ZADD's CH would miss a lease extended to the end it had. Both
-- commands go through lib.lua's read_all and call_all (Lua's unpack limit).
local held = read_all('zset', 'ZMSCORE', FLIGHT, ids)
local extended = 0
for i = 1, #held do
  if held[i] then
    extended = extended + 1
  end
end
call_all('ZADD', FLIGHT, args, 'XX')
return { now, extended }
