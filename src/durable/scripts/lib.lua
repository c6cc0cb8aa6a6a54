-- lib.lua: shared by every script of `tickless::durable`; the Rust side prepends it to
-- each script before loading, so each script is one atomic EVAL.
--
-- KEYS[1] is always the queue's meta hash, `tickless:{<queue>}:meta`; every other key of
-- the queue is built from the same prefix, so all of them carry the queue's hash tag and
-- live in one Redis Cluster slot.
--
-- Invariants kept by every script that moves a job (see src/durable/mod.rs for the whole
-- design):
--   I1. A job is a field of `jobs` whose value is `due|loc|attempts|max|skip|payload`.
--   I2. loc is a level digit k: the job is in the set `b:<k>:<start>`, where start is its
--       due time rounded down to the level's width, and `due` holds the member
--       `b<k>:<start>` scored start - LEAD. One `due` member per non-empty bucket.
--   I3. loc 's': the job is staged (`due` holds `j<id>` scored by its due time), or
--       ready (in the `ready` list), or in flight (in `flight`, scored by its lease end).
--   I4. loc 'd': the job is in `dead`. loc 'x': a tombstone of a job cancelled while
--       ready (no payload); it lives until its stale `ready` entries are dropped.
--   I5. skip counts the stale entries of this id in `ready` ahead of any live one; a
--       claim drops them. Entries are only ever appended (RPUSH), so the stale ones are
--       met first.
--   I6. Nothing reaches `ready` before its due time by this queue's clock (Redis TIME,
--       or the manual clock in meta's `clock` field, which only tests set).

local P = string.sub(KEYS[1], 1, -5)
local META = KEYS[1]
local JOBS, DUE, READY = P .. 'jobs', P .. 'due', P .. 'ready'
local FLIGHT, DEAD, ERRORS = P .. 'flight', P .. 'dead', P .. 'errors'
local CHANNEL = P .. 'wake'

