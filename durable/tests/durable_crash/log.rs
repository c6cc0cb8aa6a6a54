//! What the crash tests read of their processes: each role's lines ([`Proc`]), the
//! workers' log of handler starts and ends ([`Log`]), the due times the schedulers asked
//! for, Redis's in-flight set, and the checks made of them ([`check`]).

use super::roles;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tickless_durable::Queue;

/// A role ([`roles`]): this binary started again, its stdout collected line by line.
pub struct Proc {
    pub name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// The thread reading its stdout, joined once it is killed: then `lines` holds all
    /// it printed.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Proc {
    pub fn spawn(name: &str, args: &[String]) -> Proc {
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

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// SIGKILL, as `kill -9`; returns once everything it printed has been read.
    pub fn kill(&mut self) {
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

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

/// One handler's start, as its worker printed it (times in ms since the epoch).
#[derive(Clone, Debug)]
pub struct Start {
    pub worker: String,
    pub attempt: u32,
    /// The library's figures: the claim's time and the job's due time, on the queue's
    /// clock.
    pub claimed: u64,
    pub due: u64,
    /// The handler's own reading of the clock.
    pub started: u64,
}

/// What the workers said: per id, each start and how many ended.
#[derive(Default)]
pub struct Log {
    pub starts: BTreeMap<String, Vec<Start>>,
    pub ends: BTreeMap<String, usize>,
}

pub fn read_log(workers: &[Proc]) -> Log {
    let mut log = Log::default();
    for worker in workers {
        for line in worker.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[..] {
                ["start", id, attempt, claimed, due, started] => {
                    log.starts.entry(id.to_string()).or_default().push(Start {
                        worker: worker.name.clone(),
                        attempt: attempt.parse().unwrap(),
                        claimed: claimed.parse().unwrap(),
                        due: due.parse().unwrap(),
                        started: started.parse().unwrap(),
                    })
                }
                ["end", id, _] => *log.ends.entry(id.to_string()).or_default() += 1,
                _ => {}
            }
        }
    }
    // In the order they were delivered, whichever worker printed them.
    for starts in log.starts.values_mut() {
        starts.sort_by_key(|s| (s.attempt, s.claimed));
    }
    log
}

/// The ids in flight (claimed under a lease, not acked) in queue `name`, as Redis holds
/// them now.
pub fn in_flight(url: &str, name: &str) -> BTreeSet<String> {
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
pub fn cut_off_by_the_crash(
    starts: &[Start],
    crash_ms: u64,
    first_on: Option<&str>,
    in_flight: (&BTreeSet<String>, u64),
    id: &str,
) -> bool {
    let [first, second] = starts else {
        return false;
    };
    let (flight, snapshot_ms) = in_flight;
    first.claimed <= crash_ms
        && second.claimed >= crash_ms
        && first_on.is_none_or(|w| first.worker == w && second.worker != w)
        && (flight.contains(id) || first.claimed >= snapshot_ms)
}

/// The due time each scheduler asked for, by id: printed before the batch was sent, so a
/// job stored by a scheduler killed before it heard back has one too.
pub fn asked(schedulers: &[Proc]) -> BTreeMap<String, u64> {
    schedulers
        .iter()
        .flat_map(|s| s.lines())
        .filter_map(|l| {
            let (id, due) = l.strip_prefix("asking ")?.split_once(' ')?;
            Some((id.to_string(), due.parse().ok()?))
        })
        .collect()
}

pub fn confirmed(schedulers: &[Proc]) -> BTreeSet<String> {
    schedulers
        .iter()
        .flat_map(|s| s.lines())
        .filter_map(|l| l.strip_prefix("scheduled ").map(str::to_string))
        .collect()
}

/// Waits until every confirmed job was handled and the queue is empty.
pub fn wait_until_done(
    url: &str,
    name: &str,
    workers: &[Proc],
    schedulers: &[Proc],
    limit: Duration,
) {
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

/// Checks the log: 0 lost, no handler before the due time asked for (`asked`) by its
/// own clock, duplicates only where `may_repeat` says a handler had started; returns how
/// many jobs were handled twice or more. A job first seen at a later attempt must have
/// been claimed after `crash_ms`: its first claim's answer died with a worker or a
/// connection, so no handler started.
pub fn check(
    log: &Log,
    confirmed: &BTreeSet<String>,
    asked: &BTreeMap<String, u64>,
    crash_ms: u64,
    may_repeat: impl Fn(&str, &[Start]) -> bool,
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
        let asked_due = asked
            .get(id)
            .unwrap_or_else(|| panic!("{id} was handled, but no scheduler asked for it"));
        for s in starts {
            assert!(
                s.claimed >= s.due,
                "{id} handed to {} (attempt {}) at {}, before its due time {}",
                s.worker,
                s.attempt,
                s.claimed,
                s.due
            );
            assert!(
                s.started >= *asked_due,
                "{id}'s handler in {} (attempt {}) started at {}, {} ms before the due time \
                 asked for",
                s.worker,
                s.attempt,
                s.started,
                asked_due - s.started
            );
        }
        if starts.len() > 1 {
            repeated += 1;
            assert!(
                may_repeat(id, starts),
                "{id} was delivered {} times with no crash to explain it: {starts:?}",
                starts.len()
            );
        } else if starts[0].attempt != 1 {
            assert!(
                starts[0].claimed >= crash_ms,
                "{id}: first seen at attempt {} before any crash",
                starts[0].attempt
            );
        }
    }
    repeated
}
