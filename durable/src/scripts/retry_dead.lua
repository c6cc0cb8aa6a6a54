-- retry_dead.lua: gives a dead job a new set of attempts, due now.
--
-- KEYS     meta, jobs, due, ready, dead (contract.rs,
--          script_keys::RETRY_DEAD); bucket keys are built from meta's prefix
-- ARGV     id
-- Returns  1 if the job was dead and is now ready, else 0.
--
-- Keeps I1-I5: the job leaves `dead` for `ready` with its attempts reset and its error
-- kept until it completes.
local now, armed = meta('armed')
local id = ARGV[1]
local rec = read('hash', 'HGET', JOBS, id)
if not rec then
  return 0
end
local j = readable(rec, id)
if j.loc ~= 'd' then
  return 0
end
j.att = 0
j.due = now
local b = batch(now)
insert(b, id, j)
-- Checked before the first write: `dead`, and where the job goes.
expect(DEAD, 'zset')
check_batch(b)
redis.call('ZREM', DEAD, id)
flush(b, armed, true)
return 1
