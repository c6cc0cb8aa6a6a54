-- repair.lua: one chunk of the repair pass (src/repair.rs): puts back jobs whose
-- record names a place that does not hold them, and removes entries that name no job.
--
-- KEYS     all twelve (contract.rs, script_keys::ALL); bucket keys are built from meta's
--          prefix
-- ARGV     token ('-' for none: an operator's pass; else the leader's, fenced as in
--          tick.lua), what, then the chunk's ids or members. `what` is
--   jobs     a cursor of `jobs`: the script reads the next page itself (HSCAN ... COUNT
--            256, ids and records together), so no record (payload) leaves Redis and
--            none is read twice; each record's place is checked (I2-I4, "Repairs" below)
--   ready    ids that `jobs` reported, whose entries the caller did not count in `ready`
--            as their records say: counted again here (one pass over `ready`)
--   due      members of `due`          dead    ids of `dead`       errors  ids of `errors`
--   recur    ids of `recur`            rnext   ids of `rnext`      rlow    ids of `rlow`
--   flight   (no ids) the lease marker, if `flight` is not empty
-- Returns  { 0 } when fenced out; else { 1, placed, removed, cursor, id_1, skip_1, live_1,
--          ... }: jobs put back (or records corrected), entries removed, the cursor of
--          the next page of `jobs` (0: the last; always 0 for other steps), and (for
--          `jobs`) the jobs whose entries in `ready` the caller should count: those that should be
--          there (live 1: `skip` stale entries, then a live one) and those elsewhere
--          with stale entries, and tombstones (live 0: exactly `skip` entries).
--
-- Repairs, each judged on the state at this moment (every script is atomic, so between
-- two of them every job is where its record says, and this script changes only what
-- breaks that): a job in no place is inserted anew by its due time, as schedule.lua
-- would (due: `ready`); a bucket that holds its jobs but has no `due` member gets it; a
-- dead job not in `dead` goes there; an unreadable record is quarantined (lib/jobs.lua). A job
-- in flight is never moved, so repair delivers nothing twice. A record whose skip count
-- (I5) does not match the stale entries `ready` holds is corrected, wherever the job is
-- (after `ready` was deleted, a job elsewhere would otherwise lose its next live entry);
-- a tombstone with none left is removed. Every key is checked before the first write.
local now, token, expires, armed = meta('token', 'expires', 'armed')
if ARGV[1] ~= '-' and (token ~= ARGV[1] or (tonumber(expires) or 0) <= now) then
  return { 0 }
