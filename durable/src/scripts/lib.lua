-- lib.lua: shared by every script of `tickless-durable`. The Rust side (scripts.rs)
-- puts each script's text first, as the body of a function `main`, behind a one-line
-- header, then this file, then `return main()`: so each script is one atomic EVAL, and
-- Redis's line numbers are the script file's (a line of this file is named
-- `lib.lua:<line>` in the error the Rust side shows). Every `function name(...)` of this
-- file assigns a local the header declared, and ends at the first `end` at column 0;
-- state of this file alone is `local` here.
--
-- Cost: Redis runs the whole text on every call, and each function here is a new
-- closure (with an upvalue object per local it captures) on every call. So a script
-- gets only the functions it names and those they name (scripts.rs; the others' lines
-- are left empty), and a helper with one caller is better folded into it. A call's
-- cost is mostly Lua's, not its commands' (BENCHMARKS.md, "What one script call
-- costs"): every table, string, function call and command reply counts.
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
-- Invariants kept by every script that moves a job (see src/lib.rs for the whole
-- design):
--   I1. A job is a field of `jobs` whose value is `due|loc|attempts|max|skip|payload`;
--       a job in flight has its delivery number after loc 's' (`s<n>`): the value meta's
--       `delivery` had when a claim handed it out (claim.lua). Acks, failure reports and
--       extensions match on it. A record of an older format has `s` alone in flight: no
--       delivery matches it, and it is delivered again when its lease ends.
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

-- The slow path of the check scripts.rs puts on the last line, before `main` runs:
-- `redis.acl_check_cmd` for every command the script and the lib functions it has can
-- send, from their text (PUBLISH on the queue's channel), one `and` after the other;
-- when one is refused, this is called with them all and raises NOPERM naming the first
-- refused and its grant, before anything is written. Redis refuses a command only when a
-- script reaches it and keeps the writes before it, so without the check a missing grant
-- would leave half a change (a bucket without its job, a `due` member without its
-- bucket). The cost is in script_acl.rs.
function acl_refused(...)
  local acl, cmds = redis.acl_check_cmd, { ... }
  for i = 1, #cmds do
    local c = cmds[i]
    local why
    if c == 'PUBLISH' and not acl(c, CHANNEL, '') then
      why = 'publish on ' .. CHANNEL
      if acl(c) then
        why = why .. ' (grant channel &' .. CHANNEL .. ' or &tickless:*)'
      else
        why = why .. ' (grant +publish)'
      end
    elseif c ~= 'PUBLISH' and not acl(c) then
      why = 'run ' .. c .. ' (grant +' .. string.lower(c) .. ')'
    end
    if why then
      error({ err = 'NOPERM this user may not ' .. why
        .. '; checked before the script wrote anything: nothing was changed' })
    end
  end
end

function garbage(key, what)
  error({ err = 'GARBAGE in ' .. key .. ': ' .. what })
end

-- The keys this call has found to hold the right type (or nothing), by name.
local TYPED = {}

-- Runs the command `cmd` on `key`, which should hold a `want`: its answer; or, if Redis
-- refuses it, GARBAGE naming the key if it holds another type (where Redis would say
-- WRONGTYPE without naming it), else Redis's error (a permission error, say). The key
-- then counts as checked (see `expect`). A script reads or checks every
-- key it will write before its first write, so that it either changes nothing or
-- finishes (Redis does not undo a script's writes when a later command of it fails).
-- A script's first write can go through `read` too, instead of a check and then the
-- write: if `key` holds another type, the error names it and nothing was written.
function read(want, cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    local found = redis.call('TYPE', key)['ok']
    if found ~= 'none' and found ~= want then
      garbage(key, 'expected a ' .. want .. ', found a ' .. found)
    end
    error(r)
  end
  TYPED[key] = true
  return r
end

-- Raises GARBAGE for `key` if it holds a type other than `want` (a missing key is
-- fine), by the cheapest read of that type (an integer answer; `TYPE` answers a status,
-- which costs Redis more to hand to Lua). A key checked or read already in this call is
-- not asked again.
function expect(key, want)
  if TYPED[key] then
    return
  end
  if want == 'zset' then
    read('zset', 'ZCARD', key)
  elseif want == 'hash' then
    read('hash', 'HLEN', key)
  elseif want == 'set' then
    read('set', 'SCARD', key)
  else
    read('list', 'LLEN', key)
  end
end

-- ARGV[i] as an integer at least `min` (0 if nil) and at most `max` (if given), or an
-- error naming the argument (the Rust side never sends one that is not: this guards the
-- scripts against other callers).
function arg_int(i, what, min, max)
  local n = tonumber(ARGV[i])
  if n == nil or n % 1 ~= 0 or n < (min or 0) or (max and n > max) then
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
-- then fails at the unpack limit. `from`: the values from this index on (default 1).
function call_all(cmd, key, list, opt, from)
  local n = #list
  if n <= CHUNK and not from then
    -- One command (the common case); none for an empty list.
    if n == 0 then
      return 0
    elseif opt then
      return redis.call(cmd, key, opt, unpack(list))
    end
    return redis.call(cmd, key, unpack(list))
  end
  n = 0
  for i = from or 1, #list, CHUNK do
    local last = math.min(i + CHUNK - 1, #list)
    if opt then
      n = n + redis.call(cmd, key, opt, unpack(list, i, last))
    else
      n = n + redis.call(cmd, key, unpack(list, i, last))
    end
  end
  return n
end

-- call_all (without `opt`) for a non-empty `list` whose first command is the script's
-- first write, sent through `read`: the key needs no check before it (a wrong type is
-- named, and nothing was written).
function first_all(want, cmd, key, list)
  local n = #list
  if n <= CHUNK then
    return read(want, cmd, key, unpack(list))
  end
  return read(want, cmd, key, unpack(list, 1, CHUNK)) + call_all(cmd, key, list, nil, CHUNK + 1)
end

-- `read(want, cmd, key, v...)` for the values of `list`, in chunks as call_all: the
-- answers, one per value, in order (HMGET, ZMSCORE, SMISMEMBER). An empty list sends
-- nothing and answers an empty table.
function read_all(want, cmd, key, list)
  local n = #list
  if n == 0 then
    return {}
  elseif n <= CHUNK then
    return read(want, cmd, key, unpack(list))
  end
  local out = {}
  for i = 1, n, CHUNK do
    local r = read(want, cmd, key, unpack(list, i, math.min(i + CHUNK - 1, n)))
    for x = 1, #r do
      out[#out + 1] = r[x]
    end
  end
  return out
end

-- The clock's last reading (`meta`), as whole seconds and microseconds within the
-- second: what a relative due time is counted from (see `arg_when`).
local CLOCK_S, CLOCK_US = 0, 0

-- ARGV[i] when it is a time argument: 'a<ms>' (at that time) or 'r<us>' (that long
-- after the clock's last reading, `meta`'s), as the due time in ms. A relative time is
-- due never before that instant, to the microsecond, rounded up to the ms (counted from
-- "now" in whole ms, it could be due up to 0.999 ms early); exact in doubles below 2^50
-- us (35 years), and past that a millisecond later than the rounded sum, which is never
-- early either.
function arg_when(i)
  local kind, t = string.match(ARGV[i] or '', '^([ar])(%d+)$')
  if kind == nil then
    error({ err = 'ERR bad argument ' .. i .. ' (when): ' .. string.format('%q', tostring(ARGV[i])) })
  end
  t = tonumber(t)
  if kind == 'a' then
    return t
  elseif t <= 0 then
    -- Due at the reading itself: due now, by the clock's own (rounded down) "now".
    return CLOCK_S * 1000 + (CLOCK_US - CLOCK_US % 1000) / 1000
  elseif t < 2 ^ 50 then
    return CLOCK_S * 1000 + math.ceil((CLOCK_US + t) / 1000)
  end
  return CLOCK_S * 1000 + math.ceil(t / 1000) + 1
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

-- "Now" in ms on this queue's clock, rounded down ("now" never runs ahead): meta's
-- `clock` (a manual clock, which only tests set) or Redis TIME; then meta's fields
-- named (at most four), as stored (strings, or false when missing). One HMGET.
function meta(...)
  local v = read('hash', 'HMGET', META, 'clock', ...)
  local manual = v[1] and tonumber(v[1])
  if v[1] and not manual then
    garbage(META, 'field clock is ' .. string.format('%q', v[1]) .. ', not a number')
  elseif manual then
    CLOCK_S, CLOCK_US = math.floor(manual / 1000), (manual % 1000) * 1000
    return manual, v[2], v[3], v[4], v[5]
  end
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  CLOCK_S, CLOCK_US = s, us
  return s * 1000 + (us - us % 1000) / 1000, v[2], v[3], v[4], v[5]
end

-- A job record (I1) as a table, or nil if `rec` is not one; for calls a user makes
-- (`id` given), an unreadable record is an error naming it. An absent record (HMGET's and
-- HGET's `false`) is nil too: `x and readable(x)` would give `false`, which `== nil` misses.
function readable(rec, id)
  if not rec then
    return nil
  end
  local due, loc, del, att, max, skip, pos =
    string.match(rec, '^(%d+)|([%dsdx])(%d*)|(%d+)|(%d+)|(%d+)|()')
  if due == nil or (del ~= '' and loc ~= 's') then
    if id then
      garbage(JOBS, unreadable(id))
    end
    return nil
  end
  return { due = tonumber(due), loc = loc, del = tonumber(del), att = tonumber(att),
           max = tonumber(max), skip = tonumber(skip), payload = string.sub(rec, pos) }
end

function unreadable(id)
  return 'field ' .. string.format('%q', id) .. ' is not a job record'
end

-- Adds `by` to meta's counter `field` (`n_<name>`: what /metrics reports, cluster-wide):
-- one HINCRBY, only when there is something to count.
function count(field, by)
  if by > 0 then
    -- A number argument costs Redis a printf; the common 1 is sent as text.
    local text = by == 1 and '1' or string.format('%d', by)
    local r = redis.pcall('HINCRBY', META, field, text)
    if type(r) == 'table' and r.err then
      if not string.find(r.err, 'not an integer', 1, true) then
        -- Not the value's fault (acl_check has checked the grant): Redis's own error.
        error(r)
      end
      -- A counter that is not an integer starts again, rather than fail a script that
      -- has written already (meta's type was checked when the script read it).
      redis.call('HSET', META, field, text)
    end
  end
end

-- For the leader and workers, which must go on: a job whose record cannot be read is
-- put in `dead` (its record left as found), with an error naming it, and skipped. The
-- caller has checked `dead` and `errors` (quarantine_check).
function quarantine(id, now)
  count('n_quarantined', 1)
  redis.call('ZADD', DEAD, now, id)
  redis.call('HSET', ERRORS, id, 'garbage in ' .. JOBS .. ': ' .. unreadable(id))
end

function quarantine_check()
  expect(DEAD, 'zset')
  expect(ERRORS, 'hash')
end

-- A job as its record (I1): the delivery number `del` is written only with loc 's'.
function record(j)
  local loc = j.loc
  if j.del and loc == 's' then
    loc = 's' .. string.format('%d', j.del)
  end
  return string.format('%d|%s|%d|%d|%d|', j.due, loc, j.att, j.max, j.skip) .. j.payload
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
  return M_BUCKET .. j.loc .. ':' .. int(j.due - j.due % w)
end

-- Where job `j` (id `id`, loc neither 'x' nor 'd') is, found by reads only: 'bucket'
-- (its key checked, unless `unchecked`: the caller's first write is to that bucket, and
-- goes through `read`), 'staged', 'flight' or 'ready' (loc 's', neither staged nor in
-- flight). A job whose bucket does not hold it is taken as in its bucket: unplace then
-- has nothing to remove, and the job is placed anew or removed as the caller says.
function whereis(id, j, unchecked)
  if j.loc ~= 's' then
    if not unchecked then
      expect(bucket_key(bucket_of(j)), 'set')
    end
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
-- has checked every key first, but a bucket that is its first write (through `read`).
function unplace(id, j, place)
  if place == 'staged' then
    redis.call('ZREM', DUE, M_STAGED .. id)
  elseif place == 'flight' then
    redis.call('ZREM', FLIGHT, id)
  elseif place == 'bucket' then
    local member = bucket_of(j)
    local key = bucket_key(member)
    read('set', 'SREM', key, id)
    if redis.call('EXISTS', key) == 0 then
      redis.call('ZREM', DUE, member)
    end
  end
end

-- Changes collected by a script at time `now` and applied with one command per kind:
-- `writes` (id, record pairs for `jobs`), and, made when first needed, `ready` (ids),
-- `staged` (score, member pairs for `due`), `order` (the bucket members in the order
-- first met) with `sets` (each member's ids). `h` is the horizon: the end of the level-0
-- slot holding now + LEAD; a job due before it is staged, one due later goes to the
-- coarsest bucket that starts at or after it (I2). (The fields made later are named in
-- the constructor so that adding them does not grow the table.)
function batch(now)
  local h = now + LEAD
  return { now = now, h = h - h % W0 + W0, writes = {}, ready = nil, staged = nil,
           order = nil, sets = nil, wake = nil, known = nil }
end

function wake_at(b, t)
  if b.wake == nil or t < b.wake then
    b.wake = t
  end
end

-- Puts job `j` (id `id`) where its due time says, relative to the batch's time and
-- horizon, and queues its record for writing. Returns nothing; `flush` applies it.
function insert(b, id, j)
  local due, h = j.due, b.h
  -- Not in flight any more: no delivery holds it.
  j.del = nil
  if due <= b.now then
    j.loc = 's'
    local ready = b.ready
    if ready then
      ready[#ready + 1] = id
    else
      b.ready = { id }
    end
  elseif due < h then
    j.loc = 's'
    local staged = b.staged
    if staged then
      local n = #staged
      staged[n + 1] = due
      staged[n + 2] = M_STAGED .. id
    else
      b.staged = { due, M_STAGED .. id }
    end
    if b.wake == nil or due < b.wake then
      b.wake = due
    end
  else
    -- The coarsest level whose bucket for `due` starts at or after `h` (I2).
    local k, w, start = 0, W0, due - due % W0
    while k < KMAX do
      local w2 = w * SPAN
      local s2 = due - due % w2
      if s2 < h then
        break
      end
      k, w, start = k + 1, w2, s2
    end
    -- One digit: KMAX < 10.
    j.loc = string.sub('0123456789', k + 1, k + 1)
    local member = M_BUCKET .. j.loc .. ':' .. string.format('%d', start)
    local sets = b.sets
    if sets == nil then
      b.sets, b.order = { [member] = { id } }, { member }
    elseif sets[member] == nil then
      sets[member] = { id }
      b.order[#b.order + 1] = member
    else
      local ids = sets[member]
      ids[#ids + 1] = id
    end
  end
  local writes = b.writes
  local n = #writes
  writes[n + 1] = id
  writes[n + 2] = record(j)
end

-- Checks, before anything is written, every key `flush` will write for batch `b` (and
-- only those: a bad key that a call does not touch does not stop it), but the first
-- bucket when `lazy`: flush writes it first, through `read`. `jobs` and `meta` are
-- not checked: a record is only written after the script read it, and meta is read by
-- every script first (`meta`), which names either if it is of the wrong type. When
-- `lazy`, `due` is checked by reading the buckets' members (ZMSCORE: which are there
-- already), so that flush adds only the new ones; otherwise (a caller that writes
-- between this check and flush) by `expect`, and flush adds every member with NX.
function check_batch(b, lazy)
  local order = b.order
  if order and lazy then
    b.known = read_all('zset', 'ZMSCORE', DUE, order)
  elseif order or b.staged then
    expect(DUE, 'zset')
  end
  if b.ready and #b.ready > 0 then
    expect(READY, 'list')
  end
  for i = lazy and 2 or 1, order and #order or 0 do
    expect(bucket_key(order[i]), 'set')
  end
end

-- Applies a batch, first checking it (check_batch) unless the caller did (`checked`,
-- before writes of its own). `armed` is meta's `armed`, the earliest time the leader is
-- known to wake for (nil: no leader to tell): an earlier new wake is published on the
-- queue's channel, and shortens the leader's lease (meta's `expires`) to max(wake, now
-- + busy lease) so that a dead leader is replaced in time. (Those two fields are read
-- only then: meta's type was checked when the caller read `armed`.)
function flush(b, armed, checked)
  if not checked then
    check_batch(b, true)
  end
  local known, wake, order = not checked and b.known, b.wake, b.order
  for i = 1, order and #order or 0 do
    local member = order[i]
    local key, ids = bucket_key(member), b.sets[member]
    if i == 1 and not checked then
      first_all('set', 'SADD', key, ids)
    else
      call_all('SADD', key, ids)
    end
    if not (known and known[i]) then
      local score = tonumber(string.match(member, ':(%d+)$')) - LEAD
      if redis.call('ZADD', DUE, 'NX', score, member) == 1 and (wake == nil or score < wake) then
        wake = score
      end
    end
  end
  if b.staged then
    call_all('ZADD', DUE, b.staged)
  end
  if b.ready then
    call_all('RPUSH', READY, b.ready)
  end
  call_all('HSET', JOBS, b.writes)
  armed = wake ~= nil and tonumber(armed)
  if armed and armed > 0 and wake < armed then
    local m = redis.call('HMGET', META, 'expires', 'busy')
    local e = tonumber(m[1]) or 0
    local short = math.max(wake, b.now + (tonumber(m[2]) or BUSY))
    if e > short then
      e = short
    end
    local at, ends = string.format('%d', wake), string.format('%d', e)
    redis.call('HSET', META, 'armed', at, 'expires', ends)
    redis.call('PUBLISH', CHANNEL, at .. ' ' .. ends)
  end
end

-- Recurring schedules (src/lib.rs, "Recurring jobs"). Three keys of their own:
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
function recur_take(rs, now, b, lags, budget)
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
      local o = readable(old[x])
      -- R1: a job of this name exists only if a user made one: it is left alone.
      if old[x] == false or (o and o.loc == 'x') then
        lags[#lags + 1] = now - t
        insert(b, jid, { due = t, loc = 's', att = 0, max = s.max, skip = o and o.skip or 0,
                         payload = s.payload })
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

-- The cold tier (src/cold.rs): jobs due far ahead, moved by the fenced leader out of
-- the wheel into segments in a store (a local directory, S3), and loaded back into the
-- wheel before their window starts. Redis keeps, per cold job, one entry of the index:
--   `ci:<hhhh>` hash: id -> its segment's number; <hhhh> the first four hex digits of
--            SHA-1(id), so 65,536 small hashes that stay in Redis's compact listpack
--            encoding up to about 8 million cold jobs (cold_key).
--   `cseg`   hash: segment number -> `window|left|bytes`: the start (ms) of the window
--            its jobs are due in, how many index entries still name it, its size.
--   `cwin`   sorted set: segment numbers, scored by their window's start.
-- meta's `cold` is set by the first move, and makes schedule, cancel and reschedule look
-- in the index for an id the wheel does not hold (a queue that never had a cold tier
-- pays nothing). meta's `cseq` numbers segments.
-- C1. An id is in the wheel (`jobs`) or in the index, never both: a move and a load each
--     take it out of one and put it into the other in one script.
-- C2. A cold job's record is the one its segment holds; it is loaded only while the
--     index names that segment (cancel and reschedule take the entry out).
function cold_key(id)
  return P .. COLD_INDEX .. string.sub(redis.sha1hex(id), 1, 4)
end

-- Adds `by` (negative: removes) to the count of index entries naming segment `seg`;
-- the caller has checked CSEG.
function cold_left(seg, by)
  local rec = redis.call('HGET', CSEG, seg)
  if rec and by ~= 0 then
    local window, left, bytes = string.match(rec, '^(%d+)|(-?%d+)|(%d+)$')
    if window then
      redis.call('HSET', CSEG, seg, window .. '|' .. int(tonumber(left) + by) .. '|' .. bytes)
    end
  end
end
