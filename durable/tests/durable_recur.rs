//! Recurring jobs against a real `redis-server`, on the queue's manual clock: `every`
//! and `cron`, one job per occurrence and none early, the catch-up policies after an
//! hour without a leader, "2 am in Europe/Paris" across both daylight-saving changes,
//! every quarter hour minute by minute through both changes and caught up across them,
//! listing and removing, and a bad key met before any write.

use tickless_test_support as support;

use std::time::Duration;
use support::{at, queue_name, RedisServer, T0};
use tickless_durable::{
    CatchUp, Leader, LeaderOptions, Queue, Recurrence, ScheduleInfo, Worker, WorkerOptions,
};

/// `y-m-d h:mi` UTC in ms, for the few instants these tests name.
fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
    let known = [
        ((2023, 11, 14, 22, 15), 1700000100000),
        ((2023, 11, 15, 2, 10), 1700014200000),
        ((2026, 3, 28, 12, 0), 1774699200000),
        ((2026, 3, 28, 23, 0), 1774738800000),
        ((2026, 3, 29, 0, 0), 1774742400000),
        ((2026, 3, 29, 1, 0), 1774746000000),
        ((2026, 3, 30, 0, 0), 1774828800000),
        ((2026, 10, 24, 12, 0), 1792843200000),
        ((2026, 10, 24, 23, 0), 1792882800000),
        ((2026, 10, 25, 0, 0), 1792886400000),
        ((2026, 10, 25, 1, 0), 1792890000000),
        ((2026, 10, 26, 1, 0), 1792976400000),
    ];
    known
        .iter()
        .find(|k| k.0 == (y, mo, d, h, mi))
        .unwrap_or_else(|| panic!("add {y}-{mo}-{d} {h}:{mi} to the table"))
        .1
}

async fn setup(server: &RedisServer, test: &str, clock: u64) -> (Queue, Leader, Worker) {
    let queue = Queue::connect(&server.url(), &queue_name(test))
        .await
        .expect("connect");
    queue.set_manual_clock(Some(at(clock))).await.unwrap();
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    let worker = queue.worker(WorkerOptions::default());
    (queue, leader, worker)
}

/// Moves the manual clock to `to`, lets the leader tick, and returns the ids of the jobs
/// a worker then gets (acked), in order.
async fn run_to(queue: &Queue, leader: &mut Leader, worker: &Worker, to: u64) -> Vec<String> {
    queue.set_manual_clock(Some(at(to))).await.unwrap();
    leader.step().await.unwrap();
    let mut ids = Vec::new();
    loop {
        let jobs = worker.try_claim(500).await.unwrap();
        if jobs.is_empty() {
            return ids;
        }
        for job in jobs {
            assert!(job.due() <= at(to), "{} handed out early", job.id());
            ids.push(job.id().to_string());
            worker.ack(&job).await.unwrap();
        }
    }
}

async fn schedule(queue: &Queue, id: &str) -> ScheduleInfo {
    queue
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no schedule {id}"))
}

#[tokio::test]
async fn every_makes_one_job_per_occurrence_never_early_until_unscheduled() {
    let server = RedisServer::start();
    let (queue, mut leader, worker) = setup(&server, "every", T0).await;
    assert!(queue
        .every("beat", Duration::from_secs(10), b"ping")
        .await
        .unwrap());
    // The same schedule again (a redeploy) changes nothing.
    assert!(!queue
        .every("beat", Duration::from_secs(10), b"ping")
        .await
        .unwrap());
    let info = schedule(&queue, "beat").await;
    assert_eq!(info.recurrence, Recurrence::Every(Duration::from_secs(10)));
    assert_eq!(info.next, Some(at(T0 + 10_000)));
    assert_eq!(info.catch_up, CatchUp::Skip);
    assert_eq!(info.payload, b"ping");
    assert!(run_to(&queue, &mut leader, &worker, T0 + 9_999)
        .await
        .is_empty());
    assert_eq!(
        run_to(&queue, &mut leader, &worker, T0 + 10_000).await,
        [format!("beat@{}", T0 + 10_000)]
    );
    assert!(run_to(&queue, &mut leader, &worker, T0 + 19_999)
        .await
        .is_empty());
    assert_eq!(
        run_to(&queue, &mut leader, &worker, T0 + 20_000).await,
        [format!("beat@{}", T0 + 20_000)]
    );
    assert_eq!(schedule(&queue, "beat").await.next, Some(at(T0 + 30_000)));
    assert!(queue.unschedule("beat").await.unwrap());
    assert!(!queue.unschedule("beat").await.unwrap());
    assert!(run_to(&queue, &mut leader, &worker, T0 + 60_000)
        .await
        .is_empty());
    assert!(queue.schedules().await.unwrap().is_empty());
}

