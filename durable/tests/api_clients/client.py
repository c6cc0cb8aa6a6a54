"""A Python service driving `tickless-durable serve`'s HTTP API with the standard library
only (urllib): schedule (single and batch), look up, cancel, reschedule, recurring
schedules, and a pull worker (claim, ack, fail, extend; a worker that vanishes and whose
job is delivered again). Run by durable/tests/api_clients.rs with API, TOKEN, QUEUE set;
exits non-zero (an AssertionError naming the step) on anything unexpected."""
import json
import os
import time
import urllib.error
import urllib.request

API, TOKEN, QUEUE = os.environ["API"], os.environ["TOKEN"], os.environ["QUEUE"]
Q = f"{API}/v1/queues/{QUEUE}"
HOURS_48 = 48 * 3600 * 1000


def call(method, url, body=None, token=TOKEN):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, err.headers, json.loads(err.read() or b"null")


def problem(reply, status, kind):
    got_status, headers, body = reply
    assert got_status == status, (status, reply)
    assert headers["Content-Type"] == "application/problem+json", headers
    assert body["type"] == f"urn:tickless-durable:problem:{kind}", body


# Schedule: 201 added; the same id again 200 exists.
status, _, body = call("POST", f"{Q}/jobs", {"id": "order:1", "payload": "rate the trip", "delay_ms": HOURS_48})
assert (status, body) == (201, {"id": "order:1", "result": "added"}), body
status, _, body = call("POST", f"{Q}/jobs", {"id": "order:1", "payload": "again"})
assert (status, body["result"]) == (200, "exists"), body
problem(call("POST", f"{Q}/jobs", {"id": "x"}, token=None), 401, "unauthorized")
problem(call("POST", f"{Q}/jobs", {"id": "x", "delay": 5}), 422, "invalid-body")

# A batch with one bad job is refused whole; then the good ones.
batch = [{"id": f"order:{n}", "payload": "p", "delay_ms": HOURS_48} for n in range(2, 12)]
problem(call("POST", f"{Q}/jobs/batch", {"jobs": batch + [{"id": ""}]}), 422, "invalid-id")
status, _, counts = call("GET", f"{Q}/counts")
assert counts["scheduled"] == 1, counts
status, _, body = call("POST", f"{Q}/jobs/batch", {"jobs": batch})
assert status == 200 and [r["result"] for r in body["results"]] == ["added"] * 10, body

# Look up, cancel some, reschedule one.
status, _, job = call("GET", f"{Q}/jobs/order:1")
assert (status, job["state"], job["payload"]) == (200, "scheduled", "rate the trip"), job
for n in range(2, 7):
    status, _, body = call("DELETE", f"{Q}/jobs/order:{n}")
    assert body == {"done": True}, body
problem(call("GET", f"{Q}/jobs/order:2"), 404, "not-found")
status, _, body = call("POST", f"{Q}/jobs/order:7/reschedule", {"at": "2099-01-01T00:00:00Z"})
assert body == {"done": True}, body
assert call("GET", f"{Q}/jobs/order:7")[2]["due"] == "2099-01-01T00:00:00.000Z"

# Recurring schedules.
status, _, body = call("PUT", f"{Q}/schedules/hourly", {"every_ms": 3600000, "payload": "tick"})
assert body == {"done": True}, body
problem(call("PUT", f"{Q}/schedules/bad", {"cron": "0 2 * * *", "zone": "Nowhere/City"}), 422, "invalid-schedule")
ids = [s["id"] for s in call("GET", f"{Q}/schedules")[2]["schedules"]]
assert ids == ["hourly"], ids
assert call("DELETE", f"{Q}/schedules/hourly")[2] == {"done": True}

# A pull worker: five jobs due now; ack, fail once then ack, extend then ack.
for n in range(5):
    call("POST", f"{Q}/jobs", {"id": f"work:{n}", "payload": f"job {n}"})
seen, deadline = {}, time.monotonic() + 20
while len(seen) < 5:
    assert time.monotonic() < deadline, f"the worker saw {sorted(seen)} of work:0-4 within 20 s"
    for job in call("POST", f"{Q}/claim", {"max": 10, "wait_ms": 2000})[2]["jobs"]:
        seen[job["id"]] = job
first = seen["work:0"]
assert (first["attempt"], first["payload"]) == (1, "job 0"), first
status, _, body = call("POST", f"{Q}/extend", {"deliveries": [{"id": "work:1", "delivery": seen["work:1"]["delivery"]}], "lease_ms": 60000})
assert body == {"count": 1}, body
status, _, body = call("POST", f"{Q}/fail", {"id": "work:2", "delivery": seen["work:2"]["delivery"], "error": "smtp 451", "delay_ms": 0})
assert body == {"outcome": "retried"}, body
acks = [{"id": j["id"], "delivery": j["delivery"]} for j in seen.values() if j["id"] != "work:2"]
assert call("POST", f"{Q}/ack", {"deliveries": acks})[2] == {"count": 4}
deadline = time.monotonic() + 20
while True:
    assert time.monotonic() < deadline, "work:2 was not delivered again within 20 s of its failure"
    jobs = call("POST", f"{Q}/claim", {"max": 1, "wait_ms": 2000})[2]["jobs"]
    if jobs:
        break
assert (jobs[0]["id"], jobs[0]["attempt"]) == ("work:2", 2), jobs
assert call("POST", f"{Q}/ack", {"deliveries": [{"id": "work:2", "delivery": jobs[0]["delivery"]}]})[2] == {"count": 1}

# A worker that vanishes: its 300 ms lease ends, the job is delivered again.
call("POST", f"{Q}/jobs", {"id": "vanish", "payload": "v"})
gone = call("POST", f"{Q}/claim", {"max": 1, "wait_ms": 5000, "lease_ms": 300})[2]["jobs"]
assert [j["id"] for j in gone] == ["vanish"], gone
deadline = time.monotonic() + 20
while True:
    assert time.monotonic() < deadline, "vanish was not delivered again within 20 s of its 300 ms lease"
    again = call("POST", f"{Q}/claim", {"max": 1, "wait_ms": 2000})[2]["jobs"]
    if again:
        break
assert (again[0]["id"], again[0]["attempt"]) == ("vanish", 2), again
late = {"deliveries": [{"id": "vanish", "delivery": gone[0]["delivery"]}]}
assert call("POST", f"{Q}/ack", late)[2] == {"count": 0}, "the vanished delivery's ack completed something"
assert call("POST", f"{Q}/ack", {"deliveries": [{"id": "vanish", "delivery": again[0]["delivery"]}]})[2] == {"count": 1}

counts = call("GET", f"{Q}/counts")[2]
assert counts == {"scheduled": 6, "ready": 0, "in_flight": 0, "dead": 0, "cold": 0}, counts
print("python client: ok")
