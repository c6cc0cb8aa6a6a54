//! Crash tests with real processes: leaders, workers and schedulers are processes
//! killed with SIGKILL (`Child::kill`), and Redis itself is killed and restarted from its
//! append-only file. Every job a scheduler saw confirmed must be handled (0 lost); a job
//! may be handled twice only if its first handler had started in a worker that was
//! killed; nothing is handed out before its due time.
//!
//! The processes are this binary started again as a role (`roles.rs`), so it has a
//! `main` of its own (`harness = false`): given `role ...` it is that role; otherwise it
//! runs the tests below one at a time (each runs a Redis and a handful of processes on 2
//! cores, so that none's margins are eaten by another's load), taking the names given
//! on its command line as filters, as libtest does.

#[path = "durable_crash/roles.rs"]
mod roles;
use tickless_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::RedisServer;
use tickless_durable::Queue;

/// The workers' lease.
const LEASE_MS: u64 = 1_500;
/// The leaders' lease while work is near (`LeaderOptions::busy_lease`'s default): a
/// killed leader is replaced within it.
const BUSY_LEASE_MS: u64 = 300;
/// What a process needs beyond a lease to act on its end here: a timer's lateness, a
/// script's round trip, a busy 2-core machine.
const MARGIN_MS: u64 = 250;

