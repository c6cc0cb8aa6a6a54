-- cold_repair.lua: the repair pass's share of the cold tier (cold_view.rs): index
-- entries that name no segment, or an id the wheel holds a live job of (C1), and
-- `cseg` and `cwin` out of step.
--
-- KEYS     meta, jobs, cseg, cwin (contract.rs, script_keys::COLD_REPAIR); index keys
--          are built from meta's prefix
-- ARGV     token ('-' for an operator's pass), then id, seg pairs found in the index (a
--          page); with no pairs, `cseg` and `cwin` are compared instead
-- Returns  { 0 } if `token` is given and is not the current leadership's (or its lease
--          ended); else { 1, placed, removed }: segments given back their `cwin` member;
--          index entries and `cwin` members removed.
--
-- Each entry is judged on the state at this call (the index could have moved since the
-- page was read): it is removed only if it still names `seg` and `seg` is not in `cseg`
-- (its segment was lost or retired with it: the job cannot be loaded, and its id would
-- stay taken for ever) or the wheel holds a live job of that id (the wheel's is kept).
-- Entries naming a segment that is known are the leader's to load: a window left half
-- loaded is finished by the next load pass (cold_load.lua skips what it loaded).
local now, token, expires, cold = meta('token', 'expires', 'cold')
if ARGV[1] ~= '-' and (token ~= ARGV[1] or (tonumber(expires) or 0) <= now) then
  return { 0 }
end
if #ARGV % 2 ~= 1 then
  error({ err = 'ERR bad arguments: ' .. #ARGV .. ' (id, seg pairs after one)' })
end
expect(CSEG, 'hash')
expect(CWIN, 'zset')
local placed, removed = 0, 0
if #ARGV == 1 then
  local segs = read('hash', 'HGETALL', CSEG)
  local known = {}
  for i = 1, #segs, 2 do
    known[segs[i]] = true
    if not redis.call('ZSCORE', CWIN, segs[i]) then
      local window = tonumber(string.match(segs[i + 1], '^(%d+)|'))
      if window then
        redis.call('ZADD', CWIN, window, segs[i])
        placed = placed + 1
      end
    end
  end
  local members = redis.call('ZRANGE', CWIN, 0, -1)
  for _, seg in ipairs(members) do
    if not known[seg] then
      redis.call('ZREM', CWIN, seg)
      removed = removed + 1
    end
  end
  return { 1, placed, removed }
end
cold_size(cold)
local ids, segs, keys = {}, {}, {}
for i = 2, #ARGV, 2 do
  local key = cold_key(ARGV[i])
  if read('hash', 'HGET', key, ARGV[i]) == ARGV[i + 1] then
    ids[#ids + 1], segs[#segs + 1], keys[#keys + 1] = ARGV[i], ARGV[i + 1], key
  end
end
local held = read_all('hash', 'HMGET', JOBS, ids)
local drop = {}
for x = 1, #ids do
  local old = readable(held[x])
  local live = held[x] and (old == nil or old.loc ~= 'x')
  local known = redis.call('HEXISTS', CSEG, segs[x]) == 1
  if live or not known then
    drop[#drop + 1] = x
  end
end
for _, x in ipairs(drop) do
  redis.call('HDEL', keys[x], ids[x])
  cold_left(segs[x], -1)
  removed = removed + 1
end
return { 1, placed, removed }
