//! No secret is shown: every kind of error a user can meet is made to happen, on a
//! server that takes a password and a client certificate, and then every field of every
//! event and span, every error (`Display` and `Debug`), every `Debug` and accessor of
//! the options and the queue, and every line the operator's binary prints is searched
//! for the password (the right one and a wrong one a user typed) and for each line of
//! the client keys (ours and another CA's), as text, as bytes and as the key's scalar.

use super::binary;
use super::recorder::Recorder;
use super::{runtime, support, until, Secured, PASSWORD};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tickless_durable::{ConnectOptions, Error, LeaderOptions, Queue, WorkerOptions};
use tokio::sync::mpsc::UnboundedReceiver;

/// A password that is wrong for every user: secret all the same (a user typed it).
const WRONG: &str = "Wr4nGpQ,8zzKx1j";

/// What must never be shown, each with what it is.
struct Secrets(Vec<(String, String)>);

impl Secrets {
    /// The passwords, whole and each piece between commas (a URL cut at a comma shows
    /// one), and for each PEM key: each line, the lines as bytes, and the secret scalar of
    /// the key in hex and as bytes.
    fn new(keys: &[(&str, &[u8])]) -> Secrets {
        let mut needles = Vec::new();
        for (what, password) in [("the password", PASSWORD), ("the wrong password", WRONG)] {
            needles.push((what.to_string(), password.to_string()));
            needles.push((format!("{what} as bytes"), bytes(password.as_bytes())));
            for piece in password.split(',') {
                assert!(
                    piece.len() >= 7,
                    "{piece:?}: too short to be looked for alone"
                );
                needles.push((format!("a piece of {what}"), piece.to_string()));
            }
        }
        for (name, pem) in keys {
            let text = std::str::from_utf8(pem).unwrap();
            let body: Vec<&str> = text.lines().filter(|l| !l.starts_with("-----")).collect();
            for (i, line) in body.iter().enumerate() {
                needles.push((format!("line {} of {name}", i + 2), line.to_string()));
                let as_bytes = format!("line {} of {name} as bytes", i + 2);
                needles.push((as_bytes, bytes(line.as_bytes())));
            }
            let der = STANDARD.decode(body.concat()).unwrap();
            // PKCS#8 of a P-256 key: the secret scalar is the 32-byte OCTET STRING at 34.
            assert_eq!(
                (der.len(), der[34], der[35]),
                (138, 0x04, 0x20),
                "{name}: a P-256 key in PKCS#8"
            );
            let scalar = &der[36..68];
            let hex: String = scalar[..16].iter().map(|b| format!("{b:02x}")).collect();
            needles.push((format!("{name}'s scalar in hex"), hex.to_uppercase()));
            needles.push((format!("{name}'s scalar in hex"), hex));
            needles.push((format!("{name}'s scalar as bytes"), bytes(&scalar[..12])));
        }
        Secrets(needles)
    }

    /// Fails if `text`, shown by `whence`, holds a secret.
    fn check(&self, whence: &str, text: &str) {
        for (what, needle) in &self.0 {
            assert!(
                !text.contains(needle.as_str()),
                "{whence} shows {what}: {text}"
            );
        }
    }
}

/// `bytes` as `Debug` shows a byte slice, without the brackets: `84, 107, 44`.
fn bytes(bytes: &[u8]) -> String {
    let text = format!("{bytes:?}");
    text[1..text.len() - 1].to_string()
}

/// One of `Error`'s predicates.
type Kind = fn(&Error) -> bool;

/// What the library shows (errors, `Debug`, accessors), searched for secrets as it comes.
struct Shown<'a>(&'a Secrets);

impl Shown<'_> {
    fn text(&mut self, whence: &str, text: impl Into<String>) {
        self.0.check(whence, &text.into());
    }

    /// `err` (its `Display` and `Debug`), which `result` must be and of which kind.
    fn error<T>(&mut self, whence: &str, result: Result<T, Error>, kind: Kind) -> Error {
        let Err(err) = result else {
            panic!("{whence}: no error")
        };
        assert!(
            kind(&err),
            "{whence}: not the kind of error expected: {err}"
        );
        self.text(whence, err.to_string());
        self.text(&format!("{whence} (Debug)"), format!("{err:?}"));
        err
    }
}

/// A CA that is not the server's and a client certificate it signed, as files.
struct Foreign {
    dir: PathBuf,
}

