-- POST /v1/queues/<queue>/jobs, a new id on every request (a repeated id is the
-- cheaper `exists` path). Env: TOKEN, QUEUE, PREFIX (new each run), BYTES (payload),
-- DELAY_MS. Used by benches/src/bin/api_vs_lib.rs.
--
-- The request line and headers are formatted once, in init; each request only joins its
-- body and Content-Length to them. `wrk.format` on every request (a table, a
-- string.format per header) cost wrk ~13 µs of CPU per request, on the same two cores
-- as `serve`: load-generator time that the library side does not pay.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n, head, open, tail = 0, nil, nil, nil
function init(args)
  open = '{"id":"' .. os.getenv("PREFIX") .. ":" .. tid .. ":"
  tail = '","payload":"' .. string.rep("x", tonumber(os.getenv("BYTES")))
    .. '","delay_ms":' .. os.getenv("DELAY_MS") .. "}"
  local host = wrk.headers["Host"] or wrk.host
  head = "POST /v1/queues/" .. os.getenv("QUEUE") .. "/jobs HTTP/1.1\r\n"
    .. "Host: " .. host .. "\r\n"
    .. "Authorization: Bearer " .. os.getenv("TOKEN") .. "\r\n"
    .. "Content-Type: application/json\r\n"
    .. "Content-Length: "
end

function request()
  n = n + 1
  local body = open .. n .. tail
  return head .. #body .. "\r\n\r\n" .. body
end
