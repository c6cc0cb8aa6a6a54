-- claim.lua: a worker acknowledges finished jobs and takes ready ones under a lease.
--
-- KEYS     meta, jobs, due, ready, flight, dead, errors (contract.rs, script_keys::CLAIM)
-- ARGV     lease_ms, max (at most MAX_BATCH), n_acks, then n_acks times: id, delivery
-- Returns  { now, n_acked, then for each claimed job: id, attempt, delivery, due,
--          payload }
--
-- An ack completes a job only if that delivery still holds it: the record's delivery
-- number is the acked one and the job is in `flight` (else its lease ended and it was,
-- or will be, delivered again: at least once; or it was cancelled, and perhaps
-- scheduled and delivered again under the same id). A claim pops up to `max` ids from
-- `ready`, drops the stale ones (no record, a tombstone, or counted in skip: I5), and
-- moves each live one to `flight` with its lease end as score, its attempt count raised
-- and a delivery number of its own (I1): meta's `delivery`, raised by one per job. The lease marker `l`
-- in `due` is lowered to the new lease end if that is earlier (ZADD LT), and published if
-- the leader is armed for later. A popped id whose record cannot be read is put in
-- `dead` with an error naming it (lib/jobs.lua's quarantine), so one bad record stops no
-- worker.
local now, last = meta('delivery')
local lease, max, nacks = arg_int(1, 'lease_ms', 1), arg_int(2, 'max', 0, MAX_BATCH), arg_int(3, 'n_acks', 0)
if #ARGV ~= 3 + 2 * nacks then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ' for ' .. nacks .. ' acks' })
end
local acks, dels = {}, {}
for i = 1, nacks do
  acks[i] = ARGV[3 + 2 * i - 1]
  dels[i] = arg_int(3 + 2 * i, 'delivery', 1)
end
-- The last delivery number handed out; HINCRBY could not raise a value that is not an
-- integer, so it is checked before any write.
last = number(META, 'delivery', last) or 0
if last % 1 ~= 0 or last < 0 then
  garbage(META, 'field delivery is ' .. string.format('%q', tostring(last)) .. ', not a count')
end
-- First every read and check, then every write: the ready ids are read (LRANGE) and
-- only taken off the list (LTRIM) once every key the call writes has passed.
local ids = {}
if max > 0 then
  ids = read('list', 'LRANGE', READY, 0, max - 1)
end
-- One read of the records of both the acked and the popped jobs.
local fields = acks
if #ids > 0 then
  fields = {}
  for i = 1, nacks do
    fields[i] = acks[i]
  end
  for i = 1, #ids do
    fields[nacks + i] = ids[i]
  end
end
local recs = {}
if #fields > 0 then
  recs = read_all('hash', 'HMGET', JOBS, fields)
end
local held = {}
if nacks > 0 then
  held = read_all('zset', 'ZMSCORE', FLIGHT, acks)
end
-- The acks that complete a job: the record's delivery is the acked one, and it is in
-- flight.
local completed = {}
local gone, errs = {}, {}
for i = 1, nacks do
  local j = readable(recs[i])
  if j and held[i] and j.loc == 's' and j.del == dels[i] then
    gone[#gone + 1] = acks[i]
    completed[acks[i]] = true
    if j.att > 1 then
      errs[#errs + 1] = acks[i]
    end
  end
end
-- The claims. An id can come twice in one pop (a stale entry, then a live one): its
-- record is parsed once and changed in place.
local out = { now, #gone }
local writes, flight, tomb, bad = {}, {}, {}, {}
local ends = now + lease
local parsed = {}
for i = 1, #ids do
  local id, rec = ids[i], recs[nacks + i]
  local j = parsed[id]
  if j == nil and rec and not completed[id] then
    j = readable(rec)
    if j == nil then
      bad[#bad + 1] = id
      j = { loc = 'gone' }
    end
    parsed[id] = j
  end
  if j and j.loc ~= 'gone' then
    if j.skip > 0 then
      j.skip = j.skip - 1
      j.dirty = true
      if j.loc == 'x' and j.skip == 0 then
        j.loc = 'gone'
        tomb[#tomb + 1] = id
      end
    elseif j.loc == 's' and not j.claimed then
      j.att = j.att + 1
      last = last + 1
      j.del = last
      j.claimed = true
      j.dirty = true
      flight[#flight + 1] = ends
      flight[#flight + 1] = id
      out[#out + 1] = id
      out[#out + 1] = j.att
      out[#out + 1] = last
      out[#out + 1] = j.due
      out[#out + 1] = j.payload
    end
  end
end
for id, j in pairs(parsed) do
  if j.dirty and j.loc ~= 'gone' then
    writes[#writes + 1] = id
    writes[#writes + 1] = record(j)
  end
end
-- Every key written below is checked first (`ready` and `jobs` by their reads, `flight`
-- by its read when acks came); `due` by the first write itself, sent through `read`.
if #errs > 0 or #bad > 0 then
  expect(ERRORS, 'hash')
end
if #bad > 0 then
  expect(DEAD, 'zset')
end
if #flight > 0 then
  expect(FLIGHT, 'zset')
end
local lowered = #flight > 0 and read('zset', 'ZADD', DUE, 'LT', 'CH', ends, M_LEASE) == 1
if #ids > 0 then
  redis.call('LTRIM', READY, #ids, -1)
end
-- Every write of many values goes through lib/calls.lua's call_all (Lua's unpack limit).
call_all('ZREM', FLIGHT, gone)
call_all('HDEL', JOBS, gone)
count('n_acked', #gone)
call_all('HDEL', ERRORS, errs)
for _, id in ipairs(bad) do
  quarantine(id, now)
end
call_all('HSET', JOBS, writes)
call_all('HDEL', JOBS, tomb)
if #flight > 0 then
  call_all('ZADD', FLIGHT, flight)
  redis.call('HSET', META, 'delivery', int(last))
  count('n_delivered', #flight / 2)
  if lowered then
    -- Read only now (meta's type was checked when the call began).
    local m = redis.call('HMGET', META, 'armed', 'expires')
    local at = tonumber(m[1]) or 0
    if at > 0 and ends < at then
      redis.call('HSET', META, 'armed', int(ends))
      redis.call('PUBLISH', CHANNEL, int(ends) .. ' ' .. (m[2] or '0'))
    end
  end
end
return out