impl Foreign {
    fn make() -> Foreign {
        let dir = std::env::temp_dir().join(format!("tickless-secrets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        support::make_ca(&dir, "other");
        support::make_client_certificate(&dir, "other", "client");
        // A key cut in two by a stray character: not base64 any more.
        let key = std::fs::read_to_string(dir.join("client.key")).unwrap();
        std::fs::write(dir.join("broken.key"), key.replacen('\n', "\n#", 2)).unwrap();
        Foreign { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.file(name)).unwrap()
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port nothing listens on: Redis down.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (at most 10 s) for the running worker to hand `id` to its handler.
async fn delivered(rx: &mut UnboundedReceiver<String>, id: &str) {
    let limit = Duration::from_secs(10);
    loop {
        let got = tokio::time::timeout(limit, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("job {id} not delivered within {limit:?}"));
        match got {
            Some(got) if got == id => return,
            Some(_) => {}
            // The worker ended (its sender dropped): recv would answer None at once, for ever.
            None => panic!("the worker ended before job {id} was delivered"),
        }
    }
}

/// A leader and a worker running on `queue`; the worker sends each job's id.
fn run_roles(
    queue: &Queue,
) -> (
    tickless_durable::LeaderHandle,
    tokio::task::JoinHandle<Result<(), Error>>,
    UnboundedReceiver<String>,
) {
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = tokio::spawn(queue.worker(WorkerOptions::default()).run(move |job| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(job.id().to_string());
            Ok::<(), String>(())
        }
    }));
    (leader, worker, rx)
}

/// `call failed` events of `role` whose error holds `what` (case ignored).
fn failures(recorder: &Recorder, role: &str, what: &str) -> usize {
    let what = what.to_lowercase();
    recorder
        .records()
        .iter()
        .filter(|r| r.contains("call failed") && r.contains(&format!("role=\"{role}\"")))
        .filter(|r| r.to_lowercase().contains(&what))
        .count()
}

#[test]
fn no_event_span_error_or_line_of_the_binary_shows_the_password_or_the_client_key() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let mut secured = Secured::start();
    let foreign = Foreign::make();
    let ours = secured.server.client_key_pem();
    let secrets = Secrets::new(&[
        ("the client key", &ours),
        ("the other CA's client key", &foreign.read("client.key")),
    ]);
    let mut shown = Shown(&secrets);
    runtime().block_on(async {
        connect_errors(&secured, &foreign, &mut shown).await;
        running_errors(&mut secured, &recorder, &mut shown).await;
        call_errors(&secured, &mut shown).await;
    });
    binary_lines(&secured, &foreign, &secrets);

    // Each kind of failure reached the subscriber, from both roles where both meet it.
    for (role, what) in [
        ("leader", "refused"),
        ("worker", "refused"),
        ("worker", "authentication"),
        ("worker", "may not"),
        ("leader", "garbage in"),
        ("worker", "garbage in"),
        ("leader", "oom"),
    ] {
        assert!(
            failures(&recorder, role, what) > 0,
            "no `call failed` event of the {role} with {what:?}: {:#?}",
            recorder.records()
        );
    }
    for record in recorder.records() {
        secrets.check("a tracing event or span", &record);
    }
}

/// Every way `connect` (and `queue_names`) can be refused.
async fn connect_errors(secured: &Secured, foreign: &Foreign, shown: &mut Shown<'_>) {
    let server = &secured.server;
    let (ca, cert, key) = (
        server.ca_pem(),
        server.client_cert_pem(),
        server.client_key_pem(),
    );
    let good = secured.options("app");
    let debug = format!("{good:?}");
    shown.text("ConnectOptions' Debug", debug.clone());
    assert!(debug.contains("tls_client_cert: true"), "{debug}");
    let url = |user: &str, password: &str| secured.url(user, password);
    let with_all = |url: &str| {
        ConnectOptions::new(url)
            .tls_ca_pem(ca.clone())
            .tls_client_pem(cert.clone(), key.clone())
    };
    let plain = format!("redis://app:{PASSWORD}@127.0.0.1:{}/", server.port());
    let down = format!("rediss://app:{PASSWORD}@localhost:{}/", dead_port());
    let cases: Vec<(&str, ConnectOptions, Kind)> = vec![
        (
            "a wrong password",
            with_all(&url("app", WRONG)),
            Error::is_connect,
        ),
        (
            "an unknown user",
            with_all(&url("nobody", PASSWORD)),
            Error::is_connect,
        ),
        (
            "another CA",
            with_all(&url("app", PASSWORD)).tls_ca_pem(foreign.read("other.crt")),
            Error::is_connect,
        ),
        (
            "the system's roots",
            ConnectOptions::new(&url("app", PASSWORD)).tls_client_pem(cert.clone(), key.clone()),
            Error::is_connect,
        ),
        (
            "no client certificate",
            ConnectOptions::new(&url("app", PASSWORD)).tls_ca_pem(ca.clone()),
            Error::is_connect,
        ),
        (
            "another CA's client certificate",
            with_all(&url("app", PASSWORD))
                .tls_client_pem(foreign.read("client.crt"), foreign.read("client.key")),
            Error::is_connect,
        ),
        (
            "a broken client key",
            with_all(&url("app", PASSWORD))
                .tls_client_pem(cert.clone(), foreign.read("broken.key")),
            Error::is_invalid_url,
        ),
        (
            "the key in the certificate's place",
            with_all(&url("app", PASSWORD)).tls_client_pem(key.clone(), key.clone()),
            Error::is_invalid_url,
        ),
        (
            "a port that is no number",
            with_all(&format!("rediss://app:{PASSWORD}@localhost:port/")),
            Error::is_invalid_url,
        ),
        (
            "TLS options for redis://",
            with_all(&plain),
            Error::is_invalid_url,
        ),
        (
            "plain TCP to the TLS port",
            ConnectOptions::new(&plain),
            Error::is_connect,
        ),
        ("Redis down", with_all(&down), Error::is_connect),
        (
            "a user with no channel",
            secured.options("nochan"),
            Error::is_permission,
        ),
        (
            "a cluster's seeds naming one server",
            ConnectOptions::cluster([url("app", PASSWORD), down.clone()])
                .tls_ca_pem(ca.clone())
                .tls_client_pem(cert.clone(), key.clone()),
            Error::is_connect,
        ),
    ];
    for (what, options, kind) in cases {
        shown.text(
            &format!("{what}: ConnectOptions' Debug"),
            format!("{options:?}"),
        );
        let result = options.connect("refused").await;
        shown.error(&format!("connect with {what}"), result, kind);
    }
    let names = with_all(&url("app", WRONG)).queue_names().await;
    shown.error(
        "queue_names with a wrong password",
        names,
        Error::is_connect,
    );
    let names = good.queue_names().await.expect("queue names");
    shown.text("queue_names", names.join(" "));
}

/// A leader and a worker running while Redis goes down, comes back without the users
/// (as a restart of a server whose users live in memory does), and gets them back; a
/// user without a grant a claim needs; garbage in a key; Redis out of memory.
async fn running_errors(secured: &mut Secured, recorder: &Recorder, shown: &mut Shown<'_>) {
    let queue = secured.options("app").connect("down").await.unwrap();
    shown.text("Queue's Debug", format!("{queue:?}"));
    shown.text("Queue::url", queue.url());
    let (leader, worker, mut rx) = run_roles(&queue);
    assert!(queue.schedule("before", b"", Duration::ZERO).await.unwrap());
    delivered(&mut rx, "before").await;
    secured.server.kill();
    let limit = Duration::from_secs(10);
    until(
        limit,
        "the leader's and the worker's errors while Redis is down",
        || {
            failures(recorder, "leader", "refused") > 0
                && failures(recorder, "worker", "refused") > 0
        },
    )
    .await;
    secured.server.restart();
    until(
        limit,
        "a worker's error as its user is gone after the restart",
        || failures(recorder, "worker", "authentication") > 0,
    )
    .await;
    secured.add_users();
    // The shared connection answers the failure of its last reconnect once more, and
    // reconnects (a call made while Redis cannot be reached fails at once: calling again
    // is the answer, and safe for a schedule).
    let started = std::time::Instant::now();
    loop {
        match queue.schedule("after", b"", Duration::ZERO).await {
            Ok(added) => break assert!(added),
            Err(err) => {
                assert!(
                    started.elapsed() < limit,
                    "no schedule within {limit:?} of the users' return: {err}"
                );
                shown.text("a schedule as the users come back", err.to_string());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    delivered(&mut rx, "after").await;
    shown.text(
        "LeaderHandle::last_error",
        leader.last_error().unwrap_or_default(),
    );
    worker.abort();
    // Its last round may have failed before the users came back: then `stop` says why.
    if let Err(err) = leader.stop().await {
        shown.text("LeaderHandle::stop", format!("{err} {err:?}"));
    }

    // A user without `+ltrim`: a claim is refused inside its script.
    let narrow = secured.options("narrow").connect("narrow").await.unwrap();
    assert!(narrow.schedule("n", b"", Duration::ZERO).await.unwrap());
    let claim = narrow.worker(WorkerOptions::default()).try_claim(1).await;
    shown.error("a claim without +ltrim", claim, Error::is_permission);
    let (leader, worker, _rx) = run_roles(&narrow);
    until(limit, "the running worker's permission error", || {
        failures(recorder, "worker", "may not") > 0
    })
    .await;
    worker.abort();
    leader.stop().await.unwrap();
    let counters = narrow.counters().await.unwrap();
    shown.text(
        "Counters::last_script_error",
        counters.last_script_error.unwrap_or_default(),
    );

    // Garbage in the queue's `ready`: the worker stops on it, the leader goes on.
    let garbage = secured.options("app").connect("garbage").await.unwrap();
    assert!(garbage.schedule("g", b"", Duration::ZERO).await.unwrap());
    // Due soon: the leader's promotion meets the garbage.
    let soon = Duration::from_millis(300);
    assert!(garbage.schedule("g2", b"", soon).await.unwrap());
    let ready = "tickless:{garbage}:ready";
    assert_eq!(secured.server.cli(&["DEL", ready]).trim(), "1");
    assert_eq!(secured.server.cli(&["SET", ready, "x"]).trim(), "OK");
    let (leader, worker, _rx) = run_roles(&garbage);
    let stopped = tokio::time::timeout(limit, worker)
        .await
        .expect("the worker stops on garbage within 10 s")
        .unwrap();
    shown.error("a worker's run on garbage", stopped, Error::is_garbage);
    until(limit, "the leader's garbage error", || {
        failures(recorder, "leader", "garbage in") > 0
    })
    .await;
    shown.text(
        "LeaderHandle::last_error (garbage)",
        leader.last_error().unwrap_or_default(),
    );
    let stopped = leader.stop().await;
    shown.error("LeaderHandle::stop (garbage)", stopped, Error::is_garbage);
    let job = garbage.schedule("h", b"", Duration::ZERO).await;
    shown.error("a schedule into garbage", job, Error::is_garbage);

    // Out of memory: every write refused, inside the scripts.
    let full = secured.options("app").connect("full").await.unwrap();
    assert_eq!(
        secured
            .server
            .cli(&["CONFIG", "SET", "maxmemory", "1"])
            .trim(),
        "OK"
    );
    let schedule = full.schedule("f", b"", Duration::ZERO).await;
    let err = shown.error("a schedule with Redis full", schedule, Error::is_redis);
    assert!(err.to_string().contains("OOM"), "{err}");
    let leader = full.leader(LeaderOptions::default()).spawn();
    until(limit, "the leader's out-of-memory error", || {
        failures(recorder, "leader", "oom") > 0
    })
    .await;
    let stopped = leader.stop().await;
    shown.error(
        "LeaderHandle::stop (out of memory)",
        stopped,
        Error::is_redis,
    );
    assert_eq!(
        secured
            .server
            .cli(&["CONFIG", "SET", "maxmemory", "0"])
            .trim(),
        "OK"
    );
}

/// The calls' own errors: too few replicas, ids, payloads, names, schedules, a job's
/// record that is not ours.
async fn call_errors(secured: &Secured, shown: &mut Shown<'_>) {
    let options = secured
        .options("app")
        .wait_for_replicas(1, Duration::from_millis(20));
    let queue = options.connect("calls").await.unwrap();
    let wait = queue.schedule("w", b"", Duration::ZERO).await;
    shown.error("a schedule without replicas", wait, Error::is_replication);
    let id = queue.schedule("", b"", Duration::ZERO).await;
    shown.error("an empty id", id, Error::is_invalid_id);
    let big = vec![0u8; tickless_durable::MAX_PAYLOAD_BYTES + 1];
    let payload = queue.schedule("big", &big, Duration::ZERO).await;
    shown.error("a payload too large", payload, Error::is_payload_too_large);
    let name = options.connect("a{b}").await;
    shown.error(
        "a queue name with braces",
        name,
        Error::is_invalid_queue_name,
    );
    let cron = queue.cron("c", "not cron", "UTC", b"").await;
    shown.error("a cron expression", cron, Error::is_invalid_schedule);
    let jobs = "tickless:{calls}:jobs";
    assert_eq!(secured.server.cli(&["HSET", jobs, "bad", "x"]).trim(), "1");
    let job = queue.job("bad").await;
    shown.error("a record that is not ours", job, Error::is_garbage);
}

/// Every command of the binary, as a user runs it with the password in the URL and the
/// TLS files, and failing every way it can: no line it prints shows a secret (checked
/// before its exit code, so that a leak is named even when the command fails too).
fn binary_lines(secured: &Secured, foreign: &Foreign, secrets: &Secrets) {
    let server = &secured.server;
    let url = secured.url("app", PASSWORD);
    let wrong = secured.url("app", WRONG);
    let nochan = secured.url("nochan", PASSWORD);
    let down = format!("rediss://app:{PASSWORD}@localhost:{}/", dead_port());
    let bad_port = format!("rediss://app:{PASSWORD}@localhost:port/");
    let seeds = format!("{url},{down}");
    let path = |p: &Path| p.display().to_string();
    let (ca, cert, key) = (
        path(&server.file("ca.crt")),
        path(&server.file("client.crt")),
        path(&server.file("client.key")),
    );
    let (other_ca, other_cert, other_key, broken) = (
        path(&foreign.file("other.crt")),
        path(&foreign.file("client.crt")),
        path(&foreign.file("client.key")),
        path(&foreign.file("broken.key")),
    );
    let tls = |ca: &str, cert: &str, key: &str| -> Vec<String> {
        ["--ca", ca, "--cert", cert, "--key", key]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let good = tls(&ca, &cert, &key);
    let mut runs: Vec<(Vec<String>, Option<i32>)> = Vec::new();
    let mut add = |args: &[&str], extra: &[String], code: i32| {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(extra.iter().cloned());
        runs.push((all, Some(code)));
    };
    add(&["inspect", &url, "down"], &good, 0);
    add(&["job", &url, "down", "after"], &good, 0);
    add(&["job", &url, "down", "none"], &good, 3);
    add(&["retry-dead", &url, "down", "none"], &good, 3);
    add(&["repair", &url, "down"], &good, 0);
    add(&["inspect", &wrong, "down"], &good, 1);
    add(&["inspect", &nochan, "down"], &good, 1);
    add(&["inspect", &url, "down"], &tls(&other_ca, &cert, &key), 1);
    add(&["inspect", &url, "down"], &["--ca".into(), ca.clone()], 1);
    add(
        &["inspect", &url, "down"],
        &tls(&ca, &other_cert, &other_key),
        1,
    );
    add(&["inspect", &url, "down"], &tls(&ca, &cert, &broken), 1);
    add(&["inspect", &url, "down"], &tls(&ca, &key, &key), 1);
    add(
        &["inspect", &url, "down"],
        &tls(&ca, &cert, "/nonexistent/client.key"),
        1,
    );
    add(&["inspect", &down, "down"], &good, 1);
    add(&["inspect", &bad_port, "down"], &good, 1);
    add(&["inspect", &seeds, "down"], &good, 1);
    add(&["inspect", &url, "garbage"], &good, 1);
    add(&["job", &url, "calls", "bad"], &good, 1);
    add(&["repair", &url, "garbage"], &good, 1);
    add(&["inspect", &url, "down", "--cert", &cert], &[], 2);
    add(&["inspect", &url], &good, 2);
    for (args, code) in runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = binary::run(&args);
        for line in &run.lines {
            secrets.check(&format!("tickless-durable {}", args[0]), line);
        }
        assert_eq!(
            run.code, code,
            "tickless-durable {args:?}: {:#?}",
            run.lines
        );
    }
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    // Named queues (the garbage one would stop it), and none: they are listed first.
    for (url, queue, serving) in [
        (&url, Some("down"), cfg!(feature = "dashboard")),
        (&wrong, Some("down"), false),
        (&wrong, None, false),
    ] {
        let mut args = vec![url.as_str()];
        args.extend(queue);
        args.extend(&good);
        let run = binary::serve(&args);
        for line in &run.lines {
            secrets.check("tickless-durable serve", line);
        }
        let started = run
            .lines
            .first()
            .is_some_and(|l| l.starts_with("dashboard of"));
        assert_eq!(started, serving, "serve: {:#?}", run.lines);
    }
}
