"""A stream outlet's consumer, with a consumer group (redis-py), for
durable/tests/durable_stream_clients.rs.

usage: consumer.py URL KEY GROUP CONSUMER die N
       consumer.py URL KEY GROUP CONSUMER work TOTAL

die:  reads N entries and exits without acknowledging them: a consumer that died with
      entries pending.
work: claims what other consumers left pending (XAUTOCLAIM), then reads new entries
      (XREADGROUP), acknowledging each (XACK), until TOTAL are handled, within 10 s;
      prints a line per entry: <job id> <delivery> <claimed|new>.
"""
import sys
import time

import redis

url, key, group, me, mode, n = sys.argv[1:7]
n = int(n)
r = redis.Redis.from_url(url)
try:
    r.xgroup_create(key, group, id="0", mkstream=True)
except redis.ResponseError as err:
    if "BUSYGROUP" not in str(err):
        raise


def show(fields, how):
    print(fields[b"id"].decode(), fields[b"delivery"].decode(), how, flush=True)


if mode == "die":
    for _, entries in r.xreadgroup(group, me, {key: ">"}, count=n) or []:
        for _, fields in entries:
            show(fields, "read")
    sys.exit(0)  # no XACK: the entries stay pending, this consumer's

handled = 0


def handle(entries, how):
    global handled
    for entry_id, fields in entries:
        show(fields, how)
        r.xack(key, group, entry_id)
        handled += 1


# A real consumer claims entries idle for a while (min_idle_time=60000, say); the dead
# consumer here is known dead, so at once.
start = "0-0"
while True:
    reply = r.xautoclaim(key, group, me, min_idle_time=0, start_id=start, count=100)
    start, claimed = reply[0], reply[1]
    handle(claimed, "claimed")
    if start in (b"0-0", "0-0"):
        break
deadline = time.monotonic() + 10
while handled < n:
    if time.monotonic() > deadline:
        sys.exit(f"waited 10 s for {n} entries of {key}, handled {handled}")
    for _, entries in r.xreadgroup(group, me, {key: ">"}, count=100, block=1000) or []:
        handle(entries, "new")
pending = r.xpending(key, group)["pending"]
if pending:
    sys.exit(f"{pending} entries of {key} still pending after every one was handled")
