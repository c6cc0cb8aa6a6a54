-- tick.lua: the leader moves the cursor: everything in `due` whose time has come.
--
-- KEYS     all twelve: meta, jobs, due, ready, flight, dead, errors, recur, rnext, rlow, cseg,
--          cwin (contract.rs, script_keys::ALL); bucket keys are built from meta's prefix
-- ARGV     token, limit (at most this many jobs touched per call; at most MAX_BATCH)
-- Returns  { 0 } if `token` is not the current leadership's or its lease has ended
--          (fencing: a paused leader that lost its lease promotes nothing); else
--          { now, next, flags, lag_1, ..., lag_k }: `next` is the score of the head of
--          `due` after this call (-1 if empty); flags bit 1 is set if due work was left
--          for another call, bit 2 if cron schedules want more occurrences (`rlow`:
--          the leader appends them with recur_fill.lua); lag_i is now - due for each
--          job promoted to `ready`.
--
-- For each due member of `due` (I2, I3):
--   j<id>       a staged job: appended to `ready` (I6: its score is its due time).
--   b<k>:<s>    a bucket, LEAD ms before its start: drained (SRANDMEMBER, then SREM
--               once every check passed) into the staged window (due before the new
--               horizon) or into finer buckets, which start at or after the horizon and
--               so are not due in this call.
--   r<id>       a recurring schedule's next occurrence: lib/recur.lua's recur_take makes
--               its job(s) and moves the schedule on, in this same call (R1).
--   l           the lease marker, scored at or before the earliest lease end: jobs whose
--               lease ended go back to `ready`, or to `dead` after their last attempt.
-- Then meta's `armed` is raised to at least the new head, so that a script adding an
-- earlier wake knows to publish it (lib/batch.lua's flush).
local now, token, expires, armed_at = meta('token', 'expires', 'armed')
local budget = arg_int(2, 'limit', 1, MAX_BATCH)
if token ~= ARGV[1] or (tonumber(expires) or 0) <= now then
  return { 0 }
end
local b = batch(now)
b.ready = {}
local lags = {}
local done = {}
local more = 0
local items = read('zset', 'ZRANGEBYSCORE', DUE, '-inf', now, 'WITHSCORES', 'LIMIT', 0, budget)
if #items == 2 * budget then
  more = 1
end
-- First every read and check, then every write (see lib/reads.lua's `expect`): a key of the
-- wrong type that this call would write stops it before it has moved anything.
local popped = {}   -- bucket key -> the ids taken out of it
local bad = {}      -- ids whose record cannot be read: set aside in `dead`
local ended = {}    -- ids whose lease ended
local notes = {}    -- id, note pairs for `errors`
local dead = {}     -- score, id pairs for `dead`
local flight_head = false
local rs = {}       -- ids of due recurring schedules
for i = 1, #items, 2 do
  local member, score = items[i], tonumber(items[i + 1])
  local kind = string.sub(member, 1, 1)
  if budget <= 0 then
    more = 1
    break
  end
  if kind == M_STAGED then
    b.ready[#b.ready + 1] = string.sub(member, 2)
    lags[#lags + 1] = now - score
    done[#done + 1] = member
    budget = budget - 1
  elseif kind == M_BUCKET then
    -- At most DRAIN jobs of a bucket per call, so that one call holds Redis briefly.
    local take = math.min(budget, DRAIN)
    local key = bucket_key(member)
    expect(key, 'set')
    local ids = redis.call('SRANDMEMBER', key, take)
    if #ids < take then
      done[#done + 1] = member
    else
      more = 1
    end
    if #ids > 0 then
      popped[#popped + 1] = { key, ids }
      budget = budget - #ids
      local recs = read_all('hash', 'HMGET', JOBS, ids)
      for x = 1, #ids do
        local j = readable(recs[x])
        if recs[x] and j == nil then
          bad[#bad + 1] = ids[x]
        elseif j then
          if j.loc ~= 'x' and j.loc ~= 's' and j.loc ~= 'd' then
            if j.due <= now then
              lags[#lags + 1] = now - j.due
            end
            insert(b, ids[x], j)
          end
        end
      end
    end
  elseif kind == M_RECUR then
    rs[#rs + 1] = string.sub(member, 2)
  elseif kind == M_LEASE then
    ended = read('zset', 'ZRANGEBYSCORE', FLIGHT, '-inf', now, 'LIMIT', 0, budget)
    if #ended > 0 then
      budget = budget - #ended
      local recs = read_all('hash', 'HMGET', JOBS, ended)
      for x = 1, #ended do
        local j = readable(recs[x])
        if recs[x] and j == nil then
          bad[#bad + 1] = ended[x]
        elseif j then
          notes[#notes + 1] = ended[x]
          notes[#notes + 1] = 'lease ended during attempt ' .. int(j.att) .. ' of ' .. int(j.max)
          if j.att >= j.max then
            j.loc = 'd'
            dead[#dead + 1] = now
            dead[#dead + 1] = ended[x]
            b.writes[#b.writes + 1] = ended[x]
            b.writes[#b.writes + 1] = record(j)
          else
            b.ready[#b.ready + 1] = ended[x]
          end
        end
      end
    end
    flight_head = true
  else
    -- Not a member this crate writes: it names nothing to move, and would stand at the
    -- head of `due` for ever. It leaves (the repair pass would remove it too).
    done[#done + 1] = member
  end
end
local rplan
rplan, budget = recur_take(rs, now, b, lags, budget)
if rplan.more then
  more = 1
end
recur_check(rplan)
if #bad > 0 or #dead > 0 then
  expect(DEAD, 'zset')
end
if #bad > 0 or #notes > 0 then
  expect(ERRORS, 'hash')
end
check_batch(b)
-- `rlow` is read by the leader when this call flags it (recur.rs's refill): a wrong type
-- stops this call, before it writes, rather than the refill after it.
local low_wanted = #rplan.low > 0 or redis.call('TYPE', RLOW)['ok'] ~= 'none'
if low_wanted then
  expect(RLOW, 'set')
end
-- Every check passed: the writes, those of many values through lib/calls.lua's call_all
-- (Lua's unpack limit).
for _, taken in ipairs(popped) do
  call_all('SREM', taken[1], taken[2])
end
for _, id in ipairs(bad) do
  quarantine(id, now)
end
call_all('ZREM', FLIGHT, ended)
call_all('HSET', ERRORS, notes)
call_all('ZADD', DEAD, dead)
count('n_died', #dead / 2)
if flight_head then
  local head = redis.call('ZRANGE', FLIGHT, 0, 0, 'WITHSCORES')
  if #head > 0 then
    redis.call('ZADD', DUE, head[2], M_LEASE)
  else
    done[#done + 1] = M_LEASE
  end
end
call_all('ZREM', DUE, done)
recur_write(rplan)
-- The leader reads `next` from this call, so nothing added here needs publishing.
flush(b, nil, true)
local head = redis.call('ZRANGE', DUE, 0, 0, 'WITHSCORES')
local nxt = -1
if #head > 0 then
  nxt = tonumber(head[2])
end
local armed = tonumber(armed_at) or 0
if nxt < 0 then
  if armed < 2 ^ 52 then
    redis.call('HSET', META, 'armed', int(2 ^ 52))
  end
elseif armed < nxt then
  redis.call('HSET', META, 'armed', int(nxt + 50))
end
if low_wanted then
  more = more + 2
end
local out = { now, nxt, more }
-- The promotion lag histogram of /metrics: one HINCRBY per non-empty range.
local le, hist, sum = { 1, 5, 10, 50, 100, 500, 1000, 5000 }, {}, 0
for i = 1, #lags do
  out[#out + 1] = lags[i]
  sum = sum + lags[i]
  local r = 'inf'
  for _, bound in ipairs(le) do
    if lags[i] <= bound then
      r = bound
      break
    end
  end
  hist[r] = (hist[r] or 0) + 1
end
for r, n in pairs(hist) do
  count('n_lag_le_' .. r, n)
end
count('n_promoted', #lags)
count('n_lag_sum_ms', sum)
return out
