-- cold_find.lua: where a cold job is (Queue::job, reschedule): its index entry.
--
-- KEYS     meta, cseg (contract.rs, script_keys::COLD_FIND); index keys are built from
--          meta's prefix
-- ARGV     id
-- Returns  { } if the index does not hold `id` (or the queue never had a cold tier);
--          else { seg, window }: its segment's number and the start (ms) of the window
--          it is due in (-1 if `cseg` no longer knows the segment: see repair).
local _, cold = meta('cold')
if not cold then
  return {}
end
cold_size(cold)
local seg = read('hash', 'HGET', cold_key(ARGV[1]), ARGV[1])
if not seg then
  return {}
end
local rec = read('hash', 'HGET', CSEG, seg)
return { seg, rec and tonumber(string.match(rec, '^(%d+)|')) or -1 }