-- The wheel: level k has buckets W0 * SPAN^k ms wide; KMAX is the top level.
local W0, SPAN, KMAX = 1024, 64, 6
-- A bucket is drained LEAD ms before its start, into the staged window.
local LEAD = 256
-- A bucket is drained at most DRAIN jobs per script call.
local DRAIN = 256
-- A leader lease shortened for near work ends no later than now + the leader's busy
-- lease, which the leader passes to acquire.lua and which meta's `busy` keeps for every
-- script that schedules; BUSY is the default (`LeaderOptions::busy_lease`'s) for a meta
-- written before there was a `busy` field.
local BUSY = 300

local function int(n)
  return string.format('%d', n)
end

local function garbage(key, what)
  error({ err = 'GARBAGE in ' .. key .. ': ' .. what })
end

-- Raises GARBAGE for `key` if it holds a type other than `want` (a missing key is
-- fine). A script checks every key it will write before its first write, so that it
-- either changes nothing or finishes (Redis does not undo a script's writes when a later
-- command of it fails).
local function expect(key, want)
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= want then
    garbage(key, 'expected a ' .. want .. ', found a ' .. found)
  end
end

local function number(key, field, value)
  if value == false or value == nil then
    return nil
  end
  local n = tonumber(value)
  if n == nil then
    garbage(key, 'field ' .. field .. ' is ' .. string.format('%q', value) .. ', not a number')
  end
  return n
end

-- The clock's last reading, as whole seconds and microseconds within the second: what a
-- relative due time is counted from (see `due_after`).
local CLOCK_S, CLOCK_US = 0, 0

-- Milliseconds on this queue's clock, rounded down ("now" never runs ahead).
local function clock(manual)
  if manual then
    CLOCK_S, CLOCK_US = math.floor(manual / 1000), (manual % 1000) * 1000
    return manual
  end
  local t = redis.call('TIME')
  CLOCK_S, CLOCK_US = tonumber(t[1]), tonumber(t[2])
  return CLOCK_S * 1000 + math.floor(CLOCK_US / 1000)
end

-- The due time, in ms rounded up, of a job due `us` microseconds after the clock's last
-- reading: never before that instant, to the microsecond. (Counted from "now" in whole
-- ms, it could be due up to 0.999 ms early.) Exact in doubles below 2^50 us (35 years);
-- past that, a millisecond later than the rounded sum, which is never early either.
local function due_after(us)
  if us <= 0 then
    -- Due at the reading itself: due now, by the clock's own (rounded down) "now".
    return CLOCK_S * 1000 + math.floor(CLOCK_US / 1000)
  end
  if us < 2 ^ 50 then
    return CLOCK_S * 1000 + math.ceil((CLOCK_US + us) / 1000)
  end
  return CLOCK_S * 1000 + math.ceil(us / 1000) + 1
end

-- Reads meta fields `names` and "now"; numbers where the field must be a number.
local function meta(names)
  local all = { 'clock' }
  for i = 1, #names do
    all[#all + 1] = names[i]
  end
  local values = redis.call('HMGET', META, unpack(all))
  local out = {}
  for i = 2, #all do
    out[all[i]] = values[i]
  end
  return clock(number(META, 'clock', values[1])), out
end

-- The end of the level-0 slot holding `t`: jobs due before it are staged.
local function horizon(t)
  return (math.floor(t / W0) + 1) * W0
end

-- The coarsest level whose bucket for `due` starts at or after `h` (I2).
local function place(due, h)
  local k, w, start = 0, W0, math.floor(due / W0) * W0
  while k < KMAX do
    local w2 = w * SPAN
    local s2 = math.floor(due / w2) * w2
    if s2 < h then
      break
    end
    k, w, start = k + 1, w2, s2
  end
  return k, start
end

-- A job record (I1) as a table, or nil if `rec` is not one.
local function readable(rec)
  local due, loc, att, max, skip, pos =
    string.match(rec, '^(%d+)|([%dsdx])|(%d+)|(%d+)|(%d+)|()')
  if due == nil then
    return nil
  end
  return { due = tonumber(due), loc = loc, att = tonumber(att), max = tonumber(max),
           skip = tonumber(skip), payload = string.sub(rec, pos) }
end

local function unreadable(id)
  return 'field ' .. string.format('%q', id) .. ' is not a job record'
end

-- For calls a user makes: an unreadable record is an error naming it.
local function parse(id, rec)
  local j = readable(rec)
  if j == nil then
    garbage(JOBS, unreadable(id))
  end
  return j
end

-- For the leader and workers, which must go on: a job whose record cannot be read is
-- put in `dead` (its record left as found), with an error naming it, and skipped.
-- Adds `by` to meta's counter `n_<name>` (what /metrics reports, cluster-wide): one
-- HINCRBY, only when there is something to count.
local function count(name, by)
  if by > 0 then
    redis.call('HINCRBY', META, 'n_' .. name, by)
  end
end

local function quarantine(id, now)
  count('quarantined', 1)
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', ERRORS, id, 'garbage in ' .. JOBS .. ': ' .. unreadable(id))
end

local function record(j)
  return int(j.due) .. '|' .. j.loc .. '|' .. int(j.att) .. '|' .. int(j.max) .. '|'
    .. int(j.skip) .. '|' .. j.payload
end

local function bucket_key(member)
  return P .. 'b:' .. string.sub(member, 2)
end

-- The `due` member of the bucket a job with a level digit as loc is in (I2).
local function bucket_of(j)
  local w = W0 * SPAN ^ tonumber(j.loc)
  return 'b' .. j.loc .. ':' .. int(math.floor(j.due / w) * w)
end

-- Takes job `j` (id `id`) out of its bucket or the staged window. Returns true if it was
-- there, false if it is ready or in flight (loc 's' and not staged).
local function unplace(id, j)
  if j.loc == 's' then
    return redis.call('ZREM', DUE, 'j' .. id) == 1
  end
  local member = bucket_of(j)
  local key = bucket_key(member)
  if redis.call('SREM', key, id) == 0 then
    garbage(JOBS, 'job ' .. string.format('%q', id) .. ' names bucket ' .. key
      .. ', which does not hold it')
  end
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', DUE, member)
  end
  return true
end

-- Changes collected by a script and applied with one command per kind.
local function batch()
  return { sets = {}, order = {}, staged = {}, ready = {}, writes = {}, wake = nil }
end

local function wake_at(b, t)
  if b.wake == nil or t < b.wake then
    b.wake = t
  end
end

-- Puts job `j` (id `id`) where its due time says, relative to `now` and horizon `h`,
-- and queues its record for writing. Returns nothing; `flush` applies it.
local function insert(b, id, j, now, h)
  if j.due <= now then
    j.loc = 's'
    b.ready[#b.ready + 1] = id
  elseif j.due < h then
    j.loc = 's'
    b.staged[#b.staged + 1] = j.due
    b.staged[#b.staged + 1] = 'j' .. id
    wake_at(b, j.due)
  else
    local k, start = place(j.due, h)
    j.loc = int(k)
    local member = 'b' .. int(k) .. ':' .. int(start)
    local ids = b.sets[member]
    if ids == nil then
      ids = {}
      b.sets[member] = ids
      b.order[#b.order + 1] = { member, start - LEAD }
    end
    ids[#ids + 1] = id
  end
  b.writes[#b.writes + 1] = id
  b.writes[#b.writes + 1] = record(j)
end

-- Checks, before anything is written, every key `flush` will write for batch `b` (and
-- only those: a bad key that a call does not touch does not stop it). `jobs` is never
-- checked: a record is only written after the script read it (HGET/HMGET fail first on
-- a wrong type), and neither is a key in `read`, which the caller has read already.
local function check_batch(b, read)
  read = read or {}
  if (#b.order > 0 or #b.staged > 0) and not read[DUE] then
    expect(DUE, 'zset')
  end
  if #b.ready > 0 and not read[READY] then
    expect(READY, 'list')
  end
  for _, pair in ipairs(b.order) do
    expect(bucket_key(pair[1]), 'set')
  end
end

-- Applies a batch, first checking it (check_batch) unless the caller did (`checked`,
-- before writes of its own). `m` holds meta's `armed` (the earliest time the leader is
-- known to wake for), `expires` and `busy` (`nil`: no leader to tell); an earlier new
-- wake is published on the queue's channel, and shortens the leader's lease to
-- max(wake, now + busy) so that a dead leader is replaced in time.
local function flush(b, now, m, checked)
  if not checked then
    check_batch(b)
  end
  for _, pair in ipairs(b.order) do
    local member, score = pair[1], pair[2]
    redis.call('SADD', bucket_key(member), unpack(b.sets[member]))
    if redis.call('ZADD', DUE, 'NX', score, member) == 1 then
      wake_at(b, score)
    end
  end
  if #b.staged > 0 then
    redis.call('ZADD', DUE, unpack(b.staged))
  end
  if #b.ready > 0 then
    redis.call('RPUSH', READY, unpack(b.ready))
  end
  if #b.writes > 0 then
    redis.call('HSET', JOBS, unpack(b.writes))
  end
  local armed = m and tonumber(m.armed)
  if b.wake ~= nil and armed ~= nil and armed > 0 and b.wake < armed then
    local e = tonumber(m.expires) or 0
    local short = math.max(b.wake, now + (tonumber(m.busy) or BUSY))
    if e > short then
      e = short
    end
    redis.call('HSET', META, 'armed', int(b.wake), 'expires', int(e))
    redis.call('PUBLISH', CHANNEL, int(b.wake) .. ' ' .. int(e))
  end
end

-- Recurring schedules (src/durable/mod.rs, "Recurring jobs"). Three keys of their own:
--   `recur`  hash: id -> `kind|policy|max|period|spec|payload`; kind 'e' (every `period`
--            ms) or 'c' (cron: spec is `<zone> <expression>`, read only by the Rust
--            side); policy 'b' (Burst), 'd' (Delay) or 's' (Skip).
--   `rnext`  hash: id -> `last:t1,t2,...`: `last` is the latest occurrence handed out
--            (or when the schedule was set), then the known occurrences after it, in
--            order. An `every` schedule knows one; a cron schedule what the Rust side
--            computed (lib.lua cannot read cron expressions).
--   `rlow`   set: ids of cron schedules with fewer than RLOW_AT occurrences known; the
--            leader computes more and appends them with recur_fill.lua.
-- `due` holds `r<id>` scored by the schedule's next occurrence (by that time itself:
-- never early), while one is known.
-- R1. An occurrence t becomes the job `<id>@t`, created by the same (fenced) tick that
--     moves `last` to t; `rnext` only ever holds times after `last`, and appends only
--     later ones: so each occurrence becomes at most one job, however leaders change.
local RECUR, RNEXT, RLOW = P .. 'recur', P .. 'rnext', P .. 'rlow'
local RLOW_AT = 8

-- A schedule record as a table, or nil if `rec` is not one.
local function recur_spec(rec)
  local kind, policy, max, period, spec, pos =
    string.match(rec, '^([ec])|([bds])|(%d+)|(%d+)|([^|]*)|()')
  if kind == nil then
    return nil
  end
  return { kind = kind, policy = policy, max = tonumber(max), period = tonumber(period),
           spec = spec, payload = string.sub(rec, pos) }
end

-- `last:t1,t2,...` as last and a list, or nil if it is not that.
local function recur_times(s)
  local last, rest = string.match(s, '^(%d+):([%d,]*)$')
  if last == nil then
    return nil
  end
  local ts = {}
  for t in string.gmatch(rest, '%d+') do
    ts[#ts + 1] = tonumber(t)
  end
  return tonumber(last), ts
end

local function recur_value(last, ts, from)
  local parts = {}
  for i = from, #ts do
    parts[#parts + 1] = int(ts[i])
  end
  return int(last) .. ':' .. table.concat(parts, ',')
end

-- The reads and the plan for the due `r<id>` members `rs` (a list of ids) of a tick at
-- `now`: jobs go into batch `b` (as `insert` does, so `flush` writes them), and their
-- lags into `lags`. Returns the plan for recur_write and the budget left. Reads only:
-- the caller writes after every check (recur_check).
local function recur_take(rs, now, h, b, lags, budget)
  local plan = { next = {}, rescore = {}, drop = {}, low = {}, more = false }
  if #rs == 0 then
    return plan, budget
  end
  -- Checked by name first (HMGET would fail too, but with a bare WRONGTYPE).
  expect(RECUR, 'hash')
  expect(RNEXT, 'hash')
  local recs = redis.call('HMGET', RECUR, unpack(rs))
  local nexts = redis.call('HMGET', RNEXT, unpack(rs))
  local jobs = {}   -- { id, t, spec } per occurrence to run
  for i = 1, #rs do
    local id = rs[i]
    local s = recs[i] and recur_spec(recs[i])
    local last, ts = nil, nil
    if nexts[i] then
      last, ts = recur_times(nexts[i])
    end
    if s == nil or last == nil then
      -- Unscheduled, or not ours: stop waking for it (the record is left as found, and
      -- `Queue::schedules` names it).
      plan.drop[#plan.drop + 1] = 'r' .. id
    else
      local run = {}
      local k = 0
      while k < #ts and ts[k + 1] <= now do
        k = k + 1
      end
      if s.kind == 'e' then
        local n, p = ts[1], math.max(s.period, 1)
        if n ~= nil and n <= now then
          local missed = math.floor((now - n) / p)
          local latest = n + missed * p
          local nxt
          if s.policy == 'b' then
            local count = math.min(missed + 1, math.max(budget, 0))
            for c = 0, count - 1 do
              run[#run + 1] = n + c * p
            end
            nxt = n + count * p
          elseif s.policy == 'd' and missed > 0 then
            run[1] = latest
            nxt = now + p
          else
            run[1] = latest
            nxt = latest + p
          end
          ts = { nxt }
          k = 0
        end
      elseif k > 0 then
        if s.policy == 'b' then
          for c = 1, math.min(k, math.max(budget, 0)) do
            run[#run + 1] = ts[c]
          end
          k = #run
        elseif k < #ts then
          -- The latest due occurrence runs; those before it are the missed ones.
          run[1] = ts[k]
        else
          -- Every known occurrence is due: a later one may be due too, which only the
          -- Rust side can tell. Run nothing yet; the leader appends more (recur_fill).
          k = 0
          plan.low[#plan.low + 1] = id
          ts = {}
        end
      end
      if #run > 0 then
        last = run[#run]
        budget = budget - #run
        for _, t in ipairs(run) do
          jobs[#jobs + 1] = { id .. '@' .. int(t), t, s }
        end
      end
      if s.kind == 'c' and #ts - k < RLOW_AT and plan.low[#plan.low] ~= id then
        plan.low[#plan.low + 1] = id
      end
      if #ts > k then
        plan.next[#plan.next + 1] = id
        plan.next[#plan.next + 1] = recur_value(last, ts, k + 1)
        plan.rescore[#plan.rescore + 1] = ts[k + 1]
        plan.rescore[#plan.rescore + 1] = 'r' .. id
        if ts[k + 1] <= now then
          plan.more = true
        end
      else
        if #run > 0 then
          plan.next[#plan.next + 1] = id
          plan.next[#plan.next + 1] = recur_value(last, ts, k + 1)
        end
        plan.drop[#plan.drop + 1] = 'r' .. id
      end
    end
  end
  if #jobs > 0 then
    local ids = {}
    for x = 1, #jobs do
      ids[x] = jobs[x][1]
    end
    local old = redis.call('HMGET', JOBS, unpack(ids))
    for x = 1, #jobs do
      local jid, t, s = jobs[x][1], jobs[x][2], jobs[x][3]
      local o = old[x] and readable(old[x])
      -- R1: a job of this name exists only if a user made one: it is left alone.
      if old[x] == false or (o and o.loc == 'x') then
        lags[#lags + 1] = now - t
        insert(b, jid, { due = t, loc = 's', att = 0, max = s.max, skip = o and o.skip or 0,
                         payload = s.payload }, now, h)
      end
    end
  end
  return plan, budget
end

-- Checks the keys recur_write will write that recur_take has not checked (it checked
-- `recur` and `rnext`; the caller checks `due`).
local function recur_check(plan)
  if #plan.low > 0 then
    expect(RLOW, 'set')
  end
end

local function recur_write(plan)
  if #plan.next > 0 then
    redis.call('HSET', RNEXT, unpack(plan.next))
  end
  if #plan.rescore > 0 then
    redis.call('ZADD', DUE, unpack(plan.rescore))
  end
  if #plan.drop > 0 then
    redis.call('ZREM', DUE, unpack(plan.drop))
  end
  if #plan.low > 0 then
    redis.call('SADD', RLOW, unpack(plan.low))
  end
end
