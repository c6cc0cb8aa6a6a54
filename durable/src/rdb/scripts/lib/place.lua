-- lib/place.lua: where a job is (its bucket, staged, in flight, ready; jobs.lua's I2,
-- I3), and taking it out of there. Bucket keys are the only keys built in Lua: a script
-- cannot know them before it has read `due`.

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
