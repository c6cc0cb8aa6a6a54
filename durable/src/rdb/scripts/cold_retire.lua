-- cold_retire.lua: the end of a segment's load (cold.rs): the segment leaves `cseg` and
-- `cwin`; the leader then deletes its object from the store.
--
-- KEYS     meta, cseg, cwin (contract.rs, script_keys::COLD_RETIRE)
-- ARGV     token, seg
-- Returns  { 0 } if `token` is not the current leadership's or its lease has ended; else
--          { 1, left }: the index entries that still named `seg` (0 after a whole load;
--          more means entries naming ids the segment does not hold: the repair pass
--          removes them), or -1 if `seg` was retired already.
local now, token, expires = meta('token', 'expires')
if token ~= ARGV[1] or (tonumber(expires) or 0) <= now then
  return { 0 }
end
local seg = ARGV[2]
local rec = read('hash', 'HGET', CSEG, seg)
expect(CWIN, 'zset')
redis.call('ZREM', CWIN, seg)
if not rec then
  return { 1, -1 }
end
redis.call('HDEL', CSEG, seg)
return { 1, tonumber(string.match(rec, '^%d+|(-?%d+)|')) or 0 }
