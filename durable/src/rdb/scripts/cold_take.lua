-- cold_take.lua: the leader's move to the cold tier, step 1 (cold.rs): far jobs, read.
--
-- KEYS     meta, jobs, due (contract.rs, script_keys::COLD_TAKE); bucket keys are
--          built from meta's prefix
-- ARGV     token, horizon (ms), window (ms), limit (at most MAX_BATCH), deployment (a
--          fresh id, kept as meta's `cdep` if the queue has none yet)
-- Returns  { 0 } if `token` is not the current leadership's or its lease has ended;
--          else { 1, now, cdep, w_1, n_1, id, record, ... (n_1 pairs), w_2, n_2, ... }: at most
--          `limit` jobs (a few more when an SSCAN page holds more than asked) whose
--          window (due time rounded down to `window`) starts at or after now +
--          horizon, grouped by window (start ms).
--
-- `cdep` names this queue's deployment (this Redis) in every object path, so that
-- deployments sharing a store never read, overwrite or sweep each other's segments; it
-- is set here, under the token, once: a take precedes every segment written.
--
-- Writes only meta's `cscan` (below) and `cdep`: the jobs stay in the wheel until cold_commit.lua
-- finds their records unchanged. A job whose skip count is not 0 (stale `ready` entries
-- wait for it, I5) is left in the wheel.
--
-- Where far jobs are (I2): a job goes into the coarsest bucket that starts after the
-- wheel's horizon, which may start long before the job is due (a level-3 bucket spans
-- 74.5 h). So a bucket that starts at or after now + horizon + window holds far jobs
-- only (all of them are taken, SRANDMEMBER); one that starts before that but ends after
-- it may hold both, and is read with SSCAN from the cursor meta's `cscan` kept
-- (`<member> <cursor>`), so that successive calls go through it once rather than
-- sample the same near jobs again.
local now, token, expires, cscan, cdep = meta('token', 'expires', 'cscan', 'cdep')
if token ~= ARGV[1] or (tonumber(expires) or 0) <= now then
  return { 0 }
end
if not cdep then
  cdep = ARGV[5]
  if not string.match(cdep or '', '^[%w-]+$') then
    error({ err = 'ERR bad argument 5 (deployment): ' .. string.format('%q', tostring(cdep)) })
  end
  redis.call('HSET', META, 'cdep', cdep)
end
local horizon = arg_int(2, 'horizon', 0)
local width = arg_int(3, 'window', 1)
local budget = arg_int(4, 'limit', 1, MAX_BATCH)
local from = now + horizon + width
-- Staged jobs are scored before the wheel's horizon, a second ahead at most: what is
-- read here is buckets (and recurring schedules, skipped), a few hundred at most.
local members = read('zset', 'ZRANGEBYSCORE', DUE, now + W0 + LEAD, '+inf')
local groups, order = {}, {}
local function take(ids)
  local recs = read_all('hash', 'HMGET', JOBS, ids)
  -- Every id given is judged, even past the budget: SSCAN's COUNT is a hint, and an id of
  -- its page left out here would be passed by its cursor until the scan came round again
  -- (the leader cuts segments at their size itself).
  for x = 1, #ids do
    local j = readable(recs[x])
    if j and j.skip == 0 and string.find(j.loc, '^%d$') then
      local w = j.due - j.due % width
      if w >= now + horizon then
        group(groups, order, w, { ids[x], recs[x] })
        budget = budget - 1
      end
    end
  end
end
local mixed = {}
for _, member in ipairs(members) do
  if budget <= 0 then
    break
  end
  if string.sub(member, 1, 1) == M_BUCKET then
    local level, start = string.match(member, '^.(%d):(%d+)$')
    start = tonumber(start)
    if start and start >= from then
      take(read('set', 'SRANDMEMBER', bucket_key(member), budget))
    elseif start and start + W0 * SPAN ^ tonumber(level) > from then
      mixed[#mixed + 1] = member
    end
  end
end
-- One mixed bucket per call, from where the last call left it.
local scanned = nil
if budget > 0 and #mixed > 0 then
  local member, cursor = mixed[1], '0'
  local was, at = string.match(cscan or '', '^(%S+) (%d+)$')
  for _, m in ipairs(mixed) do
    if m == was then
      member, cursor = was, at
    end
  end
  local r = read('set', 'SSCAN', bucket_key(member), cursor, 'COUNT', budget)
  take(r[2])
  scanned = member .. ' ' .. r[1]
end
if scanned then
  redis.call('HSET', META, 'cscan', scanned)
end
local out = { 1, now, cdep }
for _, w in ipairs(order) do
  local list = groups[w]
  out[#out + 1] = w
  out[#out + 1] = #list
  for _, pair in ipairs(list) do
    out[#out + 1] = pair[1]
    out[#out + 1] = pair[2]
  end
end
return out
