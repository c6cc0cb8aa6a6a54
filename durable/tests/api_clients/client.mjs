// A Node service driving `tickless-durable serve`'s HTTP API with the built-in fetch:
// the same steps as client.py. Run by durable/tests/api_clients.rs with API, TOKEN,
// QUEUE set; exits non-zero (an AssertionError naming the step) on anything unexpected.
import assert from "node:assert/strict";

const { API, TOKEN, QUEUE } = process.env;
const Q = `${API}/v1/queues/${QUEUE}`;
const HOURS_48 = 48 * 3600 * 1000;

async function call(method, url, body, token = TOKEN) {
  const headers = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}

function problem(reply, status, kind) {
  assert.equal(reply.status, status, JSON.stringify(reply.body));
  assert.equal(reply.headers.get("content-type"), "application/problem+json");
  assert.equal(reply.body.type, `urn:tickless-durable:problem:${kind}`);
}

async function claimWithin(what, body, seconds = 20) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    assert.ok(Date.now() < deadline, `${what} within ${seconds} s`);
    const { body: got } = await call("POST", `${Q}/claim`, body);
    if (got.jobs.length) return got.jobs;
  }
}

let r = await call("POST", `${Q}/jobs`, { id: "order:1", payload: "rate the trip", delay_ms: HOURS_48 });
assert.deepEqual([r.status, r.body], [201, { id: "order:1", result: "added" }]);
r = await call("POST", `${Q}/jobs`, { id: "order:1" });
assert.deepEqual([r.status, r.body.result], [200, "exists"]);
problem(await call("POST", `${Q}/jobs`, { id: "x" }, null), 401, "unauthorized");
problem(await call("POST", `${Q}/jobs`, { id: "x", at: "next tuesday" }), 422, "invalid-due");

const batch = Array.from({ length: 10 }, (_, i) => ({ id: `order:${i + 2}`, payload: "p", delay_ms: HOURS_48 }));
problem(await call("POST", `${Q}/jobs/batch`, { jobs: [...batch, { id: "", payload: "p" }] }), 422, "invalid-id");
assert.equal((await call("GET", `${Q}/counts`)).body.scheduled, 1);
r = await call("POST", `${Q}/jobs/batch`, { jobs: batch });
assert.deepEqual(r.body.results.map((x) => x.result), Array(10).fill("added"));

r = await call("GET", `${Q}/jobs/order:1`);
assert.deepEqual([r.body.state, r.body.payload], ["scheduled", "rate the trip"]);
for (let n = 2; n < 7; n++) assert.deepEqual((await call("DELETE", `${Q}/jobs/order:${n}`)).body, { done: true });
problem(await call("GET", `${Q}/jobs/order:2`), 404, "not-found");
assert.deepEqual((await call("POST", `${Q}/jobs/order:7/reschedule`, { delay_ms: 3600000 })).body, { done: true });

assert.deepEqual((await call("PUT", `${Q}/schedules/nightly`, { cron: "0 2 * * *", zone: "Europe/Paris" })).body, { done: true });
problem(await call("PUT", `${Q}/schedules/bad`, { cron: "99 * * * *" }), 422, "invalid-schedule");
r = await call("GET", `${Q}/schedules`);
assert.deepEqual(r.body.schedules.map((s) => [s.id, s.zone]), [["nightly", "Europe/Paris"]]);
assert.deepEqual((await call("DELETE", `${Q}/schedules/nightly`)).body, { done: true });

for (let n = 0; n < 5; n++) await call("POST", `${Q}/jobs`, { id: `work:${n}`, payload: `job ${n}` });
const seen = new Map();
const deadline = Date.now() + 20000;
while (seen.size < 5) {
  assert.ok(Date.now() < deadline, `the worker saw ${[...seen.keys()]} of work:0-4 within 20 s`);
  for (const job of (await call("POST", `${Q}/claim`, { max: 10, wait_ms: 2000 })).body.jobs) seen.set(job.id, job);
}
assert.deepEqual([seen.get("work:0").attempt, seen.get("work:0").payload], [1, "job 0"]);
r = await call("POST", `${Q}/extend`, { deliveries: [{ id: "work:1", delivery: seen.get("work:1").delivery }], lease_ms: 60000 });
assert.deepEqual(r.body, { count: 1 });
r = await call("POST", `${Q}/fail`, { id: "work:2", delivery: seen.get("work:2").delivery, error: "timeout", delay_ms: 0 });
assert.deepEqual(r.body, { outcome: "retried" });
const acks = [...seen.values()].filter((j) => j.id !== "work:2").map((j) => ({ id: j.id, delivery: j.delivery }));
assert.deepEqual((await call("POST", `${Q}/ack`, { deliveries: acks })).body, { count: 4 });
let jobs = await claimWithin("work:2 delivered again after its failure", { max: 1, wait_ms: 2000 });
assert.deepEqual([jobs[0].id, jobs[0].attempt], ["work:2", 2]);
await call("POST", `${Q}/ack`, { deliveries: [{ id: "work:2", delivery: jobs[0].delivery }] });

await call("POST", `${Q}/jobs`, { id: "vanish" });
const gone = (await call("POST", `${Q}/claim`, { max: 1, wait_ms: 5000, lease_ms: 300 })).body.jobs;
assert.deepEqual(gone.map((j) => j.id), ["vanish"]);
jobs = await claimWithin("vanish delivered again after its 300 ms lease", { max: 1, wait_ms: 2000 });
assert.deepEqual([jobs[0].id, jobs[0].attempt], ["vanish", 2]);
assert.deepEqual((await call("POST", `${Q}/ack`, { deliveries: [{ id: "vanish", delivery: gone[0].delivery }] })).body, { count: 0 });
assert.deepEqual((await call("POST", `${Q}/ack`, { deliveries: [{ id: "vanish", delivery: jobs[0].delivery }] })).body, { count: 1 });

assert.deepEqual((await call("GET", `${Q}/counts`)).body, { scheduled: 6, ready: 0, in_flight: 0, dead: 0, cold: 0 });
console.log("node client: ok");
