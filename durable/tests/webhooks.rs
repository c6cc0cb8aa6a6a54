//! Push delivery (feature `webhooks`) on real processes: `tickless-durable serve --lead
//! --webhooks-file` against a real redis-server, POSTing to receivers in this process
//! (axum, signatures checked by hand: tests/webhooks/receiver.rs). The queue's manual
//! clock drives due times and backoffs; every wait has a limit that names what it
//! waited for. The reference receivers (and README's) are in webhooks/clients.rs, Redis
//! restarted under the dispatcher in webhooks/outage.rs.

#[path = "webhooks/clients.rs"]
mod clients;
#[path = "webhooks/outage.rs"]
mod outage;
#[path = "webhooks/receiver.rs"]
mod receiver;

use base64::Engine;
use receiver::Receiver;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};
use tickless_durable::hook::webhook_id;
use tickless_durable::{JobState, Queue};
use tickless_test_support as support;

/// A `serve` process, killed when dropped.
struct Served {
    child: Child,
    base: String,
    stderr: std::path::PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scratch(name: &str) -> std::path::PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tickless-webhooks-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `serve <url> <queues> --lead --webhooks-file` with `config` as the file.
fn serve(url: &str, queues: &[&str], config: &str) -> Served {
    serve_with(url, queues, config, true)
}

/// As [`serve`], leading the queues only if `lead`.
fn serve_with(url: &str, queues: &[&str], config: &str, lead: bool) -> Served {
    serve_args(url, queues, config, lead, &[])
}

/// As [`serve_with`], with `extra` arguments; `base` is its address over plain HTTP.
fn serve_args(url: &str, queues: &[&str], config: &str, lead: bool, extra: &[&str]) -> Served {
    let dir = scratch("serve");
    let file = dir.join("webhooks.conf");
    std::fs::write(&file, config).unwrap();
    let stderr = dir.join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .args(["serve", url])
        .args(queues)
        .args(lead.then_some("--lead"))
        .arg("--webhooks-file")
        .arg(&file)
        .args(extra)
        .env("TICKLESS_DASHBOARD_ADDR", "127.0.0.1:0")
        .env_remove("TICKLESS_API_TOKENS")
        .env_remove("TICKLESS_API_TOKENS_FILE")
        .env("RUST_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("run tickless-durable serve");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..3 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        lines.push(line);
    }
    let addr = lines[0]
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in serve's first line {:?}", lines[0]))
        .to_string();
    assert!(lines[2].starts_with("webhooks: "), "{lines:?}");
    std::thread::spawn(move || for _ in stdout.lines() {});
    Served {
        child,
        base: format!("http://{addr}"),
        stderr,
    }
}

/// A fresh secret: its `whsec_` text and its key.
fn secret(byte: u8) -> (String, Vec<u8>) {
    let key = vec![byte; 32];
    let text = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(&key)
    );
    (text, key)
}

fn unique(prefix: &str) -> String {
    support::queue_name(prefix)
}

async fn queue(url: &str, name: &str, attempts: u32) -> Queue {
    let queue = Queue::connect(url, name)
        .await
        .unwrap()
        .with_max_attempts(attempts);
    queue
        .set_manual_clock(Some(
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000),
        ))
        .await
        .unwrap();
    queue
}

/// Waits (10 s at most) until job `id` reaches a state `done` accepts.
async fn wait_state(
    queue: &Queue,
    id: &str,
    what: &str,
    done: impl Fn(Option<JobState>) -> bool,
) -> Option<tickless_durable::JobInfo> {
    wait_info(queue, id, what, |info| done(info.map(|i| i.state))).await
}

