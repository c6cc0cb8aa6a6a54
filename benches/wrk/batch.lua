-- POST /v1/queues/<queue>/jobs/batch, BATCH new ids per request. Env: TOKEN, QUEUE,
-- PREFIX (new each run), BYTES, DELAY_MS, BATCH. Used by benches/src/bin/api_vs_lib.rs.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n, prefix, tail, batch = 0, nil, nil, nil
function init(args)
  prefix = os.getenv("PREFIX") .. ":" .. tid .. ":"
  tail = '","payload":"' .. string.rep("x", tonumber(os.getenv("BYTES")))
    .. '","delay_ms":' .. os.getenv("DELAY_MS") .. "}"
  batch = tonumber(os.getenv("BATCH"))
  wrk.method = "POST"
  wrk.path = "/v1/queues/" .. os.getenv("QUEUE") .. "/jobs/batch"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  local jobs = {}
  for i = 1, batch do
    n = n + 1
    jobs[i] = '{"id":"' .. prefix .. n .. tail
  end
  return wrk.format(nil, nil, nil, '{"jobs":[' .. table.concat(jobs, ",") .. "]}")
end
