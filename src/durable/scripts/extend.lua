-- extend.lua: a worker extends the leases of the deliveries it still runs.
--
-- KEYS     meta, flight (contract.rs, script_keys::EXTEND)
-- ARGV     lease_ms, then ids
-- Returns  { now, extended }: how many of the ids were in flight.
--
-- Only jobs still in `flight` are touched (ZADD XX). Raising lease ends can leave the
-- lease marker `l` earlier than the earliest lease end: harmless, the leader then wakes
-- early, finds nothing ended, and moves the marker.
local now = meta({})
local ends = now + arg_int(1, 'lease_ms', 1)
local args = {}
for i = 2, #ARGV do
  args[#args + 1] = ends
  args[#args + 1] = ARGV[i]
end
if #args == 0 then
  return { now, 0 }
end
-- Counted by reading: ZADD's CH would miss a lease extended to the end it had.
local held = read('zset', 'ZMSCORE', FLIGHT, unpack(ARGV, 2))
local extended = 0
for i = 1, #held do
  if held[i] then
    extended = extended + 1
  end
end
redis.call('ZADD', FLIGHT, 'XX', unpack(args))
return { now, extended }
