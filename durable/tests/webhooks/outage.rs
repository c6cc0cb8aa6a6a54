//! Redis restarted under the webhook dispatcher: the real redis-server killed (SIGKILL)
//! and started again on its port, loading its append-only file (`appendfsync always`).

use super::{queue, secret, serve, unique, wait_state, Receiver};
use std::time::Duration;
use tickless_test_support as support;

/// Jobs scheduled before the restart are all posted after it, each when due and not
/// before, none lost: `serve`'s dispatcher and leader reconnect (the dispatcher's claim
/// loop tries again a second after an error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_scheduled_before_a_redis_restart_are_all_posted_after_it_none_early() {
    let mut server = support::RedisServer::start();
    let name = unique("hookrestart");
    let queue = queue(&server.url(), &name, 5).await;
    let (text, key) = secret(9);
    let receiver = Receiver::start(vec![key], false).await;
    let hours = 1..=6u64;
    for hour in hours.clone() {
        queue
            .schedule(
                &format!("job:{hour}"),
                b"{}",
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
    // The first hour's job before the restart: the dispatcher works.
    queue
        .advance_manual_clock(Duration::from_secs(3600))
        .await
        .unwrap();
    wait_state(&queue, "job:1", "job:1 acked before the restart", |s| {
        s.is_none()
    })
    .await;

    server.restart();
    // The test's own queue reconnects on a later call, within a bounded number.
    let limit = std::time::Instant::now() + Duration::from_secs(10);
    while queue.stats().await.is_err() {
        assert!(
            std::time::Instant::now() < limit,
            "the test's queue did not reach Redis within 10 s of its restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for hour in hours.clone().skip(1) {
        queue
            .advance_manual_clock(Duration::from_secs(3600 - 1))
            .await
            .unwrap();
        let received = receiver.received();
        assert_eq!(
            received.len() as u64,
            hour - 1,
            "job:{hour} a second early: {received:?}"
        );
        queue
            .advance_manual_clock(Duration::from_secs(1))
            .await
            .unwrap();
        let id = format!("job:{hour}");
        wait_state(&queue, &id, &format!("{id} acked after the restart"), |s| {
            s.is_none()
        })
        .await;
    }
    let ids: Vec<String> = receiver.received().into_iter().map(|r| r.job_id).collect();
    let want: Vec<String> = hours.map(|h| format!("job:{h}")).collect();
    assert_eq!(ids, want, "each job once, in due order");
    let stats = queue.stats().await.unwrap();
    assert_eq!(
        (stats.scheduled, stats.ready, stats.in_flight, stats.dead),
        (0, 0, 0, 0)
    );
    drop(served);
}