/// Waits (10 s at most) until job `id`'s record is as `done` wants it.
async fn wait_info(
    queue: &Queue,
    id: &str,
    what: &str,
    done: impl Fn(Option<&tickless_durable::JobInfo>) -> bool,
) -> Option<tickless_durable::JobInfo> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = queue.job(id).await.unwrap();
        if done(info.as_ref()) {
            return info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited 10 s for {what}: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `GET path`, the body.
async fn get(base: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

/// Every job of a 48-hour schedule (one an hour) reaches the target once, signed, with
/// its id, delivery number and attempt, and none before its hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_of_a_48_hour_schedule_is_posted_once_and_signed() {
    let server = support::RedisServer::start();
    let name = unique("hook48");
    let queue = queue(&server.url(), &name, 5).await;
    let (text, key) = secret(1);
    let receiver = Receiver::start(vec![key], false).await;
    for hour in 1..=48u64 {
        let payload = format!("{{\"hour\":{hour}}}");
        queue
            .schedule(
                &format!("job:{hour}"),
                payload,
                Duration::from_secs(hour * 3600),
            )
            .await
            .unwrap();
    }
    let config = format!(
        "target recv {} secret={text}\nqueue {name} recv\nallow-host 127.0.0.1\nallow-scheme http\nallow-net 127.0.0.1/32\n",
        receiver.url
    );
    let served = serve(&server.url(), &[&name], &config);
    for hour in 1..=48u64 {
        queue
            .advance_manual_clock(Duration::from_secs(3600))
            .await
            .unwrap();
        let id = format!("job:{hour}");
        wait_state(&queue, &id, &format!("{id} acked"), |s| s.is_none()).await;
        let received = receiver.received();
        assert_eq!(
            received.len(),
            hour as usize,
            "one request per hour come due"
        );
        let last = received.last().unwrap();
        assert_eq!(last.job_id, id, "hour {hour}'s job, not an early one");
        assert_eq!(last.webhook_id, webhook_id(&name, &id));
        assert_eq!(last.body, format!("{{\"hour\":{hour}}}").into_bytes());
        assert_eq!((last.attempt, last.verified.as_slice()), (1, &[true][..]));
        assert!(last.delivery >= 1);
    }
    let ids: std::collections::BTreeSet<_> = receiver
        .received()
        .iter()
        .map(|r| r.webhook_id.clone())
        .collect();
    assert_eq!(ids.len(), 48, "48 distinct webhook-ids");
    let metrics = get(&served.base, "/metrics").await;
    assert!(
        metrics.contains("tickless_webhook_deliveries_total{target=\"recv\",outcome=\"delivered\",status=\"204\"} 48"),
        "{metrics}"
    );
    assert!(metrics.contains("tickless_webhook_latency_seconds_count{target=\"recv\"} 48"));
    // The queue's delivery mode: the target by its name (not its URL), no retry.
    let route = format!("tickless_webhook_queue_target{{queue=\"{name}\",target=\"recv\"}} 1");
    assert!(metrics.contains(&route), "no {route} in {metrics}");
    assert!(
        !metrics.contains("tickless_webhook_retries_total{"),
        "{metrics}"
    );
    // The secret is nowhere: not in /metrics, the dashboard's pages, serve's output.
    let pages = [
        metrics,
        get(&served.base, "/").await,
        get(&served.base, &format!("/queue/{name}")).await,
    ];
    let secret_b64 = text.trim_start_matches("whsec_");
    for page in &pages {
        assert!(!page.contains(secret_b64), "a secret on a page");
        assert!(!page.contains(&receiver.url), "the target's URL on a page");
    }
    let stderr = std::fs::read_to_string(&served.stderr).unwrap();
    assert!(!stderr.contains(secret_b64), "a secret in serve's output");
}

/// A target down (nothing listening), then up but failing (503), then well: every job
/// is delivered, each retry due exactly its backoff after the failure (no jitter here)
/// and none posted before; the errors say why, and so do `/metrics` and the queue's page
/// (failures by status code or connection error, no secret).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_down_then_back_gets_every_job_with_retries_spaced_by_the_backoff() {
    let server = support::RedisServer::start();
    let name = unique("hookdown");
    let queue = queue(&server.url(), &name, 5).await;
    let (text, key) = secret(2);
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // free again once this listener is dropped
    let ids = ["order:1", "order:2", "order:3"];
    for id in ids {
        queue
            .schedule(id, b"{}", Duration::from_secs(10))
            .await
            .unwrap();
    }
    let config = format!(
        "target recv http://{addr}/hook secret={text} backoff-ms=60000 jitter=0\nqueue {name} recv\nallow-host 127.0.0.1\nallow-scheme http\nallow-net 127.0.0.1/32\n"
    );
    let served = serve(&server.url(), &[&name], &config);
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    let retry = |attempts: u32| {
        move |info: Option<&tickless_durable::JobInfo>| {
            info.is_some_and(|i| i.state == JobState::Scheduled && i.attempts == attempts)
        }
    };
    queue
        .advance_manual_clock(Duration::from_secs(10))
        .await
        .unwrap();
    // Attempt 1: nothing listens. Due again 60 s after the failure, at 70 s.
    for id in ids {
        let info = wait_info(&queue, id, "the first retry scheduled", retry(1))
            .await
            .unwrap();
        assert_eq!(info.due, start + Duration::from_secs(70), "{id}");
        assert!(
            info.last_error
                .as_deref()
                .unwrap()
                .contains("cannot reach webhook target recv"),
            "{info:?}"
        );
    }
    let receiver = Receiver::start_at(&addr.to_string(), vec![key], false).await;
    receiver.answer(&[503, 503, 503]);
    queue
        .advance_manual_clock(Duration::from_secs(59))
        .await
        .unwrap();
    for id in ids {
        let info = queue.job(id).await.unwrap().unwrap();
        assert_eq!(
            (info.state, info.attempts),
            (JobState::Scheduled, 1),
            "{id} early"
        );
    }
    // Attempt 2 at 70 s: 503. Doubled: due again at 190 s.
    queue
        .advance_manual_clock(Duration::from_secs(1))
        .await
        .unwrap();
    for id in ids {
        let info = wait_info(&queue, id, "the second retry scheduled", retry(2))
            .await
            .unwrap();
        assert_eq!(info.due, start + Duration::from_secs(190), "{id}");
        assert!(
            info.last_error.as_deref().unwrap().contains("503"),
            "{info:?}"
        );
    }
    queue
        .advance_manual_clock(Duration::from_secs(119))
        .await
        .unwrap();
    assert_eq!(receiver.received().len(), 3, "a retry before its backoff");
    queue
        .advance_manual_clock(Duration::from_secs(1))
        .await
        .unwrap();
    for id in ids {
        wait_state(&queue, id, "every job acked", |s| s.is_none()).await;
        let posts: Vec<_> = receiver
            .received()
            .into_iter()
            .filter(|r| r.job_id == id)
            .collect();
        assert_eq!(
            posts.iter().map(|r| r.attempt).collect::<Vec<_>>(),
            [2, 3],
            "{id}"
        );
        assert_eq!(
            posts[0].webhook_id, posts[1].webhook_id,
            "one webhook-id for every attempt"
        );
        assert!(posts[0].delivery < posts[1].delivery);
    }
    // /metrics: each request by what became of it, and the retries (attempts 2 and 3).
    let metrics = get(&served.base, "/metrics").await;
    for line in [
        "tickless_webhook_deliveries_total{target=\"recv\",outcome=\"connect_error\",status=\"0\"} 3",
        "tickless_webhook_deliveries_total{target=\"recv\",outcome=\"failed_status\",status=\"503\"} 3",
        "tickless_webhook_deliveries_total{target=\"recv\",outcome=\"delivered\",status=\"204\"} 3",
        "tickless_webhook_retries_total{target=\"recv\"} 6",
    ] {
        assert!(metrics.contains(line), "no {line} in {metrics}");
    }
    // The queue's page: the target by name and origin, the last 15 minutes' requests
    // by what came of them, the latest error; never the secret or the URL's path.
    let page = get(&served.base, &format!("/queue/{name}")).await;
    for text in [
        "webhook target <b>recv</b>".to_string(),
        format!("<code>http://{addr}</code>"),
        "id=\"webhook-delivered\">3<".into(),
        "id=\"webhook-failed\">6<".into(),
        "data-failure=\"503\"><td>503</td><td class=\"n\">3<".into(),
        "data-failure=\"connection error\"><td>connection error</td><td class=\"n\">3<".into(),
        "webhook target recv answered 503 Service Unavailable".into(),
    ] {
        assert!(page.contains(&text), "no {text} in {page}");
    }
    assert!(
        !page.contains(text.trim_start_matches("whsec_")),
        "a secret on the page"
    );
    assert!(
        !page.contains(&format!("{addr}/hook")),
        "the target's path on the page"
    );
}

