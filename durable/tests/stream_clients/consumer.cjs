// A stream outlet's consumer, with a consumer group (ioredis), for
// durable/tests/durable_stream_clients.rs: the same as consumer.py.
//
// usage: node consumer.cjs URL KEY GROUP CONSUMER die N
//        node consumer.cjs URL KEY GROUP CONSUMER work TOTAL
// TICKLESS_IOREDIS_DIR names the directory whose node_modules holds ioredis.
const path = require("path");
const ioredis = require(path.join(process.env.TICKLESS_IOREDIS_DIR, "node_modules", "ioredis"));
const Redis = ioredis.default || ioredis.Redis || ioredis;

const [url, key, group, me, mode, count] = process.argv.slice(2);
const n = Number(count);
const r = new Redis(url);

// Fields as an object; values as text.
const fieldsOf = (list) => {
  const out = {};
  for (let i = 0; i < list.length; i += 2) out[list[i]] = list[i + 1];
  return out;
};
const show = (f, how) => console.log(`${f.id} ${f.delivery} ${how}`);

async function main() {
  try {
    await r.xgroup("CREATE", key, group, "0", "MKSTREAM");
  } catch (err) {
    if (!String(err).includes("BUSYGROUP")) throw err;
  }
  if (mode === "die") {
    const got = await r.xreadgroup("GROUP", group, me, "COUNT", n, "STREAMS", key, ">");
    for (const [, entries] of got || []) for (const [, f] of entries) show(fieldsOf(f), "read");
    return; // no XACK: the entries stay pending, this consumer's
  }
  let handled = 0;
  const handle = async (entries, how) => {
    for (const [entryId, f] of entries) {
      show(fieldsOf(f), how);
      await r.xack(key, group, entryId);
      handled += 1;
    }
  };
  // A real consumer claims entries idle for a while; the dead one here is known dead.
  let start = "0-0";
  do {
    const [next, claimed] = await r.xautoclaim(key, group, me, 0, start, "COUNT", 100);
    await handle(claimed, "claimed");
    start = next;
  } while (start !== "0-0");
  const deadline = Date.now() + 10_000;
  while (handled < n) {
    if (Date.now() > deadline) throw new Error(`waited 10 s for ${n} entries of ${key}, handled ${handled}`);
    const got = await r.xreadgroup("GROUP", group, me, "COUNT", 100, "BLOCK", 1000, "STREAMS", key, ">");
    for (const [, entries] of got || []) await handle(entries, "new");
  }
  const [pending] = await r.xpending(key, group);
  if (pending > 0) throw new Error(`${pending} entries of ${key} still pending after every one was handled`);
}

main().then(
  () => r.quit(),
  (err) => {
    console.error(String(err));
    process.exit(1);
  },
);
