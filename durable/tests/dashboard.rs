//! The dashboard in a real browser: a real `redis-server`, the dashboard mounted in an
//! axum app, and headless Chromium driven over its DevTools protocol
//! (`--remote-debugging-pipe`): the page loads, its numbers match Redis, escaping holds,
//! no password reaches the page, an action (log in, "Retry all dead") works, and a
//! screenshot, written to `$CARGO_TARGET_TMPDIR/dashboard.png`, shows the page drawn.
//! The dashboard's defences (read-only, the login cookie, hostile input) are in
//! `dashboard_security.rs`.

mod browser;

use tickless_test_support as support;

use browser::{get, http, post, Browser};
use redis::AsyncCommands;
use serde_json::json;
use std::io::BufReader;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{at, RedisServer, T0};
use tickless_durable::dashboard::Dashboard;
use tickless_durable::{LeaderOptions, Queue, WorkerOptions};

const PASSWORD: &str = "hunter2-not-on-the-page";
const TOKEN: &str = "let-me-act";
/// A dead job's id that is markup, to see it shown as text.
const EVIL_ID: &str = "<img src=x id=evil onerror=alert(1)>&\"'";

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

/// The screenshot of a queue's page is the page drawn: a PNG of the window's size in
/// device pixels, not blank, and where the page lays out a bar of the hour's chart and
/// the script-error warning, the picture has their colours (the style sheet's
/// `.bar{fill:#4a7fb5}` and `.warn{background:#fbeaea}`). The pixels are decoded by the
/// browser, from the PNG's bytes, in a canvas that is never added to the page.
fn check_screenshot(browser: &mut Browser, png: &[u8]) {
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert_eq!(&png[12..16], b"IHDR", "a PNG starts with its header");
    let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    let (width, height) = (size(16), size(20));
    use base64::Engine;
    let js = format!(
        "(async () => {{
            const img = new Image();
            img.src = 'data:image/png;base64,{}';
            await img.decode();
            const canvas = document.createElement('canvas');
            canvas.width = img.naturalWidth;
            canvas.height = img.naturalHeight;
            const g = canvas.getContext('2d');
            g.drawImage(img, 0, 0);
            const px = g.getImageData(0, 0, canvas.width, canvas.height).data;
            const dpr = window.devicePixelRatio;
            const at = (x, y) => {{
                const i = 4 * (Math.floor(y * dpr) * canvas.width + Math.floor(x * dpr));
                return [px[i], px[i + 1], px[i + 2]];
            }};
            const bar = document.querySelector('#due-hour rect.bar').getBoundingClientRect();
            const warn = document.querySelector('#script-errors').getBoundingClientRect();
            const colours = new Set();
            let white = 0;
            for (let i = 0; i < px.length; i += 4) {{
                colours.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2]);
                if (px[i] === 255 && px[i + 1] === 255 && px[i + 2] === 255) white++;
            }}
            return {{
                window: [Math.round(innerWidth * dpr), Math.round(innerHeight * dpr)],
                decoded: [canvas.width, canvas.height],
                bar: at(bar.x + bar.width / 2, bar.y + bar.height / 2),
                bar_bottom: bar.bottom,
                warn: at(warn.x + 2, warn.y + 2),
                warn_bottom: warn.bottom,
                colours: colours.size,
                white: white / (px.length / 4),
            }};
        }})()",
        base64::engine::general_purpose::STANDARD.encode(png)
    );
    let seen = browser.eval(&js);
    assert_eq!(seen["decoded"], json!([width, height]), "{seen}");
    assert_eq!(
        seen["window"],
        json!([width, height]),
        "the window's size: {seen}"
    );
    let inside = |bottom: &serde_json::Value| bottom.as_f64().unwrap() < f64::from(height);
    assert!(
        inside(&seen["bar_bottom"]) && inside(&seen["warn_bottom"]),
        "{seen}"
    );
    assert_eq!(
        seen["bar"],
        json!([0x4a, 0x7f, 0xb5]),
        "a bar's colour: {seen}"
    );
    assert_eq!(
        seen["warn"],
        json!([0xfb, 0xea, 0xea]),
        "the warning's: {seen}"
    );
    // Text, tables and charts: many colours, and far from all white.
    assert!(seen["colours"].as_u64().unwrap() > 50, "{seen}");
    assert!(seen["white"].as_f64().unwrap() < 0.97, "{seen}");
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
        let mut admin = server.admin().await;
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
    // The pictures: every scheduled job is in the week's chart; in the hour's, the soon
    // ones, and the later ones' bucket (from 29 min to 75 h ahead) as one bar at its start.
    let hour = browser.text("figure:has(#due-hour) figcaption");
    assert!(
        hour.ends_with(": 20 jobs; 10 of them may come due after +1 h"),
        "{hour}"
    );
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

    // The dead job's page before logging in: its state, its error and payload hidden.
    let dead_job = format!("{base}/queue/reviews/job?id=dead%3A1");
    browser.open(&dead_job);
    assert_eq!(browser.text("#state"), "dead");
    for hidden in ["#last-error-hidden", "#payload-hidden"] {
        assert_eq!(
            browser.text(hidden),
            "hidden: log in with the access token to see it"
        );
    }

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
    // Logged in: the dead job's error and its payload in hex.
    browser.open(&dead_job);
    assert_eq!(
        browser.text("#last-error"),
        "the <b>review</b> service said no"
    );
    assert!(browser
        .text("#payload")
        .starts_with("00000000  00 9f 92 96"));
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
    let png = browser.screenshot();
    std::fs::write(&shot, &png).expect("write the screenshot");
    check_screenshot(&mut browser, &png);

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

