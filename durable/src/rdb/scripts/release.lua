-- release.lua: the leader steps down, and tells the candidates at once.
--
-- KEYS     meta (contract.rs, script_keys::LEASE)
-- ARGV     token
-- Returns  1 if the caller's leadership was the current one and is now released, else 0.
local now, token = meta('token')
if token ~= ARGV[1] then
  return 0
end
redis.call('HSET', META, 'holder', '', 'expires', 0, 'armed', 0)
redis.call('PUBLISH', CHANNEL, int(now) .. ' 0')
return 1
