//! Crash tests with real processes: leaders, workers and schedulers are processes
//! killed with SIGKILL (`Child::kill`), and Redis itself is killed and restarted from its
//! append-only file. Every job a scheduler saw confirmed must be handled (0 lost); a job
//! may be handled twice only if its first handler had started in a worker that was
//! killed; no handler runs before the due time its scheduler asked for, by the clock the
//! handler reads (this machine's, which is Redis's: each test checks).
//!
//! The processes are this binary started again as a role (`roles.rs`), so it has a
//! `main` of its own (`harness = false`): given `role ...` it is that role; otherwise it
//! runs the tests below one at a time (each runs a Redis and a handful of processes on 2
//! cores, so that none's margins are eaten by another's load), taking the names given
//! on its command line as filters, as libtest does.

#[cfg(feature = "cold")]
#[path = "durable_crash/cold.rs"]
mod cold;
// The cold tier tests' shared helpers (files under a directory, `ms`).
#[cfg(feature = "cold")]
#[path = "cold/common.rs"]
mod cold_common;
#[cfg(feature = "cold")]
#[path = "durable_crash/cold_role.rs"]
mod cold_role;
#[path = "durable_crash/log.rs"]
mod log;
#[path = "durable_crash/outage.rs"]
mod outage;
#[path = "durable_crash/recurring.rs"]
mod recurring;
#[path = "durable_crash/roles.rs"]
mod roles;
use tickless_test_support as support;

use log::{
    args, asked, check, confirmed, cut_off_by_the_crash, in_flight, now_ms, read_log,
    wait_until_done, Proc,
};
use outage::leader_and_worker_ride_out_a_long_redis_outage;
use recurring::recurring_jobs_run_once_per_occurrence_across_a_leader_kill_9;
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use support::RedisServer;

/// The workers' lease.
const LEASE_MS: u64 = 1_500;
/// The leaders' lease while work is near (`LeaderOptions::busy_lease`'s default): a
/// killed leader is replaced within it.
const BUSY_LEASE_MS: u64 = 100;
/// What a process needs beyond a lease to act on its end here: a timer's lateness, a
/// script's round trip, a busy 2-core machine.
const MARGIN_MS: u64 = 250;

