-- acquire.lua: a candidate takes the leadership if nobody holds a live lease.
--
-- KEYS     meta (contract.rs, script_keys::LEASE)
-- ARGV     holder (a name for this process), ttl_ms, busy_ms (the leader's busy lease,
--          kept in meta's `busy` for the scripts that shorten the lease: lib/batch.lua)
-- Returns  { 1, token, now, expires } when taken: the fencing token is above every
--          earlier leadership's, so it increases on every new leadership;
--          { 0, holder, now, expires } when another holder's lease is live.
--
-- Invariant: at any time on the queue's clock at most one lease is live (expires > now),
-- and only its token passes tick.lua's and renew.lua's checks.
local now, holder, ends = meta('holder', 'expires')
local ttl, busy = arg_int(2, 'ttl_ms', 1), arg_int(3, 'busy_ms', 1)
local expires = number(META, 'expires', ends) or 0
if holder and holder ~= '' and expires > now then
  return { 0, holder, now, expires }
end
-- The token grows with every leadership even if meta was lost (deleted, or a failover
-- that dropped its last writes): never below the real clock in microseconds, which runs
-- ahead of any count of leaderships kept before (each needs a lease to end first).
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = number(META, 'token', redis.call('HGET', META, 'token')) or 0
local token = math.max(old + 1, floor)
redis.call('HSET', META, 'token', int(token))
count('n_leaderships', 1)
expires = now + ttl
redis.call('HSET', META, 'holder', ARGV[1], 'expires', int(expires), 'armed', 0,
  'busy', int(busy))
return { 1, token, now, expires }
