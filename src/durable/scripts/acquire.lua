-- acquire.lua: a candidate takes the leadership if nobody holds a live lease.
--
-- KEYS[1]  meta
-- ARGV     holder (a name for this process), ttl_ms
-- Returns  { 1, token, now, expires } when taken: the fencing token is one more than the
--          previous leadership's, so it increases on every new leadership;
--          { 0, holder, now, expires } when another holder's lease is live.
--
-- Invariant: at any time on the queue's clock at most one lease is live (expires > now),
-- and only its token passes tick.lua's and renew.lua's checks.
local now, m = meta({ 'holder', 'expires' })
local expires = number(META, 'expires', m.expires) or 0
if m.holder and m.holder ~= '' and expires > now then
  return { 0, m.holder, now, expires }
end
local token = redis.call('HINCRBY', META, 'token', 1)
expires = now + tonumber(ARGV[2])
redis.call('HSET', META, 'holder', ARGV[1], 'expires', int(expires), 'armed', 0)
return { 1, token, now, expires }
