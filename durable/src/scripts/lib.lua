-- lib.lua: shared by every script of `tickless::durable`. The Rust side (scripts.rs)
-- puts each script's text first, as the body of a function `main`, behind a one-line
-- header, then this file, then `return main()`: so each script is one atomic EVAL, and
-- Redis's line numbers are the script file's (a line of this file is named
-- `lib.lua:<line>` in the error the Rust side shows). Every `function name(...)` of this
-- file assigns a local the header declared; state of this file alone is `local` here.
--
-- The header (contract.rs, `lua_header`) names the keys the script declares in KEYS
-- (META, JOBS, DUE, READY, FLIGHT, DEAD, ERRORS, RECUR, RNEXT, RLOW; an undeclared one is
-- nil), the queue's prefix P (KEYS[1] is always meta, `tickless:{<queue>}:meta`), the
-- wake CHANNEL, the `due` member prefixes (M_BUCKET, M_STAGED, M_RECUR, M_LEASE) and
-- bucket keys' (BUCKET), and the wheel's constants: level k has buckets W0 * SPAN^k ms
-- wide, KMAX is the top level, a bucket is drained LEAD ms before its start, at most
-- DRAIN jobs per call; RLOW_AT is below; BUSY stands in for meta's `busy` (the leader's
-- busy lease, which acquire.lua writes) in a meta written before that field existed;
-- MAX_BATCH is the most jobs a claim or a tick takes (contract.rs).
-- Bucket keys are the only keys built here (bucket_key): a script cannot know them
-- before it has read `due`.
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

function int(n)
  return string.format('%d', n)
end

function garbage(key, what)
  error({ err = 'GARBAGE in ' .. key .. ': ' .. what })
end

-- The keys this call has found to hold the right type (or nothing), by name.
local TYPED = {}

-- Raises GARBAGE for `key` if it holds a type other than `want` (a missing key is
-- fine). A script checks every key it will write before its first write, so that it
-- either changes nothing or finishes (Redis does not undo a script's writes when a later
-- command of it fails). A key checked or read already in this call is not asked again.
function expect(key, want)
  if TYPED[key] then
    return
  end
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= want then
    garbage(key, 'expected a ' .. want .. ', found a ' .. found)
  end
  TYPED[key] = true
end

