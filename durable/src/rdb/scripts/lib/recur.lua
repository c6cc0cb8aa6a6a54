-- lib/recur.lua: recurring schedules (src/lib.rs, "Recurring jobs"). Three keys of
-- their own:
--   `recur`  hash: id -> `kind|policy|max|period|spec|payload`; kind 'e' (every `period`
--            ms) or 'c' (cron: spec is `<zone> <expression>`, read only by the Rust
--            side); policy 'b' (Burst), 'd' (Delay) or 's' (Skip).
--   `rnext`  hash: id -> `last:t1,t2,...`: `last` is the latest occurrence handed out
--            (or when the schedule was set), then the known occurrences after it, in
--            order. An `every` schedule knows one; a cron schedule what the Rust side
--            computed (Lua cannot read cron expressions).
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
