//! The operator's binary run as a process, on what trips a new user: the URL taken from
//! `REDIS_URL` by every command, `queues`, a mistyped queue name, due jobs that no
//! leader will deliver, and a queue's stream outlet set, shown and removed.

use std::process::Command;
use std::time::Duration;
use support::{at, run_to_end, Ended, RedisServer, T0};
use tickless_durable::{LeaderOptions, Queue};
use tickless_test_support as support;

/// How long one run of the binary may take (a refused connection fails at once).
const LIMIT: Duration = Duration::from_secs(30);

/// `tickless-durable args...` with `REDIS_URL` set to `env_url` (unset with `None`), run
/// to its end; the test fails naming the command if it runs past [`LIMIT`].
fn run(args: &[&str], env_url: Option<&str>) -> Ended {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickless-durable"));
    command.args(args);
    match env_url {
        Some(url) => command.env("REDIS_URL", url),
        None => command.env_remove("REDIS_URL"),
    };
    run_to_end(&mut command, LIMIT, &format!("tickless-durable {args:?}"))
}

/// Queue `name` on `server`, with one job due in an hour.
async fn queue_with_a_job(server: &RedisServer, name: &str) -> Queue {
    let queue = Queue::connect(&server.url(), name).await.unwrap();
    queue
        .schedule("job:1", b"", Duration::from_secs(3600))
        .await
        .unwrap();
    queue
}

#[tokio::test]
async fn queues_lists_each_queue_on_a_line() {
    let server = RedisServer::start();
    server.allow_scan().await;
    let url = server.url();
    let empty = run(&["queues", &url], None);
    assert_eq!(empty.code, Some(0), "{}", empty.stderr);
    assert_eq!(empty.stdout, "");
    assert!(
        empty.stderr.contains("no queue on this server yet"),
        "{}",
        empty.stderr
    );
    for name in ["refunds", "orders"] {
        queue_with_a_job(&server, name).await;
    }
    let listed = run(&["queues", &url], None);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert_eq!(listed.stdout, "orders\nrefunds\n");
}

#[tokio::test]
async fn every_command_takes_its_url_from_redis_url_when_given_none() {
    let server = RedisServer::start();
    server.allow_scan().await;
    let url = server.url();
    queue_with_a_job(&server, "orders").await;
    let env = Some(url.as_str());
    for (args, code, said) in [
        (&["queues"][..], 0, "orders\n"),
        (&["inspect", "orders"], 0, "queue \"orders\" at "),
        (&["job", "orders", "job:1"], 0, "job \"job:1\": Scheduled"),
        (
            &["retry-dead", "orders", "job:1"],
            3,
            "no dead job \"job:1\"",
        ),
        (&["retry-dead", "orders", "--all"], 0, "retried 0"),
        (&["repair", "orders"], 0, "0 put back"),
    ] {
        let out = run(args, env);
        assert_eq!(
            out.code,
            Some(code),
            "{args:?}: {}{}",
            out.stdout,
            out.stderr
        );
        assert!(out.stdout.contains(said), "{args:?}: {}", out.stdout);
    }
    // A URL given is used, REDIS_URL or not: nothing listens on port 1.
    let refused = run(&["inspect", "redis://127.0.0.1:1/", "orders"], env);
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    assert!(refused.stderr.contains("127.0.0.1:1"), "{}", refused.stderr);
    // Neither: a usage error that says what is missing.
    let neither = run(&["inspect", "orders"], None);
    assert_eq!(neither.code, Some(2), "{}", neither.stdout);
    assert!(
        neither.stderr.contains("REDIS_URL is not set"),
        "{}",
        neither.stderr
    );
    // --help names REDIS_URL and never shows its value (a password).
    let help = run(
        &["inspect", "--help"],
        Some("redis://app:hunter2@127.0.0.1:1/"),
    );
    assert_eq!(help.code, Some(0), "{}", help.stderr);
    assert!(help.stdout.contains("[env: REDIS_URL]"), "{}", help.stdout);
    assert!(!help.stdout.contains("hunter2"), "{}", help.stdout);
}

