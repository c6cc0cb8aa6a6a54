//! What a queue costs Redis: an idle one its lease renewals and its candidates' looks,
//! at the pace the lease sets; a running one, once idle, nothing at all.

use super::{queue_name, support, RedisServer};
use std::time::{Duration, SystemTime};
use tickless_durable::{LeaderOptions, Queue, When, WorkerOptions};

/// Calls served so far, by command (`INFO commandstats`), leaving out `INFO` itself.
async fn calls_by_command(
    conn: &mut redis::aio::MultiplexedConnection,
) -> std::collections::BTreeMap<String, u64> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    support::command_stats(&text)
        .into_iter()
        .filter(|stat| stat.name != "info")
        .map(|stat| (stat.name, stat.calls))
        .collect()
}

/// The lease's `expires` as each renewal of `meta` wrote it, read from Redis's `MONITOR`
/// (the commands a script runs are shown too, `[0 lua] "HSET" "<meta>" "expires" ...`):
/// a task that collects them until aborted.
async fn watch_renewals(
    server: &RedisServer,
    meta: String,
) -> (
    std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    tokio::task::JoinHandle<()>,
) {
    use futures::StreamExt;
    let monitor = redis::Client::open(server.admin_url())
        .unwrap()
        .get_async_monitor()
        .await
        .expect("MONITOR");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let task = tokio::spawn(async move {
        let mut lines = monitor.into_on_message::<String>();
        while let Some(line) = lines.next().await {
            // The quoted arguments: every other piece between quotes.
            let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
            if let ["HSET" | "hset", key, "expires", expires, ..] = args[..] {
                if key == meta {
                    sink.lock().unwrap().push(expires.parse().unwrap());
                }
            }
        }
    });
    (seen, task)
}

/// An idle queue costs its lease renewals and its candidates' looks, and nothing else:
/// with a 400 ms idle lease, the leader renews every 200 ms and the candidate looks each
/// time the lease it saw would have ended. Each renewal is timed by the lease end it
/// writes (`now + lease` on Redis's clock), so its pace is checked, not only a count.
#[test]
fn an_idle_queue_sends_only_its_lease_renewals_and_candidate_looks() {
    support::multi_thread().block_on(async {
        const HALF_LEASE_MS: u64 = 200;
        const WINDOW_MS: u64 = 3_000;
        // How late a renewal may come, at the median, after half the lease: the reply's
        // round trip and the timer's lateness. A renewal at 2/3 of the lease (67 ms
        // late) must not pass.
        const LATE_MEDIAN_MS: u64 = 30;
        let server = RedisServer::start();
        let name = queue_name("idle");
        let queue = Queue::connect(&server.url(), &name).await.unwrap();
        queue
            .schedule("far", b"", Duration::from_secs(3600))
            .await
            .unwrap();
        let options = || {
            let mut options = LeaderOptions::default();
            options.busy_lease = Duration::from_millis(100);
            options.idle_lease = Duration::from_millis(2 * HALF_LEASE_MS);
            options
        };
        let leader = queue.leader(options()).spawn();
        let candidate = queue.leader(options()).spawn();
        let worker = tokio::spawn(
            queue
                .worker(WorkerOptions::default())
                .run(|_| async { Ok::<(), std::io::Error>(()) }),
        );
        // Settled: elected, the lease grown to its idle length, everyone waiting.
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let mut admin = server.admin().await;
        let (renewed, watching) =
            watch_renewals(&server, format!("tickless:{{{name}}}:meta")).await;
        let before = calls_by_command(&mut admin).await;
        tokio::time::sleep(Duration::from_millis(WINDOW_MS)).await;
        let after = calls_by_command(&mut admin).await;
        watching.abort();
        let delta: std::collections::BTreeMap<&str, u64> = after
            .iter()
            .map(|(name, calls)| {
                (
                    name.as_str(),
                    calls - before.get(name).copied().unwrap_or(0),
                )
            })
            .filter(|&(_, calls)| calls > 0)
            .collect();
        // One script call per renewal and per look. A renewal comes half a lease after the
        // previous one's reply: every 200 ms plus a round trip and the timer's lateness (up
        // to 100 ms on a loaded 2-core machine running the whole suite), so 10 to 15 in the
        // window, give or take the one at each end, and never more. A look comes when the
        // lease the candidate last saw ends: 400 ms after the renewal it saw, so every 200
        // ms if that look lands just after a renewal, every 400 ms if just before, plus the
        // same lateness: 5 to 16 looks.
        // Inside the scripts (commandstats counts a script's own calls too): one `TIME`
        // and one `HMGET` of the lease each, one `HSET` per renewal. Nothing else: no
        // polling, no `PING`.
        let per_role = WINDOW_MS / HALF_LEASE_MS;
        let calls = |name: &str| delta.get(name).copied().unwrap_or(0);
        let scripts = calls("evalsha");
        let renewals = calls("hset");
        assert!(
            delta
                .keys()
                .all(|name| ["evalsha", "time", "hmget", "hset"].contains(name)),
            "an idle queue sent other commands: {delta:?}"
        );
        assert!(
            (per_role * 2 / 3 - 1..=per_role + 1).contains(&renewals),
            "{renewals} renewals in {WINDOW_MS} ms, expected {per_role}: {delta:?}"
        );
        let looks = scripts - renewals;
        assert!(
            (per_role / 3 - 1..=per_role + 1).contains(&looks),
            "{looks} looks in {WINDOW_MS} ms: {delta:?}"
        );
        assert_eq!(
            (calls("time"), calls("hmget")),
            (scripts, scripts),
            "{delta:?}"
        );
        // The pace: each renewal comes half a lease after the last one's reply, plus its
        // lateness; never sooner (a renewal at a third of the lease would cost half as
        // much again), never after the lease has ended (a candidate could take it from
        // a live leader), and at the median, barely late.
        let expires = renewed.lock().unwrap().clone();
        let mut gaps: Vec<u64> = expires
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
            .collect();
        assert!(
            gaps.len() as u64 >= per_role * 2 / 3 - 2,
            "{} renewals seen in {WINDOW_MS} ms: {expires:?}",
            expires.len()
        );
        assert!(
            gaps.iter()
                .all(|&gap| (HALF_LEASE_MS..2 * HALF_LEASE_MS).contains(&gap)),
            "renewals {gaps:?} ms apart: not within [{HALF_LEASE_MS}, {}) ms",
            2 * HALF_LEASE_MS
        );
        gaps.sort_unstable();
        let median = gaps[gaps.len() / 2];
        eprintln!("idle: {renewals} renewals, {gaps:?} ms apart");
        assert!(
            median <= HALF_LEASE_MS + LATE_MEDIAN_MS,
            "renewals {median} ms apart at the median, half the lease is {HALF_LEASE_MS} ms: \
             {gaps:?}"
        );
        assert!(leader.stats().leading != candidate.stats().leading);
        worker.abort();
    })
}

