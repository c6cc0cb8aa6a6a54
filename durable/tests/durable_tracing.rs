//! With the `tracing` feature, a subscriber sees the durable queue's events (schedule,
//! leadership, promotion, delivery and ack, failure) and each handler runs in a `job`
//! span; and no secret reaches a subscriber, an error or the operator's binary. A
//! minimal subscriber of the tests' own records every field (`durable_tracing/recorder.rs`).
//!
//! Every queue here connects as the way a careful deployment does: TLS only, a password
//! in the URL, and a client certificate (mutual TLS: the server runs with
//! `--tls-auth-clients yes`). `durable_tracing/secrets.rs` then makes every kind of error
//! a user can meet happen and reads everything that was shown for the password and the
//! client key.

pub use tickless_test_support as support;

#[path = "durable_tracing/binary.rs"]
mod binary;
#[path = "durable_tracing/recorder.rs"]
mod recorder;
#[path = "durable_tracing/secrets.rs"]
mod secrets;

use recorder::Recorder;
use std::time::{Duration, Instant, SystemTime};
use support::{readme_acl, RedisServer};
use tickless_durable::{ConnectOptions, LeaderOptions, WorkerOptions};

/// The password of the tests' users: with a comma (a URL's user part takes one as it is;
/// the binary's seed list is comma-separated) between two pieces long enough to be
/// looked for alone, and nothing a URL would escape.
pub const PASSWORD: &str = "Tk9vQ2x,Lm7pWz4";

/// A server that speaks only TLS and asks every client for its certificate, with users
/// whose password is [`PASSWORD`].
pub struct Secured {
    pub server: RedisServer,
}

impl Secured {
    /// The server, with user `app` (README's grants and `+wait +scan`), `narrow` (the same
    /// without `+ltrim`, which a claim needs) and `nochan` (no channel: `connect` turns it
    /// away).
    pub fn start() -> Secured {
        let secured = Secured {
            server: RedisServer::start_mutual_tls(&[]),
        };
        secured.add_users();
        secured
    }

    /// (Again, after a restart: users made with `ACL SETUSER` live in memory only.)
    pub fn add_users(&self) {
        for (user, drop) in [
            ("app", &[][..]),
            ("narrow", &["+ltrim"][..]),
            ("nochan", &["&tickless:*"][..]),
        ] {
            let mut rules: Vec<String> = readme_acl()
                .into_iter()
                .filter(|rule| !rule.starts_with('>') && !drop.contains(&rule.as_str()))
                .collect();
            rules.extend([format!(">{PASSWORD}"), "+wait".into(), "+scan".into()]);
            let mut args = vec!["ACL", "SETUSER", user];
            args.extend(rules.iter().map(String::as_str));
            assert_eq!(self.server.cli(&args).trim(), "OK", "ACL SETUSER {user}");
        }
    }

    /// `rediss://<user>:<password>@localhost:<port>/`.
    pub fn url(&self, user: &str, password: &str) -> String {
        self.server.url_as(user, password)
    }

    /// How `user` connects: its password, the server's CA, the client certificate.
    pub fn options(&self, user: &str) -> ConnectOptions {
        ConnectOptions::new(&self.url(user, PASSWORD))
            .tls_ca_pem(self.server.ca_pem())
            .tls_client_pem(self.server.client_cert_pem(), self.server.client_key_pem())
    }
}

/// Waits until `done` holds, at most `limit`, naming `what` it waited for if it never does.
pub async fn until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "waited {limit:?} for {what}, in vain"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A runtime on this thread, so that the subscriber set for this thread sees every task.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn subscribers_see_schedule_leadership_promotion_delivery_and_failure() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let secured = Secured::start();
    runtime().block_on(async {
        let queue = secured.options("app").connect("traced").await.unwrap();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        queue.set_manual_clock(Some(t0)).await.unwrap();
        queue
            .schedule("a", b"x", t0 + Duration::from_secs(2))
            .await
            .unwrap();
        queue
            .with_max_attempts(1)
            .schedule("b", b"x", t0)
            .await
            .unwrap();
        let mut leader = queue.leader(LeaderOptions::default());
        leader.step().await.unwrap();
        queue
            .advance_manual_clock(Duration::from_secs(2))
            .await
            .unwrap();
        leader.step().await.unwrap();
        let worker = queue.worker(WorkerOptions::default());
        let jobs = worker.try_claim(2).await.unwrap();
        let b = jobs.iter().find(|j| j.id() == "b").unwrap();
        worker.fail(b, "no").await.unwrap();
        queue.schedule("c", b"x", t0).await.unwrap();
        // A handler's own event, inside the `job` span.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let run = tokio::spawn(queue.worker(WorkerOptions::default()).run(move |job| {
            let tx = tx.clone();
            async move {
                tracing::info!("handling");
                let _ = tx.send(job.id().to_string());
                Ok::<(), std::io::Error>(())
            }
        }));
        let limit = Duration::from_secs(10);
        let delivered = tokio::time::timeout(limit, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("job c not delivered to the running worker in {limit:?}"));
        assert_eq!(delivered.as_deref(), Some("c"));
        run.abort();
    });
    let seen = recorder.messages();
    for want in [
        "schedule",
        "acquired",
        "promote",
        "ack and deliver",
        "failed",
        "job/handling",
    ] {
        assert!(seen.iter().any(|s| s == want), "no {want:?} in {seen:?}");
    }
    // The span's own fields, recorded.
    let records = recorder.records();
    assert!(
        records
            .iter()
            .any(|r| r.starts_with("span tickless_durable INFO job")
                && r.contains("id=\"c\"")
                && r.contains("attempt=1")),
        "{records:#?}"
    );
}
