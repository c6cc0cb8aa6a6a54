-- fail.lua: a worker reports that a delivery's handler failed.
--
-- KEYS     meta, jobs, due, ready, flight, dead, errors (contract.rs,
--          script_keys::FAIL); bucket keys are built from meta's prefix
-- ARGV     id, delivery, backoff_ms, error, and optionally `q`: the worker could not read
--          what the claim handed it (an id that is not UTF-8), so the job goes to `dead`
--          whatever its attempts, counted as quarantined (lib/jobs.lua's quarantine);
--          or `d`: the worker says the job is dead (the HTTP API's fail with `dead`), so
--          it goes to `dead` whatever its attempts, counted as died
-- Returns  { now, outcome }: 1 retried after backoff_ms, 2 dead (it was the last
--          attempt, or quarantined), 0 the delivery no longer holds the job (its lease
--          ended, or it was cancelled): nothing changed.
--
-- Keeps I1-I5: the job leaves `flight`; a retry is inserted backoff_ms after the clock's
-- reading, rounded up (lib/meta.lua's after_ms: never early, to the microsecond), as
-- schedule.lua would (the wake published if earlier than the leader's), a dead job goes
-- to `dead` with loc 'd'. The error text is kept in `errors` until the job completes or
-- is removed.
local now, armed = meta('armed')
local id = ARGV[1]
local delivery = arg_int(2, 'delivery', 1)
local backoff = arg_int(3, 'backoff_ms', 0)
local quarantined = ARGV[5] == 'q'
local told_dead = ARGV[5] == 'd'
if #ARGV ~= 4 and not (#ARGV == 5 and (quarantined or told_dead)) then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ', not id, delivery, backoff, error[, q|d]' })
end
-- First every read and check, then every write.
local rec = read('hash', 'HGET', JOBS, id)
if not rec then
  return { now, 0 }
end
local j = readable(rec, id)
if j.loc ~= 's' or j.del ~= delivery or not read('zset', 'ZSCORE', FLIGHT, id) then
  return { now, 0 }
end
expect(ERRORS, 'hash')
local b = batch(now)
local dies = quarantined or told_dead or j.att >= j.max
if dies then
  expect(DEAD, 'zset')
else
  j.due = after_ms(backoff)
  insert(b, id, j)
  check_batch(b)
end
redis.call('ZREM', FLIGHT, id)
redis.call('HSET', ERRORS, id, ARGV[4])
if dies then
  j.loc = 'd'
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', JOBS, id, record(j))
  count(quarantined and 'n_quarantined' or 'n_died', 1)
  return { now, 2 }
end
flush(b, armed, true)
count('n_retried', 1)
return { now, 1 }