/// 410 Gone sends the job to the dead set at once, with the status and the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_sends_the_job_to_the_dead_set_at_once() {
    let server = support::RedisServer::start();
    let name = unique("hookgone");
    let queue = queue(&server.url(), &name, 5).await;
    let (text, key) = secret(3);
    let receiver = Receiver::start(vec![key], false).await;
    receiver.answer(&[410]);
    queue
        .schedule("sub:1", b"{}", Duration::ZERO)
        .await
        .unwrap();
    let config = format!(
        "target recv {} secret={text}\nqueue {name} recv\nallow-host 127.0.0.1\nallow-scheme http\nallow-net 127.0.0.1/32\n",
        receiver.url
    );
    let _served = serve(&server.url(), &[&name], &config);
    let info = wait_state(&queue, "sub:1", "the job dead", |s| {
        s == Some(JobState::Dead)
    })
    .await
    .unwrap();
    assert_eq!(info.attempts, 1);
    assert!(
        info.last_error.as_deref().unwrap().contains("410 Gone"),
        "{info:?}"
    );
    assert_eq!(receiver.received().len(), 1);
}

/// A slow target never has more requests in flight than its limit, and a target beside
/// it, fed by another queue of the same `serve`, is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_target_keeps_its_concurrency_limit_and_holds_up_no_other() {
    let server = support::RedisServer::start();
    let (slow_name, fast_name) = (unique("hookslow"), unique("hookfast"));
    let slow_queue = queue(&server.url(), &slow_name, 5).await;
    let fast_queue = queue(&server.url(), &fast_name, 5).await;
    let (text, key) = secret(4);
    let slow = Receiver::start(vec![key.clone()], true).await;
    let fast = Receiver::start(vec![key], false).await;
    for i in 0..6 {
        slow_queue
            .schedule(&format!("s{i}"), b"{}", Duration::ZERO)
            .await
            .unwrap();
        fast_queue
            .schedule(&format!("f{i}"), b"{}", Duration::ZERO)
            .await
            .unwrap();
    }
    let config = format!(
        "target slow {} secret={text} concurrency=2 timeout-ms=60000\ntarget fast {} secret={text}\nqueue {slow_name} slow\nqueue {fast_name} fast\nallow-host 127.0.0.1\nallow-scheme http\nallow-net 127.0.0.1/32\n",
        slow.url, fast.url
    );
    let _served = serve(&server.url(), &[&slow_name, &fast_name], &config);
    slow.wait_for(2, "two requests held by the slow target")
        .await;
    fast.wait_for(
        6,
        "the fast target's six jobs, while the slow one holds two",
    )
    .await;
    assert_eq!(
        slow.received().len(),
        2,
        "a third request went out past the limit"
    );
    let hold = slow.hold.clone().unwrap();
    for done in 3..=6 {
        hold.add_permits(1);
        slow.wait_for(done, "the next request once one ended").await;
        assert!(slow.in_flight().1 <= 2);
    }
    hold.add_permits(6);
    for i in 0..6 {
        wait_state(&slow_queue, &format!("s{i}"), "slow jobs acked", |s| {
            s.is_none()
        })
        .await;
    }
    assert_eq!(slow.in_flight().1, 2, "the most in flight at once");
}