-- Runs the read-only command `cmd` on `key`, which should hold a `want`: its answer, or
-- GARBAGE naming the key if it holds another type (where Redis would say WRONGTYPE
-- without naming it). The key then counts as checked (see `expect`).
function read(want, cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    expect(key, want)
    error(r)
  end
  TYPED[key] = true
  return r
end

-- A script's first write, under read's naming: if `key` holds another type than `want`,
-- GARBAGE naming it, and the script has changed nothing. (Saves the TYPE that `expect`
-- would ask first, where a script writes a key it does not read.)
function first_write(want, cmd, key, ...)
  return read(want, cmd, key, ...)
end

-- ARGV[i] as an integer at least `min` (0 if nil) and at most `max` (if given), or an
-- error naming the argument (the Rust side never sends one that is not: this guards the
-- scripts against other callers).
function arg_int(i, what, min, max)
  local n = tonumber(ARGV[i])
  if n == nil or n ~= math.floor(n) or n < (min or 0) or (max and n > max) then
    error({ err = 'ERR bad argument ' .. i .. ' (' .. what .. '): '
      .. string.format('%q', tostring(ARGV[i])) })
  end
  return n
end

-- The most values one command is sent from a Lua table. Redis's Lua 5.1 `unpack` raises
-- "too many results to unpack" past its C stack (LUAI_MAXCSTACK, 8000 slots, less what
-- the stack holds: measured on Redis 7.0, 7998 values pass at the top of an EVAL and
-- fail two calls deeper). Half of that leaves room for any depth these scripts reach;
-- it is even, so no chunk splits a pair (HSET's field and value, ZADD's score and
-- member).
local CHUNK = 4000

-- Runs `cmd key [opt] v...` for the values of `list`, in chunks of at most CHUNK, in
-- order (RPUSH keeps it), and returns the sum of the replies: for variadic writes whose
-- values (or pairs) each apply alone (HSET, HDEL, SADD, SREM, ZADD, ZREM, RPUSH), so a
-- split changes nothing, and whose reply is a count. An empty list sends nothing. Every
-- write whose values grow with a batch goes through here, so that no script writes and
-- then fails at the unpack limit.
function call_all(cmd, key, list, opt)
  local n = 0
  for i = 1, #list, CHUNK do
    local last = math.min(i + CHUNK - 1, #list)
    if opt then
      n = n + redis.call(cmd, key, opt, unpack(list, i, last))
    else
      n = n + redis.call(cmd, key, unpack(list, i, last))
    end
  end
  return n
end

-- `read(want, cmd, key, v...)` for the values of `list`, in chunks as call_all: the
-- answers, one per value, in order (HMGET, ZMSCORE, SMISMEMBER). An empty list sends
-- nothing and answers an empty table.
function read_all(want, cmd, key, list)
  local out = {}
  for i = 1, #list, CHUNK do
    local r = read(want, cmd, key, unpack(list, i, math.min(i + CHUNK - 1, #list)))
    for x = 1, #r do
      out[#out + 1] = r[x]
    end
  end
  return out
end

-- ARGV[i] when it is a time argument: 'a<ms>' (at that time) or 'r<us>' (that long
-- after the clock's last reading: see due_after), as the due time in ms.
function arg_when(i)
  local kind, t = string.match(ARGV[i] or '', '^([ar])(%d+)$')
  if kind == nil then
    error({ err = 'ERR bad argument ' .. i .. ' (when): ' .. string.format('%q', tostring(ARGV[i])) })
  end
  if kind == 'r' then
    return due_after(tonumber(t))
  end
  return tonumber(t)
end

function number(key, field, value)
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
function clock(manual)
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
function due_after(us)
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
function meta(names)
  local all = { 'clock' }
  for i = 1, #names do
    all[#all + 1] = names[i]
  end
  local values = read('hash', 'HMGET', META, unpack(all))
  local out = {}
  for i = 2, #all do
    out[all[i]] = values[i]
  end
  return clock(number(META, 'clock', values[1])), out
end

-- The end of the level-0 slot holding `t`: jobs due before it are staged.
function horizon(t)
  return (math.floor(t / W0) + 1) * W0
end

-- The coarsest level whose bucket for `due` starts at or after `h` (I2).
function place(due, h)
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
function readable(rec)
  local due, loc, att, max, skip, pos =
    string.match(rec, '^(%d+)|([%dsdx])|(%d+)|(%d+)|(%d+)|()')
  if due == nil then
    return nil
  end
  return { due = tonumber(due), loc = loc, att = tonumber(att), max = tonumber(max),
           skip = tonumber(skip), payload = string.sub(rec, pos) }
end

function unreadable(id)
  return 'field ' .. string.format('%q', id) .. ' is not a job record'
end

-- For calls a user makes: an unreadable record is an error naming it.
function parse(id, rec)
  local j = readable(rec)
  if j == nil then
    garbage(JOBS, unreadable(id))
  end
  return j
end

-- Adds `by` to meta's counter `n_<name>` (what /metrics reports, cluster-wide): one
-- HINCRBY, only when there is something to count.
function count(name, by)
  if by > 0 then
    local r = redis.pcall('HINCRBY', META, 'n_' .. name, by)
    if type(r) == 'table' and r.err then
      -- A counter that is not an integer starts again, rather than fail a script that
      -- has written already (meta's type was checked when the script read it).
      redis.call('HSET', META, 'n_' .. name, by)
    end
  end
end

-- For the leader and workers, which must go on: a job whose record cannot be read is
-- put in `dead` (its record left as found), with an error naming it, and skipped. The
-- caller has checked `dead` and `errors` (quarantine_check).
function quarantine(id, now)
  count('quarantined', 1)
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', ERRORS, id, 'garbage in ' .. JOBS .. ': ' .. unreadable(id))
end

function quarantine_check()
  expect(DEAD, 'zset')
  expect(ERRORS, 'hash')
end

function record(j)
  return int(j.due) .. '|' .. j.loc .. '|' .. int(j.att) .. '|' .. int(j.max) .. '|'
    .. int(j.skip) .. '|' .. j.payload
end

function bucket_key(member)
  return P .. BUCKET .. string.sub(member, 2)
end

-- Appends `item` to the list `groups[key]`, made on first use, when `key` is also
-- appended to `order` (so the groups are met in the order they were first made).
function group(groups, order, key, item)
  local list = groups[key]
  if list == nil then
    list = {}
    groups[key] = list
    order[#order + 1] = key
  end
  list[#list + 1] = item
end

-- The `due` member of the bucket a job with a level digit as loc is in (I2).
function bucket_of(j)
  local w = W0 * SPAN ^ tonumber(j.loc)
  return M_BUCKET .. j.loc .. ':' .. int(math.floor(j.due / w) * w)
end

-- Where job `j` (id `id`, loc neither 'x' nor 'd') is, found by reads only: 'bucket'
-- (its key checked), 'staged', 'flight' or 'ready' (loc 's', neither staged nor in
-- flight). A job whose bucket does not hold it is taken as in its bucket: unplace then
-- has nothing to remove, and the job is placed anew or removed as the caller says.
function whereis(id, j)
  if j.loc ~= 's' then
    expect(bucket_key(bucket_of(j)), 'set')
    return 'bucket'
  end
  if read('zset', 'ZSCORE', DUE, M_STAGED .. id) then
    return 'staged'
  end
  if read('zset', 'ZSCORE', FLIGHT, id) then
    return 'flight'
  end
  return 'ready'
end

-- Takes job `j` out of `place` (whereis's answer; a ready job stays in the list, the
-- caller counts it in skip); a bucket left empty leaves `due` (I2). Writes: the caller
-- has checked every key first.
function unplace(id, j, place)
  if place == 'staged' then
    redis.call('ZREM', DUE, M_STAGED .. id)
  elseif place == 'flight' then
    redis.call('ZREM', FLIGHT, id)
  elseif place == 'bucket' then
    local member = bucket_of(j)
    local key = bucket_key(member)
    redis.call('SREM', key, id)
    if redis.call('EXISTS', key) == 0 then
      redis.call('ZREM', DUE, member)
    end
  end
end

-- Changes collected by a script and applied with one command per kind.
function batch()
  return { sets = {}, order = {}, staged = {}, ready = {}, writes = {}, wake = nil }
end

function wake_at(b, t)
  if b.wake == nil or t < b.wake then
    b.wake = t
  end
end

-- Puts job `j` (id `id`) where its due time says, relative to `now` and horizon `h`,
-- and queues its record for writing. Returns nothing; `flush` applies it.
function insert(b, id, j, now, h)
  if j.due <= now then
    j.loc = 's'
    b.ready[#b.ready + 1] = id
  elseif j.due < h then
    j.loc = 's'
    b.staged[#b.staged + 1] = j.due
    b.staged[#b.staged + 1] = M_STAGED .. id
    wake_at(b, j.due)
  else
    local k, start = place(j.due, h)
    j.loc = int(k)
    local member = M_BUCKET .. int(k) .. ':' .. int(start)
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
-- only those: a bad key that a call does not touch does not stop it). `jobs` and `meta`
-- are not checked: a record is only written after the script read it, and meta is read
-- by every script first (`meta`), which names either if it is of the wrong type.
function check_batch(b)
  if #b.order > 0 or #b.staged > 0 then
    expect(DUE, 'zset')
  end
  if #b.ready > 0 then
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
function flush(b, now, m, checked)
  if not checked then
    check_batch(b)
  end
  for _, pair in ipairs(b.order) do
    local member, score = pair[1], pair[2]
    call_all('SADD', bucket_key(member), b.sets[member])
    if redis.call('ZADD', DUE, 'NX', score, member) == 1 then
      wake_at(b, score)
    end
  end
  call_all('ZADD', DUE, b.staged)
  call_all('RPUSH', READY, b.ready)
  call_all('HSET', JOBS, b.writes)
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
-- A schedule record as a table, or nil if `rec` is not one.
function recur_spec(rec)
  local kind, policy, max, period, spec, pos =
    string.match(rec, '^([ec])|([bds])|(%d+)|(%d+)|([^|]*)|()')
  if kind == nil then
    return nil
  end
  return { kind = kind, policy = policy, max = tonumber(max), period = tonumber(period),
           spec = spec, payload = string.sub(rec, pos) }
end

-- `last:t1,t2,...` as last and a list, or nil if it is not that.
function recur_times(s)
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

function recur_value(last, ts, from)
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
function recur_take(rs, now, h, b, lags, budget)
  local plan = { next = {}, rescore = {}, drop = {}, low = {}, more = false }
  if #rs == 0 then
    return plan, budget
  end
  -- Checked by name first (HMGET would fail too, but with a bare WRONGTYPE).
  expect(RECUR, 'hash')
  expect(RNEXT, 'hash')
  local recs = read_all('hash', 'HMGET', RECUR, rs)
  local nexts = read_all('hash', 'HMGET', RNEXT, rs)
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
      plan.drop[#plan.drop + 1] = M_RECUR .. id
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
        plan.rescore[#plan.rescore + 1] = M_RECUR .. id
        if ts[k + 1] <= now then
          plan.more = true
        end
      else
        if #run > 0 then
          plan.next[#plan.next + 1] = id
          plan.next[#plan.next + 1] = recur_value(last, ts, k + 1)
        end
        plan.drop[#plan.drop + 1] = M_RECUR .. id
      end
    end
  end
  if #jobs > 0 then
    local ids = {}
    for x = 1, #jobs do
      ids[x] = jobs[x][1]
    end
    local old = read_all('hash', 'HMGET', JOBS, ids)
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
function recur_check(plan)
  if #plan.low > 0 then
    expect(RLOW, 'set')
  end
end

function recur_write(plan)
  call_all('HSET', RNEXT, plan.next)
  call_all('ZADD', DUE, plan.rescore)
  call_all('ZREM', DUE, plan.drop)
  call_all('SADD', RLOW, plan.low)
end
