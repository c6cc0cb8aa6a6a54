-- fail.lua: a worker reports that a delivery's handler failed.
--
-- KEYS[1]  meta
-- ARGV     id, attempt, backoff_ms, error
-- Returns  { now, outcome }: 1 retried after backoff_ms, 2 dead (it was the last
--          attempt), 0 the delivery no longer holds the job (its lease ended, or it was
--          cancelled): nothing changed.
--
-- Keeps I1-I5: the job leaves `flight`; a retry is inserted at now + backoff_ms as
-- schedule.lua would (the wake published if earlier than the leader's), a dead job goes
-- to `dead` with loc 'd'. The error text is kept in `errors` until the job completes or
-- is removed.
local now, m = meta({ 'armed', 'expires', 'busy' })
local id, attempt = ARGV[1], tonumber(ARGV[2])
local rec = redis.call('HGET', JOBS, id)
if not rec then
  return { now, 0 }
end
local j = parse(id, rec)
if j.loc ~= 's' or j.att ~= attempt or redis.call('ZREM', FLIGHT, id) == 0 then
  return { now, 0 }
end
redis.call('HSET', ERRORS, id, ARGV[4])
if j.att >= j.max then
  j.loc = 'd'
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', JOBS, id, record(j))
  count('died', 1)
  return { now, 2 }
end
j.due = now + tonumber(ARGV[3])
local b = batch()
insert(b, id, j, now, horizon(now + LEAD))
flush(b, now, m)
count('retried', 1)
return { now, 1 }