/// What the guard refuses is never sent: a loopback literal, a name resolving to
/// loopback, a private address (none of them allowed by `allow-net`), a host not on the
/// allow-list, and a redirect to another host (allowed or not). Each job is dead after
/// its one attempt with the reason, and the receiver saw no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_guard_refuses_are_never_sent() {
    let server = support::RedisServer::start();
    let (text, key) = secret(8);
    let receiver = Receiver::start(vec![key.clone()], false).await;
    let port = receiver
        .url
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let cases = [
        (
            "literal",
            format!("http://127.0.0.1:{port}/hook"),
            "127.0.0.1 is a loopback address",
        ),
        (
            "named",
            format!("http://localhost:{port}/hook"),
            "refused: localhost resolves only to addresses not allowed",
        ),
        (
            "private",
            "http://10.255.255.1/hook".to_string(),
            "10.255.255.1 is a private address",
        ),
        (
            "unlisted",
            "https://hooks.example.invalid/hook".to_string(),
            "not on the allow-list",
        ),
    ];
    let mut config = "allow-host 127.0.0.1 localhost 10.255.255.1\nallow-scheme http\n".to_string();
    let mut names = Vec::new();
    for (case, url, _) in &cases {
        let name = support::queue_name(&format!("ssrf{case}"));
        config += &format!("target {case} {url} secret={text}\nqueue {name} {case}\n");
        queue(&server.url(), &name, 1)
            .await
            .schedule("j", b"{}", Duration::ZERO)
            .await
            .unwrap();
        names.push(name);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let served = serve(&server.url(), &refs, &config);
    for ((case, _, why), name) in cases.iter().zip(&names) {
        let queue = Queue::connect(&server.url(), name).await.unwrap();
        let info = wait_state(&queue, "j", &format!("the {case} target's job dead"), |s| {
            s == Some(JobState::Dead)
        })
        .await
        .unwrap();
        let error = info.last_error.unwrap();
        assert!(error.contains(why), "{case}: {error}");
        assert!(!error.contains(text.trim_start_matches("whsec_")));
    }
    assert_eq!(receiver.received().len(), 0, "a refused request was sent");
    let metrics = get(&served.base, "/metrics").await;
    assert!(
        metrics.contains("target=\"literal\",outcome=\"refused\",status=\"0\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("target=\"named\",outcome=\"connect_error\",status=\"0\"} 1"),
        "{metrics}"
    );
    drop(served);

    // Loopback allowed: a redirect to another host is not followed.
    let redirecting = Receiver::start(vec![key], false).await;
    redirecting.redirect(&format!("http://localhost:{port}/hook"));
    let name = support::queue_name("ssrfredirect");
    let queue = queue(&server.url(), &name, 1).await;
    queue.schedule("j", b"{}", Duration::ZERO).await.unwrap();
    let config = format!(
        "target redirecting {} secret={text}\nqueue {name} redirecting\nallow-host 127.0.0.1 localhost\nallow-scheme http\nallow-net 127.0.0.1/32 ::1/128\n",
        redirecting.url
    );
    let _served = serve(&server.url(), &[&name], &config);
    let info = wait_state(&queue, "j", "the redirected job dead", |s| {
        s == Some(JobState::Dead)
    })
    .await
    .unwrap();
    let error = info.last_error.unwrap();
    assert!(
        error.contains("307") && error.contains("redirects are not followed"),
        "{error}"
    );
    assert_eq!(redirecting.received().len(), 1);
    assert_eq!(receiver.received().len(), 0, "the redirect was followed");
}