/// Kills the child process when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tickless-durable serve <url> <args>` with the token, on a free port: the process and
/// its address (from the line it prints at start).
fn serve_bin(url: &str, args: &[&str]) -> (Kill, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .args(["serve", url])
        .args(args)
        .env("TICKLESS_DASHBOARD_ADDR", "127.0.0.1:0")
        .env("TICKLESS_DASHBOARD_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run tickless-durable");
    let stdout = child.stdout.take().unwrap();
    let child = Kill(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut BufReader::new(stdout), &mut line).unwrap();
    assert!(line.contains("1 queue(s)"), "{line}");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (child, addr)
}

#[test]
fn serve_finds_the_queues_and_refuses_actions_without_the_token() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        server.allow_scan().await;
        let queue = Queue::connect(&server.url(), "served").await.unwrap();
        queue.schedule("x", b"1", Duration::ZERO).await.unwrap();
        // The meta key `serve` finds queues by: a leader writes it.
        let mut leader = queue.leader(LeaderOptions::default());
        leader.step().await.unwrap();
    });
    let (_child, addr) = serve_bin(&server.url(), &[]);
    let reply = http(&addr, &get("/metrics", ""));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply
            .body
            .contains("tickless_jobs{queue=\"served\",state=\"ready\"} 1"),
        "{}",
        reply.body
    );
    // The payload: hidden without the token, shown with it, and to anyone with
    // `--public-read`.
    let job = |addr: &str, auth: &str| http(addr, &get("/queue/served/job?id=x", auth)).body;
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let body = job(&addr, "");
    assert!(body.contains("id=\"payload-hidden\"") && !body.contains("id=\"payload\""));
    assert!(job(&addr, &bearer).contains("<pre id=\"payload\">1</pre>"));
    let (_public, public) = serve_bin(&server.url(), &["--public-read"]);
    assert!(job(&public, "").contains("<pre id=\"payload\">1</pre>"));
    let cancel = |auth: &str| post("/queue/served/action", auth, "action=cancel&id=x");
    assert_eq!(http(&addr, &cancel("")).status, 403, "no token");
    let wrong = cancel("Authorization: Bearer wrong\r\n");
    assert_eq!(http(&addr, &wrong).status, 403, "a wrong token");
    let right = cancel(&format!("Authorization: Bearer {TOKEN}\r\n"));
    assert_eq!(http(&addr, &right).status, 303, "the token");
    // Cancelled: its page says it is gone (the ready list keeps a stale entry, dropped by
    // the next claim, so the count of ready entries does not tell).
    let body = http(&addr, &get("/queue/served/job?id=x", "")).body;
    assert!(body.contains("No such job"), "{body}");
}

#[test]
fn serve_shows_a_queue_created_after_it_started() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let schedule = |name: &str| {
        runtime.block_on(async {
            let queue = Queue::connect(&server.url(), name).await.unwrap();
            queue.schedule("x", b"1", Duration::ZERO).await.unwrap();
        })
    };
    runtime.block_on(server.allow_scan());
    schedule("first");
    let (_child, addr) = serve_bin(&server.url(), &[]);
    schedule("coldq");
    // Before: 404 `no queue "coldq" on this dashboard` for as long as serve ran. A page
    // naming a queue it does not know looks again, at most once a second.
    let limit = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = http(&addr, &get("/queue/coldq", ""));
        if reply.status == 200 {
            assert!(reply.body.contains("<span id=\"queue-name\">coldq</span>"));
            break;
        }
        assert_eq!(reply.status, 404, "{}", reply.body);
        assert!(
            Instant::now() < limit,
            "the page of coldq, created after serve started, still answers 404 after 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Found: on the home page and in /metrics from now on.
    let home = http(&addr, &get("/", "")).body;
    assert!(
        home.contains("data-queue=\"coldq\"") && home.contains("data-queue=\"first\""),
        "{home}"
    );
    let metrics = http(&addr, &get("/metrics", "")).body;
    assert!(
        metrics.contains("tickless_jobs{queue=\"coldq\",state=\"ready\"} 1"),
        "{metrics}"
    );
    // A name no queue has still answers 404, saying how a queue comes to be.
    let missing = http(&addr, &get("/queue/nope", ""));
    assert_eq!(missing.status, 404);
    assert!(
        missing
            .body
            .contains("no queue &quot;nope&quot; on this server"),
        "{}",
        missing.body
    );
}