#[tokio::test]
async fn inspect_of_a_mistyped_queue_says_no_such_queue_and_lists_those_there() {
    let server = RedisServer::start();
    server.allow_scan().await;
    let url = server.url();
    for name in ["orders", "refunds"] {
        queue_with_a_job(&server, name).await;
    }
    // Before: the counts of an empty queue, and exit 0.
    for args in [
        &["inspect", &url, "ordres"][..],
        &["job", &url, "ordres", "job:1"],
        &["repair", &url, "ordres"],
    ] {
        let out = run(args, None);
        assert_eq!(out.code, Some(3), "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stdout.contains("no queue \"ordres\" on redis")
                && out
                    .stdout
                    .contains("the queues there: \"orders\", \"refunds\""),
            "{args:?}: {}",
            out.stdout
        );
    }
    let found = run(&["inspect", &url, "orders"], None);
    assert_eq!(found.code, Some(0), "{}", found.stderr);
}

#[tokio::test]
async fn inspect_warns_when_jobs_are_due_and_no_leader_runs() {
    let server = RedisServer::start();
    let url = server.url();
    let queue = Queue::connect(&url, "orders").await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    for (id, due) in [("soon", T0 + 10_000), ("later", T0 + 3_600_000)] {
        queue.schedule(id, b"", at(due)).await.unwrap();
    }
    let inspect = || run(&["inspect", &url, "orders"], None);
    let before = inspect();
    assert_eq!(before.code, Some(0), "{}", before.stderr);
    assert!(
        !before.stdout.contains("WARNING"),
        "none due yet: {}",
        before.stdout
    );
    queue
        .advance_manual_clock(Duration::from_secs(20))
        .await
        .unwrap();
    let due = inspect();
    assert_eq!(due.code, Some(0), "{}", due.stderr);
    assert!(
        due.stdout.contains(
            "WARNING: no leader: 1 job is due, and none is delivered until a leader runs"
        ),
        "{}",
        due.stdout
    );
    // A leader (its lease live on the manual clock) moves it to the ready list.
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    let led = inspect();
    assert!(!led.stdout.contains("WARNING"), "{}", led.stdout);
}

#[tokio::test]
async fn stream_outlet_sets_shows_and_removes_a_queues_outlet() {
    let server = RedisServer::start();
    let url = server.url();
    let queue = queue_with_a_job(&server, "alerts").await;
    let shown = run(&["stream-outlet", &url, "alerts"], None);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    assert!(
        shown.stdout.contains("no stream outlet"),
        "{}",
        shown.stdout
    );

    let refused = run(
        &["stream-outlet", &url, "alerts", "--stream", "{orders}:due"],
        None,
    );
    assert_ne!(refused.code, Some(0));
    assert!(refused.stderr.contains("hash tag"), "{}", refused.stderr);
    let refused = run(
        &["stream-outlet", &url, "alerts", "--on", "--max-len", "0"],
        None,
    );
    assert_ne!(refused.code, Some(0));
    assert!(refused.stderr.contains("MAXLEN"), "{}", refused.stderr);

    let set = run(
        &["stream-outlet", &url, "alerts", "--on", "--max-len", "500"],
        None,
    );
    assert_eq!(set.code, Some(0), "{}", set.stderr);
    assert!(
        set.stdout
            .contains("stream outlet tickless:{alerts}:stream (MAXLEN ~ 500)"),
        "{}",
        set.stdout
    );
    queue.schedule("now", b"", Duration::ZERO).await.unwrap();
    let length = server.cli(&["XLEN", "tickless:{alerts}:stream"]);
    assert_eq!(length.trim(), "1", "the job due at once is in the stream");
    let inspected = run(&["inspect", &url, "alerts"], None);
    assert!(
        inspected.stdout.contains("1 jobs streamed"),
        "{}",
        inspected.stdout
    );

    let off = run(&["stream-outlet", &url, "alerts", "--off"], None);
    assert_eq!(off.code, Some(0), "{}", off.stderr);
    assert!(off.stdout.contains("no stream outlet"), "{}", off.stdout);
    assert_eq!(queue.stream_outlet().await.unwrap(), None);
}
