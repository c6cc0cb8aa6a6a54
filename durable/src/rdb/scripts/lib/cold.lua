-- lib/cold.lua: the cold tier (src/cold.rs): jobs due far ahead, moved by the fenced
-- leader out of the wheel into segments in a store (a local directory, S3), and loaded
-- back into the wheel before their window starts. Redis keeps, per cold job, one entry
-- of the index:
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