/// A fresh queue with five jobs due now (`k0`..`k4`), a receiver holding its requests
/// until given permits, and the webhooks file routing the queue to it, `concurrency=2`
/// and `settings` more: its name, the receiver, the file's text.
async fn five_jobs_to_a_holding_receiver(
    url: &str,
    prefix: &str,
    settings: &str,
) -> (Queue, String, Receiver, String) {
    let name = unique(prefix);
    let queue = queue(url, &name, 5).await;
    let (text, key) = secret(9);
    let receiver = Receiver::start(vec![key], true).await;
    for i in 0..5 {
        queue
            .schedule(&format!("k{i}"), b"{}", Duration::ZERO)
            .await
            .unwrap();
    }
    let config = format!(
        "target recv {} secret={text} concurrency=2{settings}\nqueue {name} recv\nallow-host 127.0.0.1\nallow-scheme http\nallow-net 127.0.0.1/32\n",
        receiver.url
    );
    (queue, name, receiver, config)
}

/// `serve` killed with SIGKILL while requests are in flight: a new `serve` delivers
/// every job; only those in flight are posted again, with the same `webhook-id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_mid_dispatch_loses_no_job_and_repeats_carry_the_same_id() {
    let server = support::RedisServer::start();
    let (queue, name, receiver, config) =
        five_jobs_to_a_holding_receiver(&server.url(), "hookkill", " timeout-ms=1000").await;
    // The leader runs here, so that only the dispatcher dies (leaders' takeovers have
    // tests of their own: durable_crash).
    let _leader = queue
        .leader(tickless_durable::LeaderOptions::default())
        .spawn();
    let mut served = serve_with(&server.url(), &[&name], &config, false);
    let held = receiver.wait_for(2, "two requests in flight").await;
    served.child.kill().unwrap(); // SIGKILL
    served.child.wait().unwrap();
    receiver.hold.clone().unwrap().add_permits(1000);
    let _served = serve_with(&server.url(), &[&name], &config, false);
    for i in 0..5 {
        let id = format!("k{i}");
        if !held.iter().any(|r| r.job_id == id) {
            wait_state(&queue, &id, "the jobs not in flight acked", |s| s.is_none()).await;
        }
    }
    // The killed process's leases end on the queue's clock (timeout + 30 s).
    queue
        .advance_manual_clock(Duration::from_secs(32))
        .await
        .unwrap();
    for i in 0..5 {
        wait_state(&queue, &format!("k{i}"), "every job acked", |s| s.is_none()).await;
    }
    let received = receiver.received();
    assert_eq!(received.len(), 7, "five jobs, two of them again");
    for first in &held {
        let again: Vec<_> = received
            .iter()
            .filter(|r| r.job_id == first.job_id)
            .collect();
        assert_eq!(again.len(), 2, "{} posted again", first.job_id);
        assert_eq!(again[1].webhook_id, first.webhook_id);
        assert!(again[1].delivery > first.delivery);
    }
}