#[tokio::test]
async fn every_catches_up_an_hour_without_leader_as_each_policy_says() {
    let server = RedisServer::start();
    let (queue, mut leader, worker) = setup(&server, "every-catch-up", T0).await;
    let minute = Duration::from_secs(60);
    for (id, policy) in [
        ("burst", CatchUp::Burst),
        ("delay", CatchUp::Delay),
        ("skip", CatchUp::Skip),
    ] {
        queue
            .with_catch_up(policy)
            .every(id, minute, b"")
            .await
            .unwrap();
    }
    // No leader from T0 to an hour and 30 s later: occurrences T0+1 min ... T0+60 min.
    let now = T0 + 3_630_000;
    let ids = run_to(&queue, &mut leader, &worker, now).await;
    let of = |p: &str| -> Vec<u64> {
        ids.iter()
            .filter_map(|id| id.strip_prefix(&format!("{p}@"))?.parse().ok())
            .collect()
    };
    let all: Vec<u64> = (1..=60).map(|i| T0 + i * 60_000).collect();
    assert_eq!(of("burst"), all, "Burst: every missed occurrence");
    assert_eq!(of("delay"), [T0 + 3_600_000], "Delay: once");
    assert_eq!(of("skip"), [T0 + 3_600_000], "Skip: the latest only");
    assert_eq!(
        schedule(&queue, "burst").await.next,
        Some(at(T0 + 3_660_000))
    );
    assert_eq!(
        schedule(&queue, "delay").await.next,
        Some(at(now + 60_000)),
        "Delay counts the next from now"
    );
    assert_eq!(
        schedule(&queue, "skip").await.next,
        Some(at(T0 + 3_660_000)),
        "Skip keeps the grid"
    );
    // A merely late occurrence (less than a period) runs under every policy, and Delay
    // keeps its (new) grid then.
    let ids = run_to(&queue, &mut leader, &worker, now + 65_000).await;
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(
        schedule(&queue, "delay").await.next,
        Some(at(now + 120_000))
    );
}

#[tokio::test]
async fn cron_catches_up_past_its_precomputed_times_and_the_leader_refills_them() {
    let server = RedisServer::start();
    // 2023-11-14 22:13:20 UTC.
    let (queue, mut leader, worker) = setup(&server, "cron-catch-up", T0).await;
    for (id, policy) in [
        ("burst", CatchUp::Burst),
        ("delay", CatchUp::Delay),
        ("skip", CatchUp::Skip),
    ] {
        assert!(queue
            .with_catch_up(policy)
            .cron(id, "*/5 * * * *", "UTC", b"")
            .await
            .unwrap());
    }
    let first = utc(2023, 11, 14, 22, 15);
    assert_eq!(schedule(&queue, "skip").await.next, Some(at(first)));
    // Four hours without a leader: 48 occurrences, more than the 32 computed ahead.
    let now = T0 + 4 * 3_600_000;
    let ids = run_to(&queue, &mut leader, &worker, now).await;
    let of = |p: &str| -> Vec<u64> {
        ids.iter()
            .filter_map(|id| id.strip_prefix(&format!("{p}@"))?.parse().ok())
            .collect()
    };
    let all: Vec<u64> = (0..48).map(|i| first + i * 300_000).collect();
    assert_eq!(of("burst"), all);
    let latest = utc(2023, 11, 15, 2, 10);
    assert_eq!(of("delay"), [latest]);
    assert_eq!(of("skip"), [latest]);
    for id in ["burst", "delay", "skip"] {
        assert_eq!(
            schedule(&queue, id).await.next,
            Some(at(latest + 300_000)),
            "{id}"
        );
    }
    // And on it goes, one job per occurrence.
    let ids = run_to(&queue, &mut leader, &worker, latest + 300_000).await;
    assert_eq!(ids.len(), 3, "{ids:?}");
}

