"""A webhook receiver verifying with the reference `standardwebhooks` package (PyPI).

Listens on 127.0.0.1 (a free port, printed first as `port N`), verifies each POST with
the secret in WEBHOOK_SECRET, prints one JSON line per request (`ok` true and the job's
headers when it verified) and answers 204, or 401 when it did not verify.
"""
import json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

hook = Webhook(os.environ["WEBHOOK_SECRET"])

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        try:
            payload = hook.verify(body, dict(self.headers))
            ok = True
        except (WebhookVerificationError, ValueError):  # ValueError: a malformed header
            payload, ok = None, False
        print(json.dumps({"ok": ok, "webhook_id": self.headers["webhook-id"],
                          "job_id": self.headers["tickless-job-id"],
                          "delivery": int(self.headers["tickless-delivery"]),
                          "attempt": int(self.headers["tickless-attempt"]),
                          "payload": payload}), flush=True)
        self.send_response(204 if ok else 401)
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"port {server.server_address[1]}", flush=True)
server.serve_forever()