/// The tests, run one at a time by `main`.
const TESTS: [(&str, fn()); 4] = [
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
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(roles::ROLE) {
        return roles::main(&args[1..]);
    }
    if args.iter().any(|arg| arg == "--list") {
        for (name, _) in TESTS {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filters: Vec<&String> = args.iter().filter(|arg| !arg.starts_with('-')).collect();
    let exact = args.iter().any(|arg| arg == "--exact");
    let chosen: Vec<_> = TESTS
        .iter()
        .filter(|(name, _)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        name == f
                    } else {
                        name.contains(f.as_str())
                    }
                })
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

/// A role ([`roles`]): this binary started again, its stdout collected line by line.
struct Proc {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// The thread reading its stdout, joined once it is killed: then `lines` holds all
    /// it printed.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Proc {
    fn spawn(name: &str, args: &[String]) -> Proc {
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .arg(roles::ROLE)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a role");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("piped stdout");
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Proc {
            name: name.to_string(),
            child,
            lines,
            reader: Some(reader),
        }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// SIGKILL, as `kill -9`; returns once everything it printed has been read.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

/// What the workers said: per id, each start (worker, attempt, claimed, due) and ends.
#[derive(Default)]
struct Log {
    starts: BTreeMap<String, Vec<(String, u32, u64, u64)>>,
    ends: BTreeMap<String, usize>,
}

fn read_log(workers: &[Proc]) -> Log {
    let mut log = Log::default();
    for worker in workers {
        for line in worker.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[..] {
                ["start", id, attempt, claimed, due] => {
                    log.starts.entry(id.to_string()).or_default().push((
                        worker.name.clone(),
                        attempt.parse().unwrap(),
                        claimed.parse().unwrap(),
                        due.parse().unwrap(),
                    ))
                }
                ["end", id, _] => *log.ends.entry(id.to_string()).or_default() += 1,
                _ => {}
            }
        }
    }
    // In the order they were delivered, whichever worker printed them.
    for starts in log.starts.values_mut() {
        starts.sort_by_key(|&(_, attempt, claimed, _)| (attempt, claimed));
    }
    log
}

/// The ids in flight (claimed under a lease, not acked) in queue `name`, as Redis holds
/// them now.
fn in_flight(url: &str, name: &str) -> BTreeSet<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    redis::cmd("ZRANGE")
        .arg(format!("tickless:{{{name}}}:flight"))
        .arg(0)
        .arg(-1)
        .query::<Vec<String>>(&mut conn)
        .unwrap()
        .into_iter()
        .collect()
}

/// Whether a job handled twice is explained by one crash at `crash_ms` that cut off
/// its first delivery: exactly two starts, the first claimed at or before the crash
/// (in `first_on`, if given), the second after it elsewhere, and the job in flight at
/// the crash (in `flight`, a snapshot of Redis's in-flight set taken at `snapshot_ms`,
/// or claimed after that snapshot).
fn cut_off_by_the_crash(
    starts: &[(String, u32, u64, u64)],
    crash_ms: u64,
    first_on: Option<&str>,
    in_flight: (&BTreeSet<String>, u64),
    id: &str,
) -> bool {
    let [(first_worker, _, first_claim, _), (second_worker, _, second_claim, _)] = starts else {
        return false;
    };
    let (flight, snapshot_ms) = in_flight;
    *first_claim <= crash_ms
        && *second_claim >= crash_ms
        && first_on.is_none_or(|w| first_worker == w && second_worker != w)
        && (flight.contains(id) || *first_claim >= snapshot_ms)
}

fn confirmed(schedulers: &[Proc]) -> BTreeSet<String> {
    schedulers
        .iter()
        .flat_map(|s| s.lines())
        .filter_map(|l| l.strip_prefix("scheduled ").map(str::to_string))
        .collect()
}

/// Waits until every confirmed job was handled and the queue is empty.
fn wait_until_done(url: &str, name: &str, workers: &[Proc], schedulers: &[Proc], limit: Duration) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let queue = runtime.block_on(Queue::connect(url, name)).unwrap();
    let deadline = Instant::now() + limit;
    loop {
        let stats = runtime.block_on(queue.stats());
        let log = read_log(workers);
        let missing = confirmed(schedulers)
            .into_iter()
            .filter(|id| !log.ends.contains_key(id))
            .count();
        if let Ok(stats) = &stats {
            if missing == 0 && stats.scheduled + stats.ready + stats.in_flight + stats.dead == 0 {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not done after {limit:?}: {missing} confirmed jobs not handled; {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Checks the log: 0 lost, nothing early, duplicates only where `may_repeat` says a
/// handler had started; returns how many jobs were handled twice or more. A job first
/// seen at a later attempt must have been claimed after `crash_ms`: its first claim's
/// answer died with a worker or a connection, so no handler started.
fn check(
    log: &Log,
    confirmed: &BTreeSet<String>,
    crash_ms: u64,
    may_repeat: impl Fn(&str, &[(String, u32, u64, u64)]) -> bool,
) -> usize {
    let lost: Vec<&String> = confirmed
        .iter()
        .filter(|id| !log.ends.contains_key(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} confirmed jobs lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let mut repeated = 0;
    for (id, starts) in &log.starts {
        for (worker, attempt, claimed, due) in starts {
            assert!(claimed >= due, "{id} handed to {worker} (attempt {attempt}) at {claimed}, before its due time {due}");
        }
        if starts.len() > 1 {
            repeated += 1;
            assert!(
                may_repeat(id, starts),
                "{id} was delivered {} times with no crash to explain it: {starts:?}",
                starts.len()
            );
        } else if starts[0].1 != 1 {
            assert!(
                starts[0].2 >= crash_ms,
                "{id}: first seen at attempt {} before any crash",
                starts[0].1
            );
        }
    }
    repeated
}

fn kill_9_of_leader_worker_and_scheduler_loses_nothing() {
    let server = RedisServer::start();
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
            .find(|(w, ..)| *w != killed_worker)
            .expect("redelivered");
        worst = worst.max(again.2.saturating_sub(worker_killed_at));
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
    let repeated = check(&log, &all_confirmed, killed_at, |id, starts| {
        cut_off_by_the_crash(starts, killed_at, None, (&flight_before, snapshot_at), id)
    });
    eprintln!(
        "restart test: 3000 jobs, 0 lost, {repeated} handled twice (acks lost in the restart)"
    );
}

/// A long outage (9 s): the leader and the worker keep trying (every 100 ms while Redis
/// is away) and carry on when Redis is back.
fn leader_and_worker_ride_out_a_long_redis_outage() {
    support::multi_thread().block_on(async {
        use tickless_durable::{LeaderOptions, When, WorkerOptions};
        let mut server = RedisServer::start();
        let queue = Queue::connect(&server.url(), "outage").await.unwrap();
        let n = 300;
        let ids: Vec<String> = (0..n).map(|i| format!("j{i}")).collect();
        let jobs = ids.iter().enumerate().map(|(i, id)| {
            (
                id.as_str(),
                b"".as_slice(),
                When::After(Duration::from_millis(500 + 20 * i as u64)),
            )
        });
        queue.schedule_batch(jobs).await.unwrap();
        let leader = queue.leader(LeaderOptions::default()).spawn();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut options = WorkerOptions::default();
        options.lease = Duration::from_secs(2);
        let worker = tokio::spawn(queue.worker(options).run(move |job| {
            let _ = tx.send((job.id().to_string(), job.claimed_at() >= job.due()));
            async { Ok::<(), std::io::Error>(()) }
        }));
        tokio::time::sleep(Duration::from_secs(1)).await;
        server.kill();
        tokio::time::sleep(Duration::from_secs(9)).await;
        server.restart();
        let mut seen = BTreeSet::new();
        while seen.len() < n {
            let (id, on_time) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .expect("every job after the outage")
                .unwrap();
            assert!(on_time, "{id} early");
            seen.insert(id);
        }
        assert!(leader.stats().leading);
        worker.abort();
    })
}

/// A recurring schedule (every second, `Burst`) on a manual clock, two leader
/// processes, the leading one killed with SIGKILL: each occurrence becomes exactly one
/// job, none before its time, whichever leader made it.
fn recurring_jobs_run_once_per_occurrence_across_a_leader_kill_9() {
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
    // Nothing more is pending: no occurrence became a second job later.
    std::thread::sleep(Duration::from_millis(300));
    assert!(runtime.block_on(worker.try_claim(100)).unwrap().is_empty());
    eprintln!(
        "recurring crash test: {} occurrences, each once",
        expected.len()
    );
}
