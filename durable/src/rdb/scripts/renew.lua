-- renew.lua: the leader extends its lease, and leaves its promotion lag figures.
--
-- KEYS     meta (contract.rs, script_keys::LEASE)
-- ARGV     token, ttl_ms, lag_p50_ms, lag_p99_ms, promoted, lag_sum_ms
-- Returns  { 1, now, expires } if renewed; { 0, now } if the lease ended or another
--          leadership began (the caller is no longer the leader and must stop moving).
--
-- A lease shortened (work came near) is published, so that candidates sleeping until
-- its old end look again at its new one.
local now, token, ends = meta('token', 'expires')
local ttl = arg_int(2, 'ttl_ms', 1)
for i = 3, 6 do
  arg_int(i, 'a lag figure', 0)
end
local old = number(META, 'expires', ends) or 0
if token ~= ARGV[1] or old <= now then
  return { 0, now }
end
local expires = now + ttl
redis.call('HSET', META, 'expires', int(expires), 'lag_p50', ARGV[3], 'lag_p99', ARGV[4],
  'promoted', ARGV[5], 'lag_sum', ARGV[6])
if expires < old then
  redis.call('PUBLISH', CHANNEL, '- ' .. int(expires))
end
return { 1, now, expires }
