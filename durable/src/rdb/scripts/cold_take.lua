-- cold_take.lua: the leader's move to the cold tier, step 1 (cold.rs): far jobs, read.
--
-- KEYS     meta, jobs, due (contract.rs, script_keys::COLD_TAKE); bucket keys are
--          built from meta's prefix
-- ARGV     token, horizon (ms), window (ms), limit (at most MAX_BATCH), deployment (a
--          fresh id, kept as meta's `cdep` if the queue has none yet)
-- Returns  { 0 } if `token` is not the current leadership's or its lease has ended;
--          else { 1, now, cdep, done, walked, w_1, n_1, id, record, ... (n_1 pairs), w_2,
--          n_2, ... }: the far jobs (window, the due time rounded down to `window`, starting at
--          or after now + horizon) among about `limit` ids read from the wheel (a few
--          more when an SSCAN page holds more than asked), grouped by window (start ms);
--          `done` is 1 when this call finished a walk over every bucket that can hold
--          far jobs, 0 when there is more to read (the next call goes on from here);
--          `walked` (0 when done) the start (ms) of the first bucket the walk has still to
--          read: no bucket left holds a job due before it, so a window that ends by then
--          has been read whole (the leader writes its segment then, not before: spread
--          due times still fill their segments).
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
-- 74.5 h). So every bucket that ends after now + horizon + window may hold far jobs.
-- Successive calls walk those buckets once, in order of start (then level), each with
-- SSCAN from the cursor meta's `cscan` keeps (`<member> <cursor>`): a call reads about
-- `limit` ids, so that it holds Redis briefly (a call of `limit` ids is one of many, not
-- one of 10,000), and no call samples jobs an earlier one read (a bucket that held
-- only near jobs would otherwise be read again and again). A member gone from `due`
-- (its bucket emptied by the moves) is followed by the next in that order. SSCAN
-- returns every id the bucket holds from the walk's start to its end at least once
-- (the leader drops repeats); an id added behind the cursor is read by the next walk.
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
    -- A job in a bucket whose skip is 0 (bucketed: its record's head alone is read).
    local due = bucketed(recs[x])
    if due then
      local w = due - due % width
      if w >= now + horizon then
        -- Flat id, record pairs per window: no table per job.
        local list = groups[w]
        if list == nil then
          list = {}
          groups[w] = list
          order[#order + 1] = w
        end
        list[#list + 1] = ids[x]
        list[#list + 1] = recs[x]
      end
    end
  end
end
-- The buckets that may hold far jobs, in order of (start, level).
local walk = {}
for _, member in ipairs(members) do
  if string.sub(member, 1, 1) == M_BUCKET then
    local level, start = string.match(member, '^.(%d):(%d+)$')
    level, start = tonumber(level), tonumber(start)
    if start and start + W0 * SPAN ^ level > from then
      walk[#walk + 1] = { start, level, member }
    end
  end
end
local function before(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end
table.sort(walk, before)
-- Where the last call left the walk: that bucket and cursor, or the first bucket after it.
local at, cursor = 1, '0'
local was, was_cursor = string.match(cscan or '', '^(%S+) (%d+)$')
local was_level, was_start = string.match(was or '', '^.(%d):(%d+)$')
if was_start then
  local mark = { tonumber(was_start), tonumber(was_level) }
  at = #walk + 1
  for x, b in ipairs(walk) do
    if b[3] == was then
      at, cursor = x, was_cursor
      break
    elseif before(mark, b) then
      at = x
      break
    end
  end
end
local done = 0
while true do
  if at > #walk then
    done = 1
    break
  end
  if budget <= 0 then
    break
  end
  local r = read('set', 'SSCAN', bucket_key(walk[at][3]), cursor, 'COUNT', budget)
  take(r[2])
  -- Every page counts, an empty one too: a call reads a bounded number of pages.
  budget = budget - math.max(#r[2], 1)
  cursor = r[1]
  if cursor == '0' then
    at = at + 1
  end
end
local walked = 0
if done == 1 then
  if cscan then
    redis.call('HDEL', META, 'cscan')
  end
else
  redis.call('HSET', META, 'cscan', walk[at][3] .. ' ' .. cursor)
  walked = walk[at][1]
end
local out = { 1, now, cdep, done, walked }
for _, w in ipairs(order) do
  local list = groups[w]
  out[#out + 1] = w
  out[#out + 1] = #list / 2
  local n = #out
  for x = 1, #list do
    out[n + x] = list[x]
  end
end
return out
