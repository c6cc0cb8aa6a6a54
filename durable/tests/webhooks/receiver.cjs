// A webhook receiver verifying with the reference `standardwebhooks` package (npm).
// Listens on 127.0.0.1 (a free port, printed first as `port N`), verifies each POST with
// the secret in WEBHOOK_SECRET, prints one JSON line per request (`ok` true and the
// job's headers when it verified) and answers 204, or 401 when it did not verify.
// CommonJS, so that NODE_PATH finds the package where scripts/test.sh installed it.
const http = require("node:http");
const { Webhook } = require("standardwebhooks");

const hook = new Webhook(process.env.WEBHOOK_SECRET);
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8"); // the raw body, as signed
    let payload = null, ok = true;
    try {
      payload = hook.verify(body, req.headers);
    } catch {
      ok = false;
    }
    console.log(JSON.stringify({
      ok, webhook_id: req.headers["webhook-id"], job_id: req.headers["tickless-job-id"],
      delivery: Number(req.headers["tickless-delivery"]),
      attempt: Number(req.headers["tickless-attempt"]), payload,
    }));
    res.writeHead(ok ? 204 : 401).end();
  });
});
server.listen(0, "127.0.0.1", () => console.log(`port ${server.address().port}`));
