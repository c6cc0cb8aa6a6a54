-- lib/jobs.lua: job records, and the invariants kept by every script that moves a job
-- (see src/lib.rs for the whole design):
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

-- The due time (a number) and level digit of record `rec` when it is a job in a bucket
-- (I2: loc one level digit, so no delivery number) whose skip is 0, else nil: one match
-- of the record's head, no table and no copy of the payload, for the cold tier's
-- per-job paths (readable's table costs ~3 µs per record, this ~0.7).
function bucketed(rec)
  if not rec then
    return nil
  end
  local due, loc = string.match(rec, '^(%d+)|(%d)|%d+|%d+|0|')
  if due then
    return tonumber(due), loc
  end
  return nil
end

function unreadable(id)
  return 'field ' .. string.format('%q', id) .. ' is not a job record'
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
