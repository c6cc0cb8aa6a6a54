//! Recurring jobs across a leader's kill -9.

use super::log::{args, Proc};
use std::collections::BTreeMap;
use std::time::{Duration, Instant, UNIX_EPOCH};
use tickless_durable::Queue;
use tickless_test_support::{self as support, RedisServer};

/// A recurring schedule (every second, `Burst`) on a manual clock, two leader
/// processes, the leading one killed with SIGKILL: each occurrence becomes exactly one
/// job, none before its time, whichever leader made it.
pub fn recurring_jobs_run_once_per_occurrence_across_a_leader_kill_9() {
    use tickless_durable::{CatchUp, WorkerOptions};
    let server = RedisServer::start();
    let url = server.url();
    let q = "recur-crash";
    let t0: u64 = 1_700_000_000_000;
    let runtime = support::multi_thread();
    let queue = runtime.block_on(Queue::connect(&url, q)).unwrap();
    runtime
        .block_on(queue.set_manual_clock(Some(UNIX_EPOCH + Duration::from_millis(t0))))
        .unwrap();
    let burst = queue.with_catch_up(CatchUp::Burst);
    let set = burst.every("beat", Duration::from_secs(1), b"b");
    assert!(runtime.block_on(set).unwrap());
    let mut leaders: Vec<Proc> = (0..2)
        .map(|i| Proc::spawn(&format!("leader{i}"), &args(&["lead", &url, q])))
        .collect();
    let worker = queue.worker(WorkerOptions::default());
    let mut clock = t0;
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let mut killed = false;
    let (mut dead_token, mut survivor) = (0, 0);
    for step in 0..12 {
        if step == 4 {
            // The leader is the one that printed the highest token.
            let token = |p: &Proc| {
                p.lines()
                    .iter()
                    .filter_map(|l| l.strip_prefix("leading ")?.split(' ').next()?.parse().ok())
                    .max()
                    .unwrap_or(0u64)
            };
            let i = if token(&leaders[0]) > token(&leaders[1]) {
                0
            } else {
                1
            };
            dead_token = token(&leaders[i]);
            survivor = 1 - i;
            leaders[i].kill();
            killed = true;
        }
        // After the kill, far enough for the dead leader's lease (up to 1 s of manual
        // time: its next work was a second away) to end on the queue's clock.
        let by = if killed && step == 4 { 3_000 } else { 1_000 };
        clock += by;
        runtime
            .block_on(queue.advance_manual_clock(Duration::from_millis(by)))
            .unwrap();
        let due = (clock - t0) / 1_000;
        let give_up = Instant::now() + Duration::from_secs(15);
        while (seen.len() as u64) < due {
            assert!(
                Instant::now() < give_up,
                "occurrences up to {clock} never came: {seen:?}"
            );
            for job in runtime.block_on(worker.try_claim(100)).unwrap() {
                let due_ms = job.due().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
                assert!(due_ms <= clock, "{} handed out before its time", job.id());
                assert_eq!(job.id(), format!("beat@{due_ms}"));
                assert!(
                    seen.insert(job.id().to_string(), due_ms).is_none(),
                    "{} twice",
                    job.id()
                );
                runtime.block_on(worker.ack(&job)).unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let last_token = leaders[survivor]
        .lines()
        .iter()
        .filter_map(|l| l.strip_prefix("leading ")?.split(' ').next()?.parse().ok())
        .max()
        .unwrap_or(0u64);
    assert!(
        dead_token > 0 && last_token > dead_token,
        "the survivor took over: tokens {dead_token} then {last_token}"
    );
    let expected: Vec<u64> = (1..=(clock - t0) / 1_000).map(|i| t0 + i * 1_000).collect();
    assert_eq!(seen.values().copied().collect::<Vec<_>>(), expected);
    // Nothing more is pending: once the leader has moved everything due by the clock
    // (`due` holds nothing at or before it), the queue holds no job at all, not even one
    // due later, and the schedule waits for its next occurrence.
    let mut admin = redis::Client::open(server.admin_url())
        .unwrap()
        .get_connection()
        .unwrap();
    let key = |suffix: &str| format!("tickless:{{{q}}}:{suffix}");
    let give_up = Instant::now() + Duration::from_secs(15);
    loop {
        let left: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(key("due"))
            .arg("-inf")
            .arg(clock)
            .query(&mut admin)
            .unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the leader did not catch up with the clock ({clock}) within 15 s: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (jobs, ready, flight): (u64, u64, u64) = redis::pipe()
        .cmd("HLEN")
        .arg(key("jobs"))
        .cmd("LLEN")
        .arg(key("ready"))
        .cmd("ZCARD")
        .arg(key("flight"))
        .query(&mut admin)
        .unwrap();
    assert_eq!(
        (jobs, ready, flight),
        (0, 0, 0),
        "jobs left (records, ready, in flight) after every occurrence ran"
    );
    let waiting: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(key("due"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut admin)
        .unwrap();
    // Beside the schedule, only the lease marker (`l`) may be left: a wake for lease
    // ends that the next tick drops, with nothing in flight.
    let waiting: Vec<(String, u64)> = waiting.into_iter().filter(|(m, _)| m != "l").collect();
    assert_eq!(waiting, [("rbeat".to_string(), clock + 1_000)]);
    assert!(runtime.block_on(worker.try_claim(100)).unwrap().is_empty());
    eprintln!(
        "recurring crash test: {} occurrences, each once",
        expected.len()
    );
}