#[tokio::test]
async fn two_am_in_paris_runs_once_across_both_daylight_saving_changes() {
    let server = RedisServer::start();
    let (queue, mut leader, worker) = setup(&server, "paris", utc(2026, 3, 28, 12, 0)).await;
    queue
        .cron("nightly", "0 2 * * *", "Europe/Paris", b"report")
        .await
        .unwrap();
    // 29 March 2026 has no 02:00 in Paris (01:59:59 CET is followed by 03:00 CEST): the
    // job runs at 03:00 CEST, 01:00 UTC.
    let spring = utc(2026, 3, 29, 1, 0);
    let info = schedule(&queue, "nightly").await;
    assert_eq!(info.next, Some(at(spring)));
    assert_eq!(
        info.recurrence,
        Recurrence::Cron {
            expression: "0 2 * * *".to_string(),
            zone: "Europe/Paris".to_string()
        }
    );
    assert!(run_to(&queue, &mut leader, &worker, spring - 1)
        .await
        .is_empty());
    assert_eq!(
        run_to(&queue, &mut leader, &worker, spring).await,
        [format!("nightly@{spring}")]
    );
    // The next night is on summer time: 02:00 CEST, 00:00 UTC.
    assert_eq!(
        schedule(&queue, "nightly").await.next,
        Some(at(utc(2026, 3, 30, 0, 0)))
    );

    // 25 October 2026 has 02:00 twice (CEST, then CET an hour later): one run, at the
    // first. The schedule is set again in October (a jump of the manual clock over
    // months would be seven months of catching up).
    assert!(queue.unschedule("nightly").await.unwrap());
    let autumn = utc(2026, 10, 25, 0, 0);
    let (again, second) = (utc(2026, 10, 24, 12, 0), utc(2026, 10, 25, 1, 0));
    assert!(run_to(&queue, &mut leader, &worker, again).await.is_empty());
    queue
        .cron("nightly", "0 2 * * *", "Europe/Paris", b"report")
        .await
        .unwrap();
    assert!(run_to(&queue, &mut leader, &worker, autumn - 1)
        .await
        .is_empty());
    assert_eq!(
        run_to(&queue, &mut leader, &worker, autumn).await,
        [format!("nightly@{autumn}")]
    );
    assert!(
        run_to(&queue, &mut leader, &worker, second + 1_000)
            .await
            .is_empty(),
        "02:00 CET, the second pass, does not run again"
    );
    assert_eq!(
        schedule(&queue, "nightly").await.next,
        Some(at(utc(2026, 10, 26, 1, 0)))
    );
}

/// Minute by minute from 23:00 to 03:00 UTC over a night of each daylight-saving
/// change in Europe/Paris, as Vixie cron runs them: `*/15 * * * *` (no fixed hour) every
/// quarter hour of real time, both passes of the repeated hour (02:00-02:59 CEST, then
/// CET) and across the skipped one; `30 2 * * *` (a fixed time) once, at the first 02:30
/// in October and at 03:00 CEST, the first moment after the gap, in March. Each job at
/// its minute, none early (a minute before, nothing), none twice.
#[tokio::test]
async fn every_quarter_hour_and_half_past_two_in_paris_minute_by_minute_through_both_changes() {
    let server = RedisServer::start();
    let minute = 60_000;
    for (night, from, fixed) in [
        // 02:30 CEST = 00:30 UTC; 02:30 CET (01:30 UTC) is the second pass: not again.
        (
            "october",
            utc(2026, 10, 24, 23, 0),
            utc(2026, 10, 25, 0, 0) + 30 * minute,
        ),
        // No 02:30 that night: 03:00 CEST = 01:00 UTC.
        ("march", utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 1, 0)),
    ] {
        let (queue, mut leader, worker) = setup(&server, night, from).await;
        queue
            .cron("quarter", "*/15 * * * *", "Europe/Paris", b"")
            .await
            .unwrap();
        queue
            .cron("half-past-two", "30 2 * * *", "Europe/Paris", b"")
            .await
            .unwrap();
        let mut fired: Vec<(u64, String)> = Vec::new();
        for m in 1..=240 {
            let now = from + m * minute;
            for id in run_to(&queue, &mut leader, &worker, now).await {
                let due: u64 = id.rsplit('@').next().unwrap().parse().unwrap();
                assert_eq!(due, now, "{night}: {id} not made at its minute");
                fired.push((now, id));
            }
        }
        let mut want: Vec<(u64, String)> = (1..=16)
            .map(|q| from + q * 15 * minute)
            .map(|t| (t, format!("quarter@{t}")))
            .collect();
        want.push((fixed, format!("half-past-two@{fixed}")));
        want.sort();
        assert_eq!(fired, want, "{night}");
    }
}

