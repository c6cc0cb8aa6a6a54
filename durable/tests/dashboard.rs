//! The dashboard in a real browser: a real `redis-server`, the dashboard mounted in an
//! axum app, and headless Chromium driven over its DevTools protocol
//! (`--remote-debugging-pipe`): the page loads, its numbers match Redis, escaping holds,
//! no password reaches the page, an action (log in, "Retry all dead") works, and a
//! screenshot is written to `$CARGO_TARGET_TMPDIR/dashboard.png`.
//!
//! Chromium must be installed (Debian: `apt-get install -y chromium`; `scripts/test.sh`
//! does it): the test fails, never skips, when it is missing.

use tickless_test_support as support;

use redis::AsyncCommands;
use serde_json::{json, Value};
use std::io::{BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};
use support::RedisServer;
use tickless_durable::dashboard::Dashboard;
use tickless_durable::{LeaderOptions, Queue, WorkerOptions};

const PASSWORD: &str = "hunter2-not-on-the-page";
const TOKEN: &str = "let-me-act";
const T0: u64 = 1_700_000_000_000;
/// A dead job's id that is markup, to see it shown as text.
const EVIL_ID: &str = "<img src=x id=evil onerror=alert(1)>&\"'";

fn at(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// Headless Chromium over the DevTools protocol on a pipe: JSON messages ended by NUL,
/// read by Chromium on its fd 3 and written on its fd 4 (a shell maps them to our
/// stdin and stdout pipes).
struct Browser {
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
    fn launch() -> Browser {
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
        let profile =
            std::env::temp_dir().join(format!("tickless-chromium-{}", std::process::id()));
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
            .unwrap_or_else(|_| panic!("chromium: no answer within 20 s while {waiting_for}"));
        // No page of the dashboard has a script: a dialog is user data run as markup.
        if message["method"] == json!("Page.javascriptDialogOpening") {
            panic!("the page ran a script (an unescaped job id?): {message}");
        }
        message
    }

    /// Sends a command (to the page once attached) and returns its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.input.write_all(&bytes).expect("write to chromium");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let reply = self.next(deadline, method);
            if reply["id"] == json!(id) {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    fn wait_for_load(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.next(deadline, "loading a page")["method"] != json!("Page.loadEventFired") {}
    }

    fn open(&mut self, url: &str) {
        let nav = self.call("Page.navigate", json!({ "url": url }));
        assert!(nav.get("errorText").is_none(), "navigating to {url}: {nav}");
        self.wait_for_load();
    }

    /// Evaluates `expression` in the page; its value as JSON.
    fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        );
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    fn text(&mut self, selector: &str) -> String {
        let js = format!("document.querySelector({}).textContent", json!(selector));
        match self.eval(&js) {
            Value::String(text) => text,
            other => panic!("no text at {selector}: {other}"),
        }
    }

    fn number(&mut self, selector: &str) -> u64 {
        let text = self.text(selector);
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{selector} shows {text:?}"))
    }

    /// Runs `js` (which submits a form) and waits for the page it leads to.
    fn submit(&mut self, js: &str) {
        self.eval(js);
        self.wait_for_load();
    }

    fn screenshot(&mut self, path: &std::path::Path) {
        use base64::Engine;
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// What Redis holds, read with plain commands (not the crate's reads).
struct Truth {
    jobs: u64,
    ready: u64,
    in_flight: u64,
    dead: u64,
    level: [u64; 7],
}

async fn truth(admin: &mut redis::aio::MultiplexedConnection) -> Truth {
    let p = "tickless:{reviews}:";
    let mut level = [0; 7];
    for (k, count) in level.iter_mut().enumerate() {
        let keys: Vec<String> = admin.keys(format!("{p}b:{k}:*")).await.unwrap();
        for key in keys {
            *count += admin.scard::<_, u64>(key).await.unwrap();
        }
    }
    Truth {
        jobs: admin.hlen(format!("{p}jobs")).await.unwrap(),
        ready: admin.llen(format!("{p}ready")).await.unwrap(),
        in_flight: admin.zcard(format!("{p}flight")).await.unwrap(),
        dead: admin.zcard(format!("{p}dead")).await.unwrap(),
        level,
    }
}

#[test]
fn dashboard_in_a_browser_shows_what_redis_holds_and_retries_the_dead() {
    let started = Instant::now();
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The default user, given a password here: the dashboard must hide it (in the `acl`
    // variant too, where README's user is left aside: its password is README's).
    let secret_url = server.url_as("", PASSWORD);
    let (base, mut admin, _leader) = runtime.block_on(async {
        let mut admin = redis::Client::open(server.admin_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(PASSWORD)
            .query_async(&mut admin)
            .await
            .unwrap();
        let admin = redis::Client::open(secret_url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let queue = Queue::connect(&secret_url, "reviews").await.unwrap();
        queue.set_manual_clock(Some(at(T0))).await.unwrap();
        // 20 jobs over the next hour and three days; 3 ready; 1 in flight; 2 dead.
        for i in 0..10u64 {
            let id = format!("soon:{i}");
            queue
                .schedule(&id, b"5 stars", at(T0 + 60_000 * (5 + i)))
                .await
                .unwrap();
            let id = format!("later:{i}");
            queue
                .schedule(&id, b"4 stars", at(T0 + 3_600_000 * (30 + 5 * i)))
                .await
                .unwrap();
        }
        // A recurring schedule, listed with its next occurrence and removed below.
        queue
            .every("digest", Duration::from_secs(3600), b"send the digest")
            .await
            .unwrap();
        let once = queue.with_max_attempts(1);
        for id in ["dead:1", EVIL_ID] {
            once.schedule(id, [0u8, 159, 146, 150], at(T0))
                .await
                .unwrap();
        }
        let worker = queue.worker(WorkerOptions::default());
        for job in worker.try_claim(2).await.unwrap() {
            worker
                .fail(&job, "the <b>review</b> service said no")
                .await
                .unwrap();
        }
        for id in ["ready:1", "ready:2", "ready:3", "flight:1"] {
            queue.schedule(id, b"{\"stars\":3}", at(T0)).await.unwrap();
        }
        let claimed = worker.try_claim(1).await.unwrap();
        assert_eq!(claimed.len(), 1);
        // A leader, for its name and token on the page.
        let mut leader = queue.leader(LeaderOptions::default());
        leader.step().await.unwrap();
        assert!(leader.is_leading());

        let app = axum::Router::new().nest(
            "/ops",
            Dashboard::new([queue])
                .action_token(TOKEN)
                .sample_every(Duration::from_millis(100))
                .router(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        // The leader runs no task: its lease (on the manual clock) stays for the page.
        (format!("http://{addr}/ops"), admin, leader)
    });

    let mut browser = Browser::launch();
    browser.open(&format!("{base}/queue/reviews"));
    assert_eq!(browser.text("#queue-name"), "reviews");
    let before = runtime.block_on(truth(&mut admin));
    assert_eq!(before.dead, 2);
    assert_eq!(browser.number("#count-ready"), before.ready);
    assert_eq!(browser.number("#count-in-flight"), before.in_flight);
    assert_eq!(browser.number("#count-dead"), before.dead);
    assert_eq!(
        browser.number("#count-scheduled"),
        before.jobs - before.ready - before.in_flight - before.dead
    );
    let mut shown_levels = 0;
    for (k, &jobs) in before.level.iter().enumerate() {
        if jobs > 0 {
            assert_eq!(browser.number(&format!("#level-{k}")), jobs, "level {k}");
            shown_levels += jobs;
        }
    }
    assert_eq!(shown_levels, 20, "every scheduled job is in a bucket");
    // The pictures: every scheduled job is in the week's chart, the soon ones in the
    // hour's.
    let hour = browser.text("figure:has(#due-hour) figcaption");
    assert!(hour.ends_with(": 10 jobs"), "{hour}");
    let week = browser.text("figure:has(#due-week) figcaption");
    assert!(week.ends_with(": 20 jobs"), "{week}");
    assert!(browser.text("#leader").contains("token"));

    // User data is text, not markup; the password is nowhere.
    assert_eq!(
        browser.eval("document.querySelectorAll('#evil').length"),
        json!(0)
    );
    let dead_ids =
        browser.eval("[...document.querySelectorAll('#dead a.job')].map(a => a.textContent)");
    assert!(
        dead_ids.as_array().unwrap().contains(&json!(EVIL_ID)),
        "{dead_ids}"
    );
    let html = browser.eval("document.documentElement.outerHTML");
    assert!(
        !html.as_str().unwrap().contains(PASSWORD),
        "the password reached the page"
    );

    // The dead job's page: its error and its payload in hex.
    browser.open(&format!("{base}/queue/reviews/job?id=dead%3A1"));
    assert_eq!(browser.text("#state"), "dead");
    assert_eq!(
        browser.text("#last-error"),
        "the <b>review</b> service said no"
    );
    assert!(browser
        .text("#payload")
        .starts_with("00000000  00 9f 92 96"));

    // No buttons before logging in; then "Retry all dead".
    browser.open(&format!("{base}/queue/reviews"));
    assert_eq!(
        browser.eval("document.querySelectorAll('button.retry-all').length"),
        json!(0)
    );
    browser.submit(&format!(
        "document.getElementById('token').value = {}; document.getElementById('login').submit()",
        json!(TOKEN)
    ));
    browser.open(&format!("{base}/queue/reviews"));
    browser.submit("document.querySelector('button.retry-all').click()");
    assert_eq!(browser.text("#msg"), "retrying 2 dead jobs");
    let after = runtime.block_on(truth(&mut admin));
    assert_eq!(after.dead, 0);
    assert_eq!(after.ready, before.ready + 2);
    assert_eq!(browser.number("#count-dead"), 0);
    assert_eq!(browser.number("#count-ready"), after.ready);

    // The recurring schedule: listed, then removed by its button.
    browser.open(&format!("{base}/queue/reviews"));
    let row = browser.text("#schedules tr[data-schedule=digest]");
    assert!(
        row.contains("every 60.0 min") && row.contains("in 60.0 min"),
        "{row}"
    );
    browser.submit("document.querySelector('#schedules button.unschedule').click()");
    assert_eq!(
        browser.text("#msg"),
        "removed the recurring schedule \"digest\""
    );
    let recur: u64 = runtime.block_on(async {
        redis::cmd("HLEN")
            .arg("tickless:{reviews}:recur")
            .query_async(&mut admin)
            .await
            .unwrap()
    });
    assert_eq!(recur, 0, "the schedule is still in Redis");
    assert_eq!(
        browser.eval("document.querySelectorAll('#schedules').length"),
        json!(0)
    );

    // Script failures a leader or worker counted in the queue (as
    // tests/durable_counters.rs makes them): shown, their message as text.
    runtime.block_on(async {
        let _: () = redis::cmd("HSET")
            .arg("tickless:{reviews}:meta")
            .arg("n_script_errors")
            .arg(2)
            .arg("last_script_error")
            .arg("garbage in <b>ready</b>")
            .query_async(&mut admin)
            .await
            .unwrap();
    });
    browser.open(&format!("{base}/queue/reviews"));
    assert!(browser.text("#script-errors").starts_with("2 script calls"));
    assert_eq!(
        browser.text("#last-script-error"),
        "garbage in <b>ready</b>"
    );
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    browser.screenshot(&shot);

    // /metrics, in the browser too: the same numbers, no password.
    browser.open(&format!("{base}/metrics"));
    let metrics = browser.eval("document.body.innerText");
    let metrics = metrics.as_str().unwrap();
    assert!(
        metrics.contains(&format!(
            "tickless_jobs{{queue=\"reviews\",state=\"ready\"}} {}",
            after.ready
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("tickless_wheel_jobs{queue=\"reviews\",level=\"2\"}"),
        "{metrics}"
    );
    for (event, n) in [
        ("scheduled", 26),
        ("delivered", 3),
        ("died", 2),
        ("leaderships", 1),
        ("script_errors", 2),
    ] {
        let line = format!("tickless_events_total{{queue=\"reviews\",event=\"{event}\"}} {n}\n");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    for line in [
        "tickless_promotion_lag_seconds_bucket{queue=\"reviews\",le=\"0.001\"} 0\n",
        "tickless_promotion_lag_seconds_bucket{queue=\"reviews\",le=\"+Inf\"} 0\n",
        "tickless_promotion_lag_seconds_sum{queue=\"reviews\"} 0\n",
        "tickless_recurring_schedules{queue=\"reviews\"} 0\n",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    assert!(!metrics.contains(PASSWORD));
    eprintln!(
        "dashboard test took {:?}; screenshot {}",
        started.elapsed(),
        shot.display()
    );
}

/// One HTTP/1.1 request over a plain socket: the status line and the body.
fn http(addr: &str, request: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the dashboard");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .expect("the dashboard's answer");
    let status = reply.lines().next().unwrap_or("").to_string();
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

#[test]
fn serve_finds_the_queues_and_refuses_actions_without_the_token() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if server.is_acl() {
            // README: the dashboard's user needs `+scan` too (`durable::queue_names`).
            let mut admin = redis::Client::open(server.admin_url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let _: () = redis::cmd("ACL")
                .arg(&["SETUSER", &support::readme_user().0, "+scan"])
                .query_async(&mut admin)
                .await
                .unwrap();
        }
        let queue = Queue::connect(&server.url(), "served").await.unwrap();
        queue.schedule("x", b"1", Duration::ZERO).await.unwrap();
        // The meta key `serve` finds queues by: a leader writes it.
        let mut leader = queue.leader(LeaderOptions::default());
        leader.step().await.unwrap();
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .args(["serve", &server.url()])
        .env("TICKLESS_DASHBOARD_ADDR", "127.0.0.1:0")
        .env("TICKLESS_DASHBOARD_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run tickless-durable");
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _child = Kill(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut BufReader::new(stdout), &mut line).unwrap();
    assert!(line.contains("1 queue(s)"), "{line}");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let (status, body) = http(&addr, &get("/metrics"));
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("tickless_jobs{queue=\"served\",state=\"ready\"} 1"),
        "{body}"
    );
    let form = "action=cancel&id=x";
    let post = |auth: &str| {
        format!(
            "POST /queue/served/action HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        )
    };
    let (status, _) = http(&addr, &post(""));
    assert!(status.contains("403"), "no token: {status}");
    let (status, _) = http(&addr, &post("Authorization: Bearer wrong\r\n"));
    assert!(status.contains("403"), "a wrong token: {status}");
    let (status, _) = http(&addr, &post(&format!("Authorization: Bearer {TOKEN}\r\n")));
    assert!(status.contains("303"), "the token: {status}");
    // Cancelled: its page says it is gone (the ready list keeps a stale entry, dropped by
    // the next claim, so the count of ready entries does not tell).
    let (_, body) = http(&addr, &get("/queue/served/job?id=x"));
    assert!(body.contains("No such job"), "{body}");
}
