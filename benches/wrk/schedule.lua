-- POST /v1/queues/<queue>/jobs, a new id on every request (a repeated id is the
-- cheaper `exists` path). Env: TOKEN, QUEUE, PREFIX (new each run), BYTES (payload),
-- DELAY_MS. Used by benches/src/bin/api_vs_lib.rs.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n, prefix, tail = 0, nil, nil
function init(args)
  prefix = os.getenv("PREFIX") .. ":" .. tid .. ":"
  tail = '","payload":"' .. string.rep("x", tonumber(os.getenv("BYTES")))
    .. '","delay_ms":' .. os.getenv("DELAY_MS") .. "}"
  wrk.method = "POST"
  wrk.path = "/v1/queues/" .. os.getenv("QUEUE") .. "/jobs"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  n = n + 1
  return wrk.format(nil, nil, nil, '{"id":"' .. prefix .. n .. tail)
end