/// `serve` stopped by SIGTERM (a deploy) while requests are in flight: it claims nothing
/// more, lets those requests end and acks them, steps down as leader, and exits 0; the
/// next `serve` delivers the rest. Unlike a kill, no job is posted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stopped_by_sigterm_acks_its_requests_in_flight_and_steps_down() {
    let server = support::RedisServer::start();
    let (queue, name, receiver, config) =
        five_jobs_to_a_holding_receiver(&server.url(), "hookterm", "").await;
    let mut served = serve(&server.url(), &[&name], &config);
    let held = receiver.wait_for(2, "two requests in flight").await;
    assert!(queue.stats().await.unwrap().leader.is_some(), "serve leads");
    let pid = served.child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success(), "kill -TERM {pid}");
    // Claims have ended once serve says it is stopping: only then are the requests let go.
    let limit = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&served.stderr)
        .unwrap()
        .contains("stopping on SIGTERM")
    {
        assert!(
            std::time::Instant::now() < limit,
            "waited 10 s for serve to say it is stopping ({:?}); stderr: {}",
            served.child.try_wait(),
            std::fs::read_to_string(&served.stderr).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    receiver.hold.clone().unwrap().add_permits(1000);
    // Blocking this worker: the receiver answers on the runtime's other one.
    let status = tokio::task::block_in_place(|| {
        support::wait_exit(
            &mut served.child,
            Duration::from_secs(20),
            "serve after SIGTERM",
        )
    });
    let said = std::fs::read_to_string(&served.stderr).unwrap();
    assert!(status.success(), "{status:?}; stderr: {said}");
    for first in &held {
        let state = queue.job(&first.job_id).await.unwrap().map(|i| i.state);
        assert_eq!(state, None, "{} acked before serve exited", first.job_id);
    }
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.leader, None, "the leader stepped down");
    assert_eq!(stats.in_flight, 0, "nothing left claimed");
    assert_eq!(receiver.received().len(), 2, "no claim after the signal");
    let _served = serve(&server.url(), &[&name], &config);
    for i in 0..5 {
        wait_state(&queue, &format!("k{i}"), "every job acked", |s| s.is_none()).await;
    }
    let mut ids: Vec<String> = receiver.received().into_iter().map(|r| r.job_id).collect();
    ids.sort();
    assert_eq!(ids, ["k0", "k1", "k2", "k3", "k4"], "each job posted once");
}

