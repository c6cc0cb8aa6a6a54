-- schedule.lua: adds jobs, each unless its id already names a job (idempotent on id).
--
-- KEYS     meta, jobs, due, ready, sent (contract.rs, script_keys::SCHEDULE); bucket
--          keys are built from meta's prefix
-- ARGV     n, then n times: id, when, max_attempts, payload; then, from a call that may
--          be sent again (ConnectOptions::retry_schedules_for), its token and how long
--          (ms) it may be sent again
--          when is 'a<ms>' (due at that time on the queue's clock) or 'r<us>' (due that
--          many microseconds from now, to the microsecond: see lib/meta.lua's arg_when)
-- Returns  { now, added_1, ..., added_n }: added is 1 for a new job, 0 for an id in use
--          (or one this call's token added before).
--
-- A resent call is exact: a try whose answer was lost may have added a job that has run
-- and completed (or been cancelled) before the next try arrives, freeing its id. So a
-- call with a token remembers, in `sent` (member `<token>:<id>`, scored by now), each
-- job it adds that is due within the resend window: only those can complete before a
-- resend comes. A try that finds its own token's member answers 0 for that id. Members
-- older than the window are removed by later calls, a few per call; later jobs pay
-- nothing, and neither do acks.
--
-- Keeps I1-I5: a new job goes to `ready` (due), the staged window (due before the
-- horizon) or the bucket of the coarsest level that starts at or after the horizon; an
-- id whose record is a tombstone is reused, and its skip count carried over (I5). An id
-- in the cold index is a job too (C1), once the queue has had a cold tier.
local now, armed, cold = meta('armed', 'cold')
if cold then
  cold_size(cold)
end
local n = arg_int(1, 'n', 1)
local token, window
if #ARGV == 3 + 4 * n then
  token, window = ARGV[2 + 4 * n], arg_int(3 + 4 * n, 'resend window', 1)
elseif #ARGV ~= 1 + 4 * n then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ' for ' .. n .. ' jobs' })
end
local ids = {}
for i = 1, n do
  ids[i] = ARGV[4 * i - 2]
end
local recs = read_all('hash', 'HMGET', JOBS, ids)
local mine, remember = nil, {}
if token then
  local members = {}
  for i = 1, n do
    members[i] = token .. ':' .. ids[i]
  end
  mine = read_all('zset', 'ZMSCORE', SENT, members)
end
local b = batch(now)
local out = { now }
-- Ids met already in this call (only a call of several jobs can name one twice).
local seen = n > 1 and {} or nil
local added = 0
-- Every argument is checked in this loop, before anything is written (so is every key:
-- `jobs` by its read, the rest by flush's check_batch, or by flush's first write).
for i = 1, n do
  local base = 4 * i - 2
  local id = ids[i]
  local due, max = arg_when(base + 1), arg_int(base + 2, 'max_attempts', 1)
  local taken, skip = seen and seen[id], 0
  if not taken and recs[i] then
    local old = readable(recs[i], id)
    taken, skip = old.loc ~= 'x', old.skip
  elseif not taken and cold and read('hash', 'HGET', cold_key(id), id) then
    taken = true
  end
  if mine and mine[i] then
    taken = true
  end
  if taken then
    out[i + 1] = 0
  else
    insert(b, id, { due = due, loc = 's', att = 0, max = max, skip = skip,
                    payload = ARGV[base + 3] })
    if token and due < now + window then
      remember[#remember + 1] = now
      remember[#remember + 1] = token .. ':' .. id
    end
    if seen then
      seen[id] = true
    end
    out[i + 1] = 1
    added = added + 1
  end
end
flush(b, armed)
count('n_scheduled', added)
if token then
  -- Twice as many old members out as new ones in: `sent` stays within the window's.
  local old = read('zset', 'ZRANGEBYSCORE', SENT, '-inf', now - window, 'LIMIT', 0,
                   #remember + 2)
  call_all('ZREM', SENT, old)
  call_all('ZADD', SENT, remember)
end
return out
