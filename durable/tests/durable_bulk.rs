//! Bulk operations against a real `redis-server`: the dead set read a page at a time,
//! and "retry all dead" a page per script call, past one call's most (10,000).

use tickless_test_support as support;

use support::{at, queue_name, RedisServer, T0};
use tickless_durable::{JobState, Queue};

/// Script calls Redis has run since its stats were reset, however they were sent (but
/// those refused, as an `EVALSHA` of a script not loaded yet).
async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    support::command_stats(&info)
        .iter()
        .filter(|stat| ["eval", "evalsha", "fcall"].contains(&stat.name.as_str()))
        .map(|stat| stat.ran())
        .sum()
}

#[tokio::test]
async fn the_dead_set_is_read_and_retried_a_page_at_a_time() {
    let server = RedisServer::start();
    let name = queue_name("bulk-dead");
    let queue = Queue::connect(&server.url(), &name)
        .await
        .unwrap()
        .with_max_attempts(1);
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let mut conn = server.admin().await;
    let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");

    // 10,001 dead jobs, as a worker's last failed attempt leaves them (lib/jobs.lua's I1,
    // loc 'd'), and one quarantined record (not a job record) is the oldest.
    let n = 10_001;
    let mut pipe = redis::pipe();
    pipe.hset(key("jobs"), "quarantined", "???")
        .zadd(key("dead"), "quarantined", 0)
        .hset(key("errors"), "quarantined", "garbage: quarantined");
    for i in 0..n {
        let id = format!("d{i}");
        pipe.hset(key("jobs"), &id, format!("{T0}|d|1|1|0|p"))
            .zadd(key("dead"), &id, 1 + i)
            .hset(key("errors"), &id, "boom");
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
    assert_eq!(queue.stats().await.unwrap().dead, n as u64 + 1);

    // Pages: at most 10,000 per call, oldest first, from an offset.
    let first = queue.dead(0, 20_000).await.unwrap();
    assert_eq!(first.len(), 10_000, "one page holds at most 10,000");
    assert_eq!(first[0].id, "quarantined");
    assert!(first[0]
        .last_error
        .as_deref()
        .unwrap()
        .contains("quarantined"));
    assert_eq!(first[1].state, JobState::Dead);
    let rest = queue.dead(10_000, 10).await.unwrap();
    assert_eq!(rest.len(), 2);
    let mut seen: Vec<String> = first.iter().chain(&rest).map(|j| j.id.clone()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n + 1, "every dead job on exactly one page");
    assert!(queue.dead(0, 0).await.unwrap().is_empty());

    // Retry all: two script calls for 10,001 jobs, not one per job; the quarantined
    // record stays dead.
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(queue.retry_all_dead().await.unwrap(), n);
    let calls = script_calls(&mut conn).await;
    assert!(calls <= 2, "{calls} script calls to retry {n} dead jobs");
    let stats = queue.stats().await.unwrap();
    assert_eq!((stats.dead, stats.ready), (1, n as u64));
    assert_eq!(queue.job("d0").await.unwrap().unwrap().attempts, 0);
    assert!(queue
        .retry_dead("quarantined")
        .await
        .unwrap_err()
        .is_garbage());
    assert!(
        !queue.retry_dead("d0").await.unwrap(),
        "d0 is no longer dead"
    );

    // The operator's tool: `retry-dead <url> <queue> --all`.
    let _: () = redis::pipe()
        .hset(key("jobs"), "again", format!("{T0}|d|1|1|0|p"))
        .zadd(key("dead"), "again", 1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .args(["retry-dead", &server.url(), &name, "--all"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && text.trim() == "retried 1",
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        queue.stats().await.unwrap().dead,
        1,
        "the quarantined record"
    );
}