async fn commands_served(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    support::calls_but_info(&text)
}

#[test]
fn running_queue_delivers_every_job_then_idles_without_commands() {
    support::multi_thread().block_on(async {
        let server = RedisServer::start();
        let name = queue_name("live");
        let queue = Queue::connect(&server.url(), &name).await.unwrap();
        let n = 300;
        let ids: Vec<String> = (0..n).map(|i| format!("j{i}")).collect();
        // Half at a time, half after a delay; the earliest each may run, by the clock the
        // handler reads (Redis's `TIME` is this machine's clock): the time asked for, or
        // the delay counted from before the call (Redis receives it later).
        let asked = SystemTime::now();
        let due_by = |i: usize| asked + Duration::from_millis(200 + 3 * i as u64);
        let jobs = ids.iter().enumerate().map(|(i, id)| {
            let when = if i % 2 == 0 {
                When::At(due_by(i))
            } else {
                When::After(Duration::from_millis(200 + 3 * i as u64))
            };
            (id.as_str(), b"".as_slice(), when)
        });
        queue.schedule_batch(jobs).await.unwrap();
        let leader = queue.leader(LeaderOptions::default()).spawn();
        let candidate = queue.leader(LeaderOptions::default()).spawn();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let worker = tokio::spawn(queue.worker(WorkerOptions::default()).run(move |job| {
            // The handler's own reading, not a figure of the library's claim reply.
            let _ = tx.send((job.id().to_string(), SystemTime::now()));
            async { Ok::<(), std::io::Error>(()) }
        }));
        let mut seen = std::collections::BTreeSet::new();
        while seen.len() < n {
            let (id, started) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("every job within 10 s")
                .unwrap();
            let i: usize = id[1..].parse().unwrap();
            assert!(
                started >= due_by(i),
                "{id} started {:?} before its due time",
                due_by(i).duration_since(started).unwrap()
            );
            assert!(seen.insert(id), "delivered twice with no crash");
        }
        // One of the two leads; it promoted the jobs and measured their lag.
        let (a, b) = (leader.stats(), candidate.stats());
        assert!(a.leading != b.leading, "{a:?} {b:?}");
        let stats = if a.leading { a } else { b };
        assert!(
            stats.promoted > 0 && stats.lag_p50_ms.is_some(),
            "{stats:?}"
        );
        // Far work only: after the lease settles to its idle length, nothing polls.
        queue
            .schedule("far", b"", Duration::from_secs(3600))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let mut admin = server.admin().await;
        let before = commands_served(&mut admin).await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let after = commands_served(&mut admin).await;
        assert_eq!(after - before, 0, "an idle queue sent commands");
        // Every key of the queue carries its hash tag (one Redis Cluster slot).
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(!keys.is_empty());
        for key in keys {
            assert!(key.starts_with(&format!("tickless:{{{name}}}:")), "{key}");
        }
        worker.abort();
        leader.stop().await.unwrap();
        drop(candidate);
    })
}
