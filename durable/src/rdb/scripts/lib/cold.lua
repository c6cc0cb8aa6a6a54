-- lib/cold.lua: the cold tier (src/cold.rs): jobs due far ahead, moved by the fenced
-- leader out of the wheel into segments in a store (a local directory, S3), and loaded
-- back into the wheel before their window starts. Redis keeps, per cold job, one entry
-- of the index:
--   `ci:<hhhh>` hash: id -> its segment's number; the index's buckets (small hashes in
--            Redis's compact listpack encoding), as many as meta's `cold` says (cold_key:
--            linear hashing on the first four hex digits of SHA-1(id), one bucket split
--            or merged at a time, so their number follows the number of cold jobs).
--   `cseg`   hash: segment number -> `window|left|bytes`: the start (ms) of the window
--            its jobs are due in, how many index entries still name it, its size.
--   `cwin`   sorted set: segment numbers, scored by their window's start.
-- meta's `cold` is set by the first move, and makes schedule, cancel and reschedule look
-- in the index for an id the wheel does not hold (a queue that never had a cold tier
-- pays nothing): `n<count>`, the index's number of buckets, or `1` (a queue indexed
-- before the index grew: 65,536 buckets, for ever). meta's `cjobs` counts the index's
-- entries (cold_left), which is what its size follows; meta's `cseq` numbers segments.
-- C1. An id is in the wheel (`jobs`) or in the index, never both: a move and a load each
--     take it out of one and put it into the other in one script.
-- C2. A cold job's record is the one its segment holds; it is loaded only while the
--     index names that segment (cancel and reschedule take the entry out).

-- The index's number of buckets (from meta's `cold`, cold_size), and the largest power
-- of two not above it.
local COLD_N, COLD_LOW = nil, nil

-- Mean entries per bucket above which the index grows a bucket, and below which (for a
-- quarter of it) it loses one. A bucket's share of Redis memory (its key, its listpack's
-- header) is ~92 B, an entry's ~17 B (BENCHMARKS.md, "The cold tier"): 24 per bucket
-- costs ~21 B per cold job; a bucket about to split holds ~48, well under listpack's 128.
local COLD_DENSITY = 24

-- Most buckets split or merged per call: a call holds Redis briefly, and one of a few
-- hundred jobs needs ~10 splits to keep up.
local COLD_RESIZE = 32

-- Sets the index's size from meta's `cold` (false: a queue with no cold job yet, whose
-- index starts at one bucket). Every script that calls cold_key calls this first.
function cold_size(cold)
  if cold == '1' then
    COLD_N = 65536
  elseif not cold then
    COLD_N = 1
  else
    COLD_N = tonumber(string.match(cold, '^n(%d+)$'))
    if not COLD_N or COLD_N < 1 or COLD_N > 65536 then
      garbage(META, 'field cold is ' .. string.format('%q', cold) .. ', not an index size')
    end
  end
  COLD_LOW = 1
  while COLD_LOW * 2 <= COLD_N do
    COLD_LOW = COLD_LOW * 2
  end
end

-- The index bucket `x` (0 to 65,535).
function cold_bucket(x)
  return P .. COLD_INDEX .. string.format('%04x', x)
end

-- The number (0 to 65,535) of the first four hex digits of SHA-1(id).
function cold_hash(id)
  return tonumber(string.sub(redis.sha1hex(id), 1, 4), 16)
end

-- The index bucket holding `id`'s entry (linear hashing: the hash modulo twice the
-- largest power of two not above the size, or modulo that power if that bucket is not
-- split yet). At 65,536 buckets it is `ci:` and the first four hex digits, as it always
-- was for a queue whose `cold` is `1`.
function cold_key(id)
  if not COLD_N then
    error({ err = 'ERR cold_key before cold_size' })
  end
  local h = cold_hash(id)
  local x = h % (2 * COLD_LOW)
  if x >= COLD_N then
    x = h % COLD_LOW
  end
  return cold_bucket(x)
end

-- Splits or merges index buckets, at most COLD_RESIZE, until the mean entries per bucket
-- (meta's `cjobs` over the size) is within COLD_DENSITY / 4 and COLD_DENSITY; `cold` is
-- meta's `cold` (cold_size has read it). Each step moves one bucket's entries and
-- writes the new size (meta's `cold`) right after, in the same script: the index is
-- whole at every size, so a leader killed mid-resize (between calls) or a call that
-- fails at a later step leaves no entry lost or found twice. A queue whose `cold` is `1` keeps its
-- 65,536 buckets. Returns the new `cold`.
function cold_resize(cold, jobs)
  if cold == '1' then
    return cold
  end
  for _ = 1, COLD_RESIZE do
    if jobs > COLD_DENSITY * COLD_N and COLD_N < 65536 then
      -- Bucket s holds the ids whose hash is s modulo COLD_LOW; those that are
      -- s + COLD_LOW modulo twice that go to the new bucket COLD_N (= s + COLD_LOW).
      local s = COLD_N - COLD_LOW
      local src, dst = cold_bucket(s), cold_bucket(COLD_N)
      local entries = read('hash', 'HGETALL', src)
      expect(dst, 'hash')
      local moved, ids = {}, {}
      for i = 1, #entries, 2 do
        if cold_hash(entries[i]) % (2 * COLD_LOW) == COLD_N then
          moved[#moved + 1] = entries[i]
          moved[#moved + 1] = entries[i + 1]
          ids[#ids + 1] = entries[i]
        end
      end
      call_all('HSET', dst, moved)
      call_all('HDEL', src, ids)
      cold_size('n' .. (COLD_N + 1))
      redis.call('HSET', META, 'cold', 'n' .. COLD_N)
    elseif jobs * 4 < COLD_DENSITY * COLD_N and COLD_N > 1 then
      -- The last bucket goes back into the one it was split from.
      cold_size('n' .. (COLD_N - 1))
      local src, dst = cold_bucket(COLD_N), cold_bucket(COLD_N - COLD_LOW)
      local entries = read('hash', 'HGETALL', src)
      expect(dst, 'hash')
      local ids = {}
      for i = 1, #entries, 2 do
        ids[#ids + 1] = entries[i]
      end
      call_all('HSET', dst, entries)
      call_all('HDEL', src, ids)
      redis.call('HSET', META, 'cold', 'n' .. COLD_N)
    else
      break
    end
    cold = 'n' .. COLD_N
  end
  return cold
end

-- Adds `by` (negative: removes) to the count of index entries naming segment `seg`, and
-- to meta's `cjobs`; the caller has checked CSEG.
-- meta's `cjobs`: the index's entries.
function cold_jobs()
  return tonumber(redis.call('HGET', META, 'cjobs')) or 0
end

function cold_left(seg, by)
  if by ~= 0 then
    redis.call('HINCRBY', META, 'cjobs', by)
  end
  local rec = redis.call('HGET', CSEG, seg)
  if rec and by ~= 0 then
    local window, left, bytes = string.match(rec, '^(%d+)|(-?%d+)|(%d+)$')
    if window then
      redis.call('HSET', CSEG, seg, window .. '|' .. int(tonumber(left) + by) .. '|' .. bytes)
    end
  end
end