/// No leader from 23:00 to 03:00 UTC across each change in Europe/Paris, then one step:
/// `*/15 * * * *` with `Burst` makes every quarter hour of real time once (16 jobs, both
/// passes of October's repeated hour), with `Skip` and `Delay` only the latest (03:00
/// UTC); `30 2 * * *` with `Burst` once (October: the first 02:30; March: 03:00 CEST).
#[tokio::test]
async fn a_catch_up_across_each_daylight_saving_change_makes_each_occurrence_once() {
    let server = RedisServer::start();
    let (minute, hour) = (60_000, 3_600_000);
    for (night, from, fixed) in [
        (
            "october",
            utc(2026, 10, 24, 23, 0),
            utc(2026, 10, 25, 0, 0) + 30 * minute,
        ),
        ("march", utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 1, 0)),
    ] {
        let (queue, mut leader, worker) = setup(&server, night, from).await;
        for (id, policy) in [
            ("burst", CatchUp::Burst),
            ("delay", CatchUp::Delay),
            ("skip", CatchUp::Skip),
        ] {
            queue
                .with_catch_up(policy)
                .cron(id, "*/15 * * * *", "Europe/Paris", b"")
                .await
                .unwrap();
        }
        queue
            .with_catch_up(CatchUp::Burst)
            .cron("half-past-two", "30 2 * * *", "Europe/Paris", b"")
            .await
            .unwrap();
        let now = from + 4 * hour;
        let ids = run_to(&queue, &mut leader, &worker, now).await;
        let of = |p: &str| -> Vec<u64> {
            let mut times: Vec<u64> = ids
                .iter()
                .filter_map(|id| id.strip_prefix(&format!("{p}@"))?.parse().ok())
                .collect();
            times.sort_unstable();
            times
        };
        let quarters: Vec<u64> = (1..=16).map(|q| from + q * 15 * minute).collect();
        assert_eq!(of("burst"), quarters, "{night}: Burst");
        assert_eq!(of("delay"), [now], "{night}: Delay");
        assert_eq!(of("skip"), [now], "{night}: Skip");
        assert_eq!(of("half-past-two"), [fixed], "{night}");
        assert_eq!(ids.len(), 16 + 3, "{night}: nothing else: {ids:?}");
        for id in ["burst", "delay", "skip"] {
            assert_eq!(
                schedule(&queue, id).await.next,
                Some(at(now + 15 * minute)),
                "{night}: {id}"
            );
        }
    }
}

/// A cron schedule with `CatchUp::Burst` that missed 4,100 minutes (more occurrences
/// than any one refill or unpack): one leader step makes each job once, in 129 rounds of
/// the leader's refill (32 computed times each) and ticks, none early.
#[tokio::test]
async fn a_cron_burst_of_4100_missed_minutes_is_refilled_until_each_runs_once() {
    let server = RedisServer::start();
    let (queue, mut leader, worker) = setup(&server, "cron-4100", T0).await;
    assert!(queue
        .with_catch_up(CatchUp::Burst)
        .cron("minutely", "* * * * *", "UTC", b"")
        .await
        .unwrap());
    // 2023-11-14 22:14:00 UTC, the first minute after T0.
    let first = T0 + 40_000;
    let now = first + 4_099 * 60_000;
    let ids = run_to(&queue, &mut leader, &worker, now).await;
    let want: Vec<String> = (0..4_100)
        .map(|i| format!("minutely@{}", first + i * 60_000))
        .collect();
    assert_eq!(ids.len(), want.len());
    let mut sorted = ids.clone();
    sorted.sort_by_key(|id| id.rsplit('@').next().unwrap().parse::<u64>().unwrap());
    assert_eq!(sorted, want);
    assert_eq!(
        schedule(&queue, "minutely").await.next,
        Some(at(now + 60_000))
    );
}

