//! What the demo and the benchmark suite (`benches/`) read of the process: CPU time and
//! resident memory from Linux's `/proc`, and a deterministic spread of deadlines.

use std::time::Duration;

/// A deterministic spread of offsets in `[0, max)` (splitmix64).
pub fn spread(i: u64, max: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % max
}

/// Resident set size in bytes (Linux `/proc`; 0 elsewhere).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// User + system CPU time of the whole process, every thread included, dead or alive
/// (Linux `/proc`, in units of 10 ms; zero elsewhere).
pub fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // After the command name: state, ppid, ..., utime and stime are the 12th and
            // 13th fields (`proc(5)`: fields 14 and 15).
            let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}
