-- lib/batch.lua: jobs placed by their due time (I2, I3), collected and written with one
-- command per kind.

-- Changes collected by a script at time `now` and applied with one command per kind:
-- `writes` (id, record pairs for `jobs`), and, made when first needed, `ready` (ids; with
-- `out`, the queue's stream outlet when it has one, found by check_batch),
-- `staged` (score, member pairs for `due`), `order` (the bucket members in the order
-- first met) with `sets` (each member's ids). `h` is the horizon: the end of the level-0
-- slot holding now + LEAD; a job due before it is staged, one due later goes to the
-- coarsest bucket that starts at or after it (I2). (The fields made later are named in
-- the constructor so that adding them does not grow the table.)
function batch(now)
  local h = now + LEAD
  return { now = now, h = h - h % W0 + W0, writes = {}, ready = nil, staged = nil,
           order = nil, sets = nil, wake = nil, known = nil, out = nil }
end

function wake_at(b, t)
  if b.wake == nil or t < b.wake then
    b.wake = t
  end
end

-- Puts job `j` (id `id`) where its due time says, relative to the batch's time and
-- horizon, and queues its record for writing. Returns nothing; `flush` applies it.
function insert(b, id, j)
  -- Not in flight any more: no delivery holds it.
  j.del = nil
  j.loc = placed(b, id, j.due)
  local writes = b.writes
  local n = #writes
  writes[n + 1] = id
  writes[n + 2] = record(j)
end

-- `insert` of a job whose record `rec` is one of a job in a bucket with skip 0 (as the
-- cold tier's segments hold them: bucketed), with no delivery and its skip kept 0: only
-- the record's loc is replaced, nothing else of it parsed (readable's table and
-- record's format cost ~4 µs per job). Returns false, having done nothing, for any
-- other record: the caller then reads it whole (readable) and calls `insert`.
function insert_bucketed(b, id, rec)
  local due, after = string.match(rec, '^(%d+)|%d()|%d+|%d+|0|')
  if not due then
    return false
  end
  local loc = placed(b, id, tonumber(due))
  local writes = b.writes
  local n = #writes
  writes[n + 1] = id
  writes[n + 2] = due .. '|' .. loc .. string.sub(rec, after)
  return true
end

-- Puts id `id`, due at `due`, where that time says, relative to the batch's time and
-- horizon (ready, staged, or its bucket: I2, I3), and returns its loc; its record is
-- the caller's to queue (insert).
function placed(b, id, due)
  local h = b.h
  if due <= b.now then
    local ready = b.ready
    if ready then
      ready[#ready + 1] = id
    else
      b.ready = { id }
    end
  elseif due < h then
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
    local loc = string.sub('0123456789', k + 1, k + 1)
    local member = M_BUCKET .. loc .. ':' .. string.format('%d', start)
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
    return loc
  end
  return 's'
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
    b.out = outlet_check()
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
  call_all('HSET', JOBS, b.writes)
  -- After the records: the outlet reads the jobs' records as just written.
  if b.ready then
    if b.out then
      call_all('RPUSH', READY, outlet(b.out, b.ready))
    else
      call_all('RPUSH', READY, b.ready)
    end
  end
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

-- The queue's stream outlet (queue/outlet.rs: meta's OUTLET and OUTLET_MAX fields), or
-- nil when it has none and due jobs go to `ready`. Read and checked before any write
-- (meta's type was checked when the script read it): the stream key's type, the
-- user's grant to XADD to it, and `errors` where the script declares it, for `outlet`'s
-- writes. Returns { key, maxlen, meta's last delivery number } (a script that hands out
-- delivery numbers itself, claim.lua, calls neither this nor `outlet`).
function outlet_check()
  local m = redis.call('HMGET', META, OUTLET, OUTLET_MAX, 'delivery')
  if not m[1] then
    return nil
  end
  local max = tonumber(m[2])
  if max == nil or max < 1 or max % 1 ~= 0 then
    garbage(META, 'field ' .. OUTLET_MAX .. ' is ' .. string.format('%q', tostring(m[2])) ..
      ', not a positive integer')
  end
  local found = redis.call('TYPE', m[1])['ok']
  if found ~= 'none' and found ~= 'stream' then
    garbage(m[1], 'expected a stream, found a ' .. found)
  end
  -- XADD is checked here, not by the script's permission check (script_acl.rs): only a
  -- queue with an outlet needs the grant, for its stream's key.
  if not redis.acl_check_cmd('XADD', m[1], '*', 'id', '') then
    error({ err = 'NOPERM this user may not run XADD on ' .. m[1] .. ', the stream outlet of'
      .. ' the queue (grant +xadd and the key); checked before the script wrote anything:'
      .. ' nothing was changed' })
  end
  if ERRORS then
    expect(ERRORS, 'hash')
  end
  return { m[1], int(max), tonumber(m[3]) or 0 }
end

-- Hands the due jobs `ids` (their records written already) to the stream outlet `out`
-- (outlet_check's): each whose record reads as a job due (loc 's') becomes one entry,
-- `XADD <key> MAXLEN ~ <max> * id <id> delivery <n> attempt <a> due <ms> payload <p>`,
-- with the next delivery number of meta's `delivery` (as a claim gives one) and the
-- attempt it would have been; the job then leaves the queue as if acked (its record and
-- its last error are deleted: the stream owns it now). Returns the ids it did not take
-- (a record it cannot read), for `ready`, where a claim quarantines them as ever.
function outlet(out, ids)
  local recs = read_all('hash', 'HMGET', JOBS, ids)
  local key, max, last = out[1], out[2], out[3]
  local gone, left, seen = {}, {}, {}
  for i = 1, #ids do
    local id = ids[i]
    local j = not seen[id] and readable(recs[i])
    if j and j.loc == 's' then
      seen[id] = true
      last = last + 1
      redis.call('XADD', key, 'MAXLEN', '~', max, '*', 'id', id, 'delivery', int(last),
        'attempt', int(j.att + 1), 'due', int(j.due), 'payload', j.payload)
      gone[#gone + 1] = id
    elseif not seen[id] then
      left[#left + 1] = id
    end
  end
  if #gone > 0 then
    out[3] = last
    redis.call('HSET', META, 'delivery', int(last))
    call_all('HDEL', JOBS, gone)
    if ERRORS then
      call_all('HDEL', ERRORS, gone)
    end
    count('n_streamed', #gone)
  end
  return left
end