#[tokio::test]
async fn bad_schedules_get_clear_errors_and_a_bad_key_stops_a_set_before_it_writes() {
    let server = RedisServer::start();
    let (queue, _leader, _worker) = setup(&server, "recur-bad", T0).await;
    let err = queue.cron("x", "0 2 * *", "UTC", b"").await.unwrap_err();
    assert!(err.is_invalid_schedule(), "{err}");
    let err = queue
        .cron("x", "0 2 * * *", "Europe/Pariss", b"")
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_schedule() && err.to_string().contains("Pariss"),
        "{err}"
    );
    let err = queue.every("x", Duration::ZERO, b"").await.unwrap_err();
    assert!(err.is_invalid_schedule(), "{err}");
    let err = queue
        .every(&"x".repeat(500), Duration::from_secs(1), b"")
        .await
        .unwrap_err();
    assert!(err.is_invalid_id(), "{err}");

    let mut admin = server.admin().await;
    let rlow = format!("tickless:{{{}}}:rlow", queue.name());
    let _: () = redis::cmd("SET")
        .arg(&rlow)
        .arg("oops")
        .query_async(&mut admin)
        .await
        .unwrap();
    let err = queue.cron("x", "0 2 * * *", "UTC", b"").await.unwrap_err();
    assert!(err.is_garbage() && err.to_string().contains(&rlow), "{err}");
    let recur: usize = redis::cmd("HLEN")
        .arg(format!("tickless:{{{}}}:recur", queue.name()))
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(recur, 0, "nothing written");
}

#[tokio::test]
async fn inspect_shows_the_recurring_schedules() {
    let server = RedisServer::start();
    let (queue, _leader, _worker) = setup(&server, "recur-inspect", T0).await;
    queue
        .with_catch_up(CatchUp::Delay)
        .cron("nightly", "0 2 * * *", "Europe/Paris", b"")
        .await
        .unwrap();
    queue
        .every("beat", Duration::from_secs(90), b"")
        .await
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .args(["inspect", &server.url(), queue.name()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // T0 is 22:13:20 UTC, 23:13:20 in Paris: the next 02:00 CET is 2 h 46 min 40 s away.
    assert!(
        text.contains(
            "recurring \"nightly\": cron \"0 2 * * *\" in Europe/Paris, catch-up Delay, next in 10000.000s"
        ),
        "{text}"
    );
    assert!(
        text.contains("recurring \"beat\": every 90s, catch-up Skip, next in 90.000s"),
        "{text}"
    );
}

#[tokio::test]
async fn a_garbled_schedule_stops_neither_the_leader_nor_the_other_schedules() {
    let server = RedisServer::start();
    let (queue, mut leader, worker) = setup(&server, "recur-garbled", T0).await;
    queue.cron("bad", "* * * * *", "UTC", b"").await.unwrap();
    queue
        .every("good", Duration::from_secs(1), b"")
        .await
        .unwrap();
    let mut admin = server.admin().await;
    let key = |k: &str| format!("tickless:{{{}}}:{k}", queue.name());
    let _: () = redis::pipe()
        .hset(key("rnext"), "bad", "not times")
        .sadd(key("rlow"), "bad")
        .query_async(&mut admin)
        .await
        .unwrap();
    for s in 1..=3 {
        let ids = run_to(&queue, &mut leader, &worker, T0 + s * 1_000).await;
        assert_eq!(ids, [format!("good@{}", T0 + s * 1_000)]);
    }
    let err = queue.schedules().await.unwrap_err();
    assert!(
        err.is_garbage() && err.to_string().contains("\"bad\""),
        "{err}"
    );
    // Setting it again repairs it.
    queue
        .cron("bad", "* * * * *", "Europe/Paris", b"")
        .await
        .unwrap();
    assert_eq!(queue.schedules().await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_wrong_typed_recurring_key_stops_the_tick_before_it_moves_anything() {
    let server = RedisServer::start();
    let (queue, mut leader, worker) = setup(&server, "recur-wrongtype", T0).await;
    queue
        .every("beat", Duration::from_secs(1), b"")
        .await
        .unwrap();
    queue.schedule("job", b"", at(T0 + 1_000)).await.unwrap();
    let mut admin = server.admin().await;
    let rnext = format!("tickless:{{{}}}:rnext", queue.name());
    let saved: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&rnext)
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::pipe()
        .del(&rnext)
        .set(&rnext, "oops")
        .query_async(&mut admin)
        .await
        .unwrap();
    queue.set_manual_clock(Some(at(T0 + 1_000))).await.unwrap();
    let err = leader.step().await.unwrap_err();
    assert!(
        err.is_garbage() && err.to_string().contains(&rnext),
        "{err}"
    );
    assert!(
        worker.try_claim(10).await.unwrap().is_empty(),
        "nothing moved"
    );
    // Repaired, the same tick moves both.
    let _: () = redis::pipe()
        .del(&rnext)
        .hset_multiple(&rnext, &saved)
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut ids = run_to(&queue, &mut leader, &worker, T0 + 1_000).await;
    ids.sort();
    assert_eq!(ids, [format!("beat@{}", T0 + 1_000), "job".to_string()]);
}