end
local what = ARGV[2]
local out = { 1, 0, 0, 0 }
-- Each id once: a scan may report one twice (HSCAN, while `jobs` is resized), and a job
-- put twice in one call would be pushed twice (I5).
local items, given, recs = {}, {}, nil
if what == 'jobs' then
  if #ARGV ~= 3 or not string.match(ARGV[3], '^%d+$') then
    error({ err = 'ERR bad argument 3 (cursor): ' .. string.format('%q', tostring(ARGV[3])) })
  end
  local page = read('hash', 'HSCAN', JOBS, ARGV[3], 'COUNT', 256)
  out[4] = page[1]
  recs = {}
  local pairs_ = page[2]
  for i = 1, #pairs_, 2 do
    local id = pairs_[i]
    if not given[id] then
      given[id] = true
      items[#items + 1] = id
      recs[#items] = pairs_[i + 1]
    end
  end
else
  for i = 3, #ARGV do
    if not given[ARGV[i]] then
      given[ARGV[i]] = true
      items[#items + 1] = ARGV[i]
    end
  end
end
local b = batch(now)
local removes = {}   -- { key, command, member }
local adds = {}      -- { key, command, args... }: the writes besides the batch
local bad = {}       -- unreadable records to quarantine

local function remove(key, cmd, member)
  removes[#removes + 1] = { key, cmd, member }
end

local function put(j, id)
  j.loc = 's'
  insert(b, id, j)
end

-- For the `ready` step: job `id` (record `j`) should have `j.skip` stale entries in
-- `ready`, and a live one after them if `live`.
local function look_for(id, j, live)
  out[#out + 1] = id
  out[#out + 1] = j.skip
  out[#out + 1] = live and 1 or 0
end

if what == 'jobs' and #items > 0 then
  -- Reads by kind, one command each per page (per bucket for bucket jobs); the records
  -- came with the page.
  local dead, staged, buckets, order = {}, {}, {}, {}
  for i, id in ipairs(items) do
    local j = readable(recs[i])
    if j and (j.loc == 'x' or (j.loc == 'd' and j.skip > 0)) then
      -- A tombstone, or a dead job with stale entries: its count is checked (and a
      -- tombstone with none is removed).
      look_for(id, j, false)
    end
    if recs[i] and (j == nil or j.loc == 'd') then
      dead[#dead + 1] = { id, j }
    elseif j and j.loc == 's' then
      staged[#staged + 1] = { id, j }
    elseif j and j.loc ~= 'x' then
      group(buckets, order, bucket_of(j), { id, j })
    end
  end
  local function ids_of(list, prefix)
    local out = {}
    for x = 1, #list do
      out[x] = (prefix or '') .. list[x][1]
    end
    return out
  end
  if #dead > 0 then
    local held = read('zset', 'ZMSCORE', DEAD, unpack(ids_of(dead)))
    for x, e in ipairs(dead) do
      if not held[x] then
        if e[2] == nil then
          bad[#bad + 1] = e[1]
        else
          adds[#adds + 1] = { DEAD, 'ZADD', now, e[1] }
        end
      end
    end
  end
  if #staged > 0 then
    local in_due = read('zset', 'ZMSCORE', DUE, unpack(ids_of(staged, M_STAGED)))
    local in_flight = read('zset', 'ZMSCORE', FLIGHT, unpack(ids_of(staged)))
    for x, e in ipairs(staged) do
      if not in_due[x] and not in_flight[x] then
        look_for(e[1], e[2], true)
      elseif e[2].skip > 0 then
        look_for(e[1], e[2], false)
      end
    end
  end
  if #order > 0 then
    local scores = read('zset', 'ZMSCORE', DUE, unpack(order))
    for b_i, member in ipairs(order) do
      local list = buckets[member]
      local key = bucket_key(member)
      expect(key, 'set')
      local held = redis.call('SMISMEMBER', key, unpack(ids_of(list)))
      local kept = false
      for x, e in ipairs(list) do
        local j = e[2]
        if held[x] == 0 then
          put(j, e[1])
        else
          kept = true
        end
        if j.skip > 0 then
          -- Put back into `ready` itself (due already), or elsewhere.
          look_for(e[1], j, held[x] == 0 and j.loc == 's' and j.due <= now)
        end
      end
      if kept and not scores[b_i] then
        -- Scored by the bucket's start (I2), which its member names (`put` may have
        -- changed the records' loc).
        local start = tonumber(string.match(member, ':(%d+)$'))
        adds[#adds + 1] = { DUE, 'ZADD', start - LEAD, member }
      end
    end
  end
elseif what == 'ready' and #items > 0 then
  local recs = read('hash', 'HMGET', JOBS, unpack(items))
  -- Each id's entries in `ready`, counted in one pass over the list, a page at a time:
  -- O(length) per call (an LPOS per id would be O(ids x length): 250 ms for 256 ids
  -- in 100,000 entries).
  local found = {}
  for _, id in ipairs(items) do
    found[id] = 0
  end
  local page = 10000
  for start = 0, math.huge, page do
    local ids = read('list', 'LRANGE', READY, start, start + page - 1)
    for _, id in ipairs(ids) do
      local n = found[id]
      if n then
        found[id] = n + 1
      end
    end
    if #ids < page then
      break
    end
  end
  for i, id in ipairs(items) do
    local j = readable(recs[i])
    local n = found[id]
    if j == nil then
      -- Gone, or unreadable (the `jobs` step quarantined it): nothing to count.
    elseif j.loc == 's' and not read('zset', 'ZSCORE', DUE, M_STAGED .. id)
        and not read('zset', 'ZSCORE', FLIGHT, id) then
      -- Ready: the first `skip` entries are stale (I5); a live one must follow.
      if n <= j.skip then
        j.skip = n
        put(j, id)
      end
    elseif j.loc == 'x' and n == 0 then
      -- A tombstone with no stale entry left to drop: done with.
      remove(JOBS, 'HDEL', id)
    elseif n ~= j.skip then
      -- Anywhere else, every entry is stale: a wrong count would drop a live entry
      -- pushed later (or keep a tombstone forever).
      j.skip = n
      adds[#adds + 1] = { JOBS, 'HSET', id, record(j) }
    end
  end
elseif what == 'due' then
  -- The records of the staged members, in one read.
  local staged = {}
  for _, member in ipairs(items) do
    if string.sub(member, 1, 1) == M_STAGED then
      staged[#staged + 1] = string.sub(member, 2)
    end
  end
  local recs = {}
  if #staged > 0 then
    local got = read('hash', 'HMGET', JOBS, unpack(staged))
    for x, id in ipairs(staged) do
      recs[id] = got[x]
    end
  end
  for _, member in ipairs(items) do
    local kind, rest = string.sub(member, 1, 1), string.sub(member, 2)
    local keep = false
    if kind == M_STAGED then
      local j = readable(recs[rest] or '')
      keep = j ~= nil and j.loc == 's'
    elseif kind == M_BUCKET and string.match(rest, '^%d:%d+$') then
      keep = redis.call('EXISTS', bucket_key(member)) == 1
    elseif kind == M_RECUR then
      keep = read('hash', 'HEXISTS', RECUR, rest) == 1
    elseif member == M_LEASE then
      -- Acks leave it; over an empty `flight` the tick drops it when it comes, as it
      -- does any time a worker acks the last job in flight: not a fault to repair.
      keep = true
    end
    if not keep then
      remove(DUE, 'ZREM', member)
    end
  end
elseif what == 'dead' then
  for _, id in ipairs(items) do
    local rec = read('hash', 'HGET', JOBS, id)
    local j = readable(rec)
    -- An unreadable record in `dead` is a quarantined job: it stays.
    if not rec or (j and j.loc ~= 'd') then
      remove(DEAD, 'ZREM', id)
    end
  end
elseif what == 'errors' then
  for _, id in ipairs(items) do
    if read('hash', 'HEXISTS', JOBS, id) == 0 then
      remove(ERRORS, 'HDEL', id)
    end
  end
elseif what == 'rnext' or what == 'rlow' then
  local key, cmd = RNEXT, 'HDEL'
  if what == 'rlow' then
    key, cmd = RLOW, 'SREM'
  end
  for _, id in ipairs(items) do
    if read('hash', 'HEXISTS', RECUR, id) == 0 then
      remove(key, cmd, id)
    end
  end
elseif what == 'recur' then
  for _, id in ipairs(items) do
    local s = recur_spec(read('hash', 'HGET', RECUR, id) or '')
    -- A record that is not a schedule is left as found (`Queue::schedules` names it).
    if s then
      local nx = read('hash', 'HGET', RNEXT, id)
      local last, ts, lost = nil, nil, false
      if nx then
        -- Not a list of times: left as found, as the tick leaves it (`Queue::schedules`
        -- names it; setting the schedule again mends it).
        last, ts = recur_times(nx)
      else
        -- Its next occurrences are lost: counted from now, as when it was set.
        last, ts, lost = now, {}, true
        if s.kind == 'e' then
          ts[1] = now + math.max(s.period, 1)
        end
        adds[#adds + 1] = { RNEXT, 'HSET', id, recur_value(last, ts, 1) }
      end
      if last == nil then
        ts = {}
      end
      if #ts > 0 and not read('zset', 'ZSCORE', DUE, M_RECUR .. id) then
        adds[#adds + 1] = { DUE, 'ZADD', ts[1], M_RECUR .. id }
        wake_at(b, ts[1])
      end
      if lost and s.kind == 'c' then
        -- The leader computes its occurrences when a tick flags `rlow`: woken now, it
        -- ticks. (A schedule that has times is left to the tick and the refill, which
        -- keep `rlow` themselves: a refill that finds no more takes it out for good.)
        adds[#adds + 1] = { RLOW, 'SADD', id }
        wake_at(b, now)
      end
    end
  end
elseif what == 'flight' then
  local head = read('zset', 'ZRANGE', FLIGHT, 0, 0, 'WITHSCORES')
  local marker = read('zset', 'ZSCORE', DUE, M_LEASE)
  if #head > 0 and (not marker or tonumber(marker) > tonumber(head[2])) then
    adds[#adds + 1] = { DUE, 'ZADD', head[2], M_LEASE }
    wake_at(b, tonumber(head[2]))
  end
elseif what ~= 'jobs' and what ~= 'ready' then
  error({ err = 'ERR bad argument 2 (what): ' .. string.format('%q', tostring(what)) })
end
-- Every key this call writes, checked before the first write.
if #bad > 0 then
  quarantine_check()
end
local types = { [JOBS] = 'hash', [DUE] = 'zset', [DEAD] = 'zset', [ERRORS] = 'hash',
                [RNEXT] = 'hash', [RLOW] = 'set' }
for _, x in ipairs(removes) do
  expect(x[1], types[x[1]])
end
for _, x in ipairs(adds) do
  expect(x[1], types[x[1]])
end
check_batch(b)
-- The writes.
for _, id in ipairs(bad) do
  quarantine(id, now)
end
-- Counted as removed only what was there: an entry judged from a page read before this
-- call may have gone since (a job promoted, acked or cancelled meanwhile).
local removed = 0
for _, x in ipairs(removes) do
  removed = removed + redis.call(x[2], x[1], x[3])
end
for _, x in ipairs(adds) do
  redis.call(x[2], x[1], unpack(x, 3))
end
flush(b, armed, true)
out[2] = #bad + #adds + #b.writes / 2
out[3] = removed
count('n_repaired', out[2] + out[3])
return out