/// A target's `rate` holds: past the limiter's burst (one second's worth), requests are
/// spaced at 1/rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targets_rate_limit_spaces_requests_past_its_burst() {
    let server = support::RedisServer::start();
    let name = unique("hookrate");
    let queue = queue(&server.url(), &name, 5).await;
    let (text, key) = secret(10);
    let receiver = Receiver::start(vec![key], false).await;
    for i in 0..30 {
        queue
            .schedule(&format!("r{i}"), b"{}", Duration::ZERO)
            .await
            .unwrap();
    }
    let config = format!(
        "target recv {} secret={text} rate=20 concurrency=30\nqueue {name} recv\nallow-host 127.0.0.1\nallow-scheme http\nallow-net 127.0.0.1/32\n",
        receiver.url
    );
    let _served = serve(&server.url(), &[&name], &config);
    let received = receiver.wait_for(30, "thirty requests").await;
    // 20 at once, then 10 more 50 ms apart: the last is sent 500 ms after the first
    // (which may come late, on a new connection); unlimited, all 30 come within tens of
    // milliseconds.
    let spread = received[29].at - received[0].at;
    assert!(spread >= Duration::from_millis(400), "{spread:?}");
    let burst = received[19].at - received[0].at;
    assert!(
        burst < spread / 2,
        "the first 20 came at once: {burst:?} of {spread:?}"
    );
}

/// HTTPS targets are verified: against `ca-file`'s CA the request goes through (the
/// target, a `serve` with a certificate from that CA, answers 404), against the
/// system's roots the same target is refused for its certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_targets_are_verified_against_the_ca_file_or_the_systems_roots() {
    let server = support::RedisServer::start();
    let dir = scratch("tls");
    support::make_ca(&dir, "ca");
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    let request = [
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=localhost",
    ];
    let sign = [
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext",
        "-out",
        "leaf.crt",
    ];
    for args in [&request[..], &sign[..]] {
        let made = support::run_to_end(
            Command::new("openssl").args(args).current_dir(&dir),
            Duration::from_secs(30),
            "openssl",
        );
        assert_eq!(made.code, Some(0), "{}", made.stderr);
    }
    let (cert, key) = (dir.join("leaf.crt"), dir.join("leaf.key"));
    let target = serve_args(
        &server.url(),
        &[],
        "allow-host none\n",
        false,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let port = target.base.rsplit(':').next().unwrap().to_string();
    let (text, _) = secret(11);
    for (case, ca, says) in [
        (
            "ca",
            format!("ca-file {}\n", dir.join("ca.crt").display()),
            "answered 404",
        ),
        ("roots", String::new(), "certificate"),
    ] {
        let name = support::queue_name(&format!("tls{case}"));
        let queue = queue(&server.url(), &name, 1).await;
        queue.schedule("j", b"{}", Duration::ZERO).await.unwrap();
        let config = format!(
            "target t https://localhost:{port}/hook secret={text}\nqueue {name} t\nallow-host localhost\nallow-net 127.0.0.1/32 ::1/128\n{ca}"
        );
        let _served = serve(&server.url(), &[&name], &config);
        let info = wait_state(&queue, "j", &format!("the {case} job dead"), |s| {
            s == Some(JobState::Dead)
        })
        .await
        .unwrap();
        let error = info.last_error.unwrap();
        assert!(error.contains(says), "{case}: {error}");
    }
}
