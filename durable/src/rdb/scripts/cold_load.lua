-- cold_load.lua: the leader's load of a cold segment back into the wheel (cold.rs), some
-- of its jobs per call, before their window starts.
--
-- KEYS     meta, jobs, due, ready, cseg, errors (contract.rs, script_keys::COLD_LOAD);
--          bucket and index keys are built from meta's prefix
-- ARGV     token, seg, then id, record pairs read from segment `seg`
-- Returns  { 0 } if `token` is not the current leadership's or its lease has ended; else
--          { now, loaded, dropped }: loaded counts the jobs put back into the wheel,
--          where their due time says (I2, I3: one already due goes to `ready`, late,
--          never early: I6); dropped the index entries that named `seg` for an id the
--          wheel holds a live job of (C1 broken by hand: the wheel's job is kept).
--
-- Only an id whose index entry names `seg` is loaded (C2): one cancelled, rescheduled
-- or loaded already is skipped, so a load repeated after a crash adds nothing twice.
local now, token, expires, armed, cold = meta('token', 'expires', 'armed', 'cold')
if token ~= ARGV[1] or (tonumber(expires) or 0) <= now then
  return { 0 }
end
local seg = ARGV[2]
if #ARGV % 2 ~= 0 then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ' (id, record pairs after two)' })
end
-- The index first shrinks to the size its entries will need (lib/cold.lua).
cold_size(cold)
cold_resize(cold, cold_jobs() - (#ARGV - 2) / 2)
-- First every read and check, then every write.
local mine, keys, recs = {}, {}, {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local key = cold_key(id)
  if read('hash', 'HGET', key, id) == seg then
    mine[#mine + 1] = id
    keys[#keys + 1] = key
    recs[#recs + 1] = ARGV[i + 1]
  end
end
if #mine == 0 then
  return { now, 0, 0 }
end
local held = read_all('hash', 'HMGET', JOBS, mine)
local b = batch(now)
local loaded, dropped = 0, 0
for x = 1, #mine do
  local id = mine[x]
  local old = readable(held[x])
  if held[x] and (old == nil or old.loc ~= 'x') then
    dropped = dropped + 1
  else
    -- The segment's record as it is, its loc replaced (insert_bucketed), unless a
    -- tombstone's skip is to be kept or the record is not a bucketed one.
    if old or not insert_bucketed(b, id, recs[x]) then
      local j = readable(recs[x], id)
      -- A tombstone's stale `ready` entries are counted on (I5), as schedule.lua does.
      j.skip = old and old.skip or 0
      insert(b, id, j)
    end
    loaded = loaded + 1
  end
end
check_batch(b)
expect(CSEG, 'hash')
for x = 1, #mine do
  redis.call('HDEL', keys[x], mine[x])
end
cold_left(seg, -#mine)
flush(b, armed, true)
count('n_cold_in', loaded)
return { now, loaded, dropped }
