-- A pull worker over HTTP: POST claim (up to MAX jobs, no wait), and after each answer
-- that holds jobs, POST ack naming every job's id and delivery number. Env: TOKEN, QUEUE,
-- MAX. Used by benches/src/bin/api_vs_lib.rs.
local claim, ack_path, acks = nil, nil, {}
function init(args)
  local base = "/v1/queues/" .. os.getenv("QUEUE")
  wrk.method = "POST"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
  wrk.headers["Content-Type"] = "application/json"
  claim = wrk.format(nil, base .. "/claim",
    nil, '{"max":' .. os.getenv("MAX") .. ',"wait_ms":0,"lease_ms":60000}')
  ack_path = base .. "/ack"
end

function request()
  local body = table.remove(acks)
  if body then
    return wrk.format(nil, ack_path, nil, body)
  end
  return claim
end

function response(status, headers, body)
  if status ~= 200 then
    return
  end
  local refs = {}
  for id, delivery in body:gmatch('"id":"([^"]*)","delivery":(%d+)') do
    refs[#refs + 1] = '{"id":"' .. id .. '","delivery":' .. delivery .. "}"
  end
  if #refs > 0 then
    acks[#acks + 1] = '{"deliveries":[' .. table.concat(refs, ",") .. "]}"
  end
end