/// The tests, run one at a time by `main` (the cold tier's with feature `cold`).
const TESTS: &[(&str, fn())] = &[
    (
        "kill_9_of_leader_worker_and_scheduler_loses_nothing",
        kill_9_of_leader_worker_and_scheduler_loses_nothing,
    ),
    (
        "redis_killed_and_restarted_from_its_aof_loses_nothing",
        redis_killed_and_restarted_from_its_aof_loses_nothing,
    ),
    (
        "leader_and_worker_ride_out_a_long_redis_outage",
        leader_and_worker_ride_out_a_long_redis_outage,
    ),
    (
        "recurring_jobs_run_once_per_occurrence_across_a_leader_kill_9",
        recurring_jobs_run_once_per_occurrence_across_a_leader_kill_9,
    ),
    #[cfg(feature = "cold")]
    (
        "cold_leaders_killed_at_every_step_and_redis_restarted_lose_and_double_nothing",
        cold::cold_leaders_killed_at_every_step_and_redis_restarted_lose_and_double_nothing,
    ),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(roles::ROLE) {
        return roles::main(&args[1..]);
    }
    if args.iter().any(|arg| arg == "--list") {
        for (name, _) in TESTS.iter() {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    // As libtest: `--skip NAME` leaves out the tests NAME matches (scripts/test-variant.sh
    // gives every binary the same `--skip`s); other words are filters.
    let (mut skips, mut filters) = (Vec::new(), Vec::new());
    for (i, arg) in args.iter().enumerate() {
        if i > 0 && args[i - 1] == "--skip" {
            skips.push(arg);
        } else if !arg.starts_with('-') {
            filters.push(arg);
        }
    }
    let exact = args.iter().any(|arg| arg == "--exact");
    let matches = |name: &str, f: &String| {
        if exact {
            name == f
        } else {
            name.contains(f.as_str())
        }
    };
    let chosen: Vec<_> = TESTS
        .iter()
        .filter(|(name, _)| {
            (filters.is_empty() || filters.iter().any(|f| matches(name, f)))
                && !skips.iter().any(|f| matches(name, f))
        })
        .collect();
    let started = Instant::now();
    println!("\nrunning {} tests", chosen.len());
    let mut failed = Vec::new();
    for (name, test) in &chosen {
        println!("test {name} ...");
        let outcome = std::panic::catch_unwind(test);
        println!(
            "test {name} ... {}",
            if outcome.is_ok() { "ok" } else { "FAILED" }
        );
        if outcome.is_err() {
            failed.push(*name);
        }
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        chosen.len() - failed.len(),
        failed.len(),
        TESTS.len() - chosen.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}

fn kill_9_of_leader_worker_and_scheduler_loses_nothing() {
    let server = RedisServer::start();
    server.assert_same_clock();
    let url = server.url();
    let q = "crash";
    let lease = LEASE_MS.to_string();
    let mut leaders: Vec<Proc> = (0..2)
        .map(|i| Proc::spawn(&format!("leader{i}"), &args(&["lead", &url, q])))
        .collect();
    let mut workers: Vec<Proc> = (0..3)
        .map(|i| {
            Proc::spawn(
                &format!("worker{i}"),
                &args(&["work", &url, q, &lease, "10"]),
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut schedulers = vec![
        Proc::spawn(
            "scheduler0",
            &args(&["schedule", &url, q, "0", "2000", "3000", "100"]),
        ),
        Proc::spawn(
            "scheduler1",
            &args(&["schedule", &url, q, "100000", "30000", "3000", "2"]),
        ),
    ];
    // A scheduler killed in the middle of its calls.
    std::thread::sleep(Duration::from_millis(400));
    schedulers[1].kill();
    let confirmed_b = confirmed(&schedulers[1..]).len();
    assert!(
        confirmed_b > 0 && confirmed_b < 30_000,
        "scheduler1 was killed mid-run ({confirmed_b} confirmed)"
    );
    // The leader.
    std::thread::sleep(Duration::from_millis(600));
    let current = (0..2)
        .max_by_key(|&i| {
            leaders[i]
                .lines()
                .iter()
                .filter_map(|l| l.split(' ').nth(1)?.parse::<u64>().ok())
                .max()
        })
        .unwrap();
    let leader_killed_at = now_ms();
    leaders[current].kill();
    // A worker while it holds jobs (started, not ended).
    std::thread::sleep(Duration::from_millis(300));
    let holding = |w: &Proc| {
        let lines = w.lines();
        lines.iter().filter(|l| l.starts_with("start")).count()
            > lines.iter().filter(|l| l.starts_with("end")).count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !holding(&workers[0]) {
        assert!(Instant::now() < deadline, "worker0 never held a job");
        std::thread::sleep(Duration::from_millis(1));
    }
    let worker_killed_at = now_ms();
    workers[0].kill();
    // Right after the kill: what the killed worker held is still in flight in Redis.
    let flight_at_kill = in_flight(&server.admin_url(), q);
    let killed_worker = workers[0].name.clone();
    let held: BTreeSet<String> = {
        let log = read_log(&workers[..1]);
        log.starts
            .keys()
            .filter(|id| !log.ends.contains_key(*id))
            .cloned()
            .collect()
    };
    assert!(!held.is_empty());

    wait_until_done(&url, q, &workers, &schedulers, Duration::from_secs(60));

    // Failover: the other leader took over within its busy lease of the kill.
    let survivor = &leaders[1 - current];
    let took_over = survivor
        .lines()
        .iter()
        .filter_map(|l| l.split(' ').nth(2)?.parse::<u64>().ok())
        .find(|&ms| ms >= leader_killed_at)
        .expect("the surviving candidate became leader");
    let failover = took_over - leader_killed_at;
    assert!(
        failover <= BUSY_LEASE_MS + MARGIN_MS,
        "failover took {failover} ms (busy lease {BUSY_LEASE_MS} ms)"
    );

    let log = read_log(&workers);
    let all_confirmed = confirmed(&schedulers);
    // A duplicate only for a job the killed worker had claimed before the kill and
    // still held in flight at it, delivered again elsewhere after the kill.
    let repeated = check(
        &log,
        &all_confirmed,
        &asked(&schedulers),
        leader_killed_at.min(worker_killed_at),
        |id, starts| {
            cut_off_by_the_crash(
                starts,
                worker_killed_at,
                Some(&killed_worker),
                (&flight_at_kill, worker_killed_at),
                id,
            )
        },
    );
    assert!(
        repeated <= flight_at_kill.len(),
        "{repeated} duplicates, {} jobs in flight at the kill",
        flight_at_kill.len()
    );
    // Redelivery of what the killed worker held: within its lease + 1 s of the kill.
    let mut worst = 0;
    for id in &held {
        let again = log.starts[id]
            .iter()
            .find(|s| s.worker != killed_worker)
            .expect("redelivered");
        worst = worst.max(again.claimed.saturating_sub(worker_killed_at));
    }
    assert!(
        worst <= LEASE_MS + BUSY_LEASE_MS + MARGIN_MS,
        "redelivery took {worst} ms after the kill (lease {LEASE_MS} ms)"
    );
    eprintln!(
        "crash test: {} jobs confirmed, 0 lost, {repeated} handled twice (all started in the killed worker), \
         {} held by the killed worker redelivered within {worst} ms, leader failover {failover} ms",
        all_confirmed.len(),
        held.len()
    );
}

fn redis_killed_and_restarted_from_its_aof_loses_nothing() {
    let mut server = RedisServer::start();
    server.assert_same_clock();
    let url = server.url();
    let q = "restart";
    let lease = LEASE_MS.to_string();
    let _leaders: Vec<Proc> = (0..2)
        .map(|i| Proc::spawn(&format!("leader{i}"), &args(&["lead", &url, q])))
        .collect();
    let workers: Vec<Proc> = (0..2)
        .map(|i| {
            Proc::spawn(
                &format!("worker{i}"),
                &args(&["work", &url, q, &lease, "10"]),
            )
        })
        .collect();
    let schedulers = vec![Proc::spawn(
        "scheduler",
        &args(&["schedule", &url, q, "0", "3000", "2500", "10"]),
    )];
    std::thread::sleep(Duration::from_millis(800));
    // Just before the kill: what is in flight (a job claimed between this and the kill
    // is in flight at the kill too, and told apart by its claim time).
    let snapshot_at = now_ms();
    let flight_before = in_flight(&server.admin_url(), q);
    let killed_at = now_ms();
    server.kill();
    std::thread::sleep(Duration::from_millis(500));
    server.restart();
    wait_until_done(&url, q, &workers, &schedulers, Duration::from_secs(60));
    let log = read_log(&workers);
    let all_confirmed = confirmed(&schedulers);
    assert_eq!(
        all_confirmed.len(),
        3000,
        "the scheduler retried through the restart"
    );
    // A delivery whose ack was lost with the connection is handled again (at least
    // once), but only one in flight at the kill: claimed before it, again after it.
    let asked = asked(&schedulers);
    let repeated = check(&log, &all_confirmed, &asked, killed_at, |id, starts| {
        cut_off_by_the_crash(starts, killed_at, None, (&flight_before, snapshot_at), id)
    });
    eprintln!(
        "restart test: 3000 jobs, 0 lost, {repeated} handled twice (acks lost in the restart)"
    );
}
