//! tickless's benchmark suite, in a crate of its own so that the peers it measures
//! (tokio-util, futures-timer, async-io, hierarchical_hash_wheel_timer, criterion) are
//! never built by the library's tests. `src/main.rs` is the `compare` program (every
//! workload, every peer, one run); `benches/timers.rs` runs the churn workloads under
//! criterion. This library holds what both share: the workloads, the peers, process
//! readings from `/proc`, child processes, and medians.

pub mod callbacks;
#[cfg(feature = "redis")]
pub mod durable;
#[cfg(feature = "redis")]
pub mod durable_cluster;
#[cfg(feature = "redis")]
pub mod durable_speed;
pub mod purgatory;
pub mod table;
pub mod workloads;

// Shared with `examples/million_timers.rs`, the crate's demo, which reads the same.
#[path = "../../examples/readings/mod.rs"]
mod readings;
pub use readings::{cpu_time, rss_bytes, spread};

use std::collections::HashMap;
use std::time::Duration;

/// The timers compared. `TicklessTimer` is tickless through an explicit `Timer` handle
/// (`timer.sleep(d)`): one `Timer::new()` per workload, cloned into every task, as an
/// application shares one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Tickless,
    TicklessTimer,
    Tokio,
    FuturesTimer,
    AsyncIo,
    /// pingora-timeout's `fast_timeout` / `fast_sleep`: 10 ms resolution, a clock thread.
    Pingora,
}

impl Peer {
    pub const SLEEPS: [Peer; 6] = [
        Peer::Tickless,
        Peer::TicklessTimer,
        Peer::Tokio,
        Peer::FuturesTimer,
        Peer::AsyncIo,
        Peer::Pingora,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Peer::Tickless => "tickless",
            Peer::TicklessTimer => "tickless (Timer)",
            Peer::Tokio => "tokio::time",
            Peer::FuturesTimer => "futures-timer",
            Peer::AsyncIo => "async-io",
            Peer::Pingora => "pingora-timeout",
        }
    }

    pub fn arg(self) -> &'static str {
        match self {
            Peer::Tickless => "tickless",
            Peer::TicklessTimer => "tickless-timer",
            Peer::Tokio => "tokio",
            Peer::FuturesTimer => "futures-timer",
            Peer::AsyncIo => "async-io",
            Peer::Pingora => "pingora",
        }
    }

    pub fn from_arg(arg: &str) -> Option<Peer> {
        Peer::SLEEPS.into_iter().find(|peer| peer.arg() == arg)
    }
}

/// The most resident memory the process has had, in bytes (Linux `/proc`; 0 elsewhere).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
            line.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Voluntary context switches summed over the process's live threads: how often its
/// threads went to sleep, a stand-in for wakeups that every peer can be measured by.
pub fn voluntary_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The sample at quantile `q` of sorted `values`.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let index = ((sorted.len().max(1) - 1) as f64 * q).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A child's answer: one `RESULT key=value ...` line on its stdout.
pub type Readings = HashMap<String, f64>;

/// Prints the line `child` hands back to its parent.
pub fn answer(readings: &[(&str, f64)]) {
    let fields: Vec<String> = readings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("RESULT {}", fields.join(" "));
}

/// Runs this program again as `compare --child <args>` and reads its answer, so that each
/// measurement of memory or process CPU has a process to itself.
pub fn child(args: &[&str]) -> Readings {
    let exe = std::env::current_exe().expect("the path of this program");
    let output = std::process::Command::new(exe)
        .arg("--child")
        .args(args)
        .output()
        .expect("a child run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let Some(line) = stdout.lines().find_map(|line| line.strip_prefix("RESULT ")) else {
        panic!(
            "child {args:?} gave no result ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    };
    line.split_whitespace()
        .filter_map(|field| {
            let (key, value) = field.split_once('=')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}
