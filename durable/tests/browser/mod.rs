//! What the dashboard's browser tests share: headless Chromium driven over its DevTools
//! protocol (`--remote-debugging-pipe`), and one HTTP/1.1 request over a plain socket
//! for what a browser would not send (a bearer token, a forged form).
//!
//! Chromium must be installed (Debian: `apt-get install -y chromium`; `scripts/test.sh`
//! does it): the tests fail, never skip, when it is missing.

// Each test file that includes this module uses part of it.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one answer of Chromium or of the dashboard may take.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Headless Chromium over the DevTools protocol on a pipe: JSON messages ended by NUL,
/// read by Chromium on its fd 3 and written on its fd 4 (a shell maps them to our
/// stdin and stdout pipes).
pub struct Browser {
    child: Child,
    input: ChildStdin,
    messages: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    profile: std::path::PathBuf,
}

const NO_CHROMIUM: &str = "chromium was not found on PATH: the dashboard test drives a real \
browser. Install it (Debian/Ubuntu: `apt-get install -y chromium`), or run scripts/test.sh, \
which installs it when it is missing.";

impl Browser {
    pub fn launch() -> Browser {
        let chromium = ["chromium", "chromium-browser"]
            .into_iter()
            .find(|name| {
                Command::new(name)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .expect(NO_CHROMIUM);
        // Two browsers of one test binary (tests run in parallel) need two profiles.
        static LAUNCHED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = LAUNCHED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let profile =
            std::env::temp_dir().join(format!("tickless-chromium-{}-{n}", std::process::id()));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<&0 4>&1 </dev/null >/dev/null")
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox", // tests run as root in CI containers
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-pipe",
                "--window-size=1100,1500",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot run sh to start chromium");
        let input = child.stdin.take().unwrap();
        let output = child.stdout.take().unwrap();
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(output);
            let mut buf = Vec::new();
            let mut byte = [0u8; 1];
            while reader.read(&mut byte).is_ok_and(|n| n == 1) {
                if byte[0] == 0 {
                    if let Ok(value) = serde_json::from_slice::<Value>(&buf) {
                        if tx.send(value).is_err() {
                            return;
                        }
                    }
                    buf.clear();
                } else {
                    buf.push(byte[0]);
                }
            }
        });
        let mut browser = Browser {
            child,
            input,
            messages,
            next_id: 0,
            session: String::new(),
            profile,
        };
        let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"]
            .as_str()
            .expect("a target id")
            .to_string();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session")
            .to_string();
        browser.call("Page.enable", json!({}));
        browser
    }

    fn next(&self, deadline: Instant, waiting_for: &str) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = self
            .messages
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("chromium: no answer within {LIMIT:?} while {waiting_for}"));
        // No page of the dashboard has a script: a dialog is user data run as markup.
        if message["method"] == json!("Page.javascriptDialogOpening") {
            panic!("the page ran a script (an unescaped job id?): {message}");
        }
        message
    }

    /// Sends a command (to the page once attached) and returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.input.write_all(&bytes).expect("write to chromium");
        let deadline = Instant::now() + LIMIT;
        loop {
            let reply = self.next(deadline, method);
            if reply["id"] == json!(id) {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    fn wait_for_load(&self, what: &str) {
        let deadline = Instant::now() + LIMIT;
        let waiting_for = format!("waiting for {what} to load");
        while self.next(deadline, &waiting_for)["method"] != json!("Page.loadEventFired") {}
    }

    pub fn open(&mut self, url: &str) {
        let nav = self.call("Page.navigate", json!({ "url": url }));
        assert!(nav.get("errorText").is_none(), "navigating to {url}: {nav}");
        self.wait_for_load(url);
    }

    /// Evaluates `expression` in the page; its value as JSON (a promise's, awaited).
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    pub fn text(&mut self, selector: &str) -> String {
        let js = format!("document.querySelector({}).textContent", json!(selector));
        match self.eval(&js) {
            Value::String(text) => text,
            other => panic!("no text at {selector}: {other}"),
        }
    }

    pub fn number(&mut self, selector: &str) -> u64 {
        let text = self.text(selector);
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{selector} shows {text:?}"))
    }

    /// Runs `js` (which submits a form) and waits for the page it leads to.
    pub fn submit(&mut self, js: &str) {
        self.eval(js);
        self.wait_for_load(&format!("the page that `{js}` leads to"));
    }

    /// Posts `fields` as a form to `url` from the page shown, as a page of that origin
    /// could (a form of its own, built by script), and waits for the answer's page.
    pub fn post_form(&mut self, url: &str, fields: &[(&str, &str)]) {
        let js = format!(
            "(() => {{ const f = document.createElement('form'); f.method = 'post'; \
             f.setAttribute('action', {}); \
             for (const [name, value] of {}) {{ const i = document.createElement('input'); \
             i.type = 'hidden'; i.name = name; i.value = value; f.appendChild(i); }} \
             document.body.appendChild(f); HTMLFormElement.prototype.submit.call(f); }})()",
            json!(url),
            json!(fields)
        );
        self.submit(&js);
    }

    /// The cookies this browser would send to `url`, as DevTools describes them (`name`,
    /// `value`, `path`, `httpOnly`, `secure`, `sameSite`, ...).
    pub fn cookies(&mut self, url: &str) -> Vec<Value> {
        let reply = self.call("Network.getCookies", json!({ "urls": [url] }));
        reply["cookies"]
            .as_array()
            .expect("a list of cookies")
            .clone()
    }

    /// A PNG of what the window shows.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine;
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// An answer read off the socket: status code, headers (names in lowercase), body.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// Every value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// One HTTP/1.1 request over a plain socket (`Connection: close`), read whole.
pub fn http(addr: &str, request: &str) -> Reply {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the dashboard");
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .unwrap_or_else(|err| panic!("the dashboard's whole answer within {LIMIT:?}: {err}"));
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {status_line:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

/// A GET request for [`http`].
pub fn get(path: &str, headers: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n")
}

/// A form POST for [`http`]; `headers` are extra lines, each ending in `\r\n`.
pub fn post(path: &str, headers: &str, form: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
        form.len()
    )
}

/// Serves `app` on a free loopback port (from inside a tokio runtime); its `host:port`.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr.to_string()
}

/// `text` percent-encoded whole but for RFC 3986's unreserved characters: a path
/// segment or a query value written by the test, not by the dashboard's own encoder.
pub fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
