-- retry_dead.lua: gives dead jobs a new set of attempts, due now.
--
-- KEYS     meta, jobs, due, ready, dead, errors (contract.rs,
--          script_keys::RETRY_DEAD); bucket keys are built from meta's prefix
-- ARGV     ids (one to MAX_BATCH)
-- Returns  for each id: 1 if the job was dead and is now ready, 0 if the id names no
--          dead job, -1 if it is dead with a record that cannot be read (quarantined by
--          a leader or worker: nothing to retry; its error names it).
--
-- Keeps I1-I5: the jobs leave `dead` for `ready` with their attempts reset and their
-- errors kept until they complete. One call retries a whole page of an operator's
-- "retry all dead".
if #ARGV == 0 or #ARGV > MAX_BATCH then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ' ids, not 1 to ' .. MAX_BATCH })
end
local now, armed = meta('armed')
-- First every read and check, then every write.
local recs = read_all('hash', 'HMGET', JOBS, ARGV)
local out, gone, seen = {}, {}, {}
local b = batch(now)
for i = 1, #ARGV do
  local id, rec = ARGV[i], recs[i]
  local j = not seen[id] and readable(rec) or nil
  if rec and j == nil and not seen[id] then
    out[i] = -1
  elseif j and j.loc == 'd' then
    j.att = 0
    j.due = now
    insert(b, id, j)
    gone[#gone + 1] = id
    -- An id given twice is retried once.
    seen[id] = true
    out[i] = 1
  else
    out[i] = 0
  end
end
if #gone == 0 then
  return out
end
-- Checked before the first write: `dead`, and where the jobs go.
expect(DEAD, 'zset')
check_batch(b)
call_all('ZREM', DEAD, gone)
flush(b, armed, true)
return out
