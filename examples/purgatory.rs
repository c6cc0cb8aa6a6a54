//! A replicated log with `acks=all`, on a [`ThresholdPurgatory`].
//!
//! A leader holds 8 partitions, each copied by 3 followers that fetch every few
//! milliseconds. A produce request appends a record to a partition and waits until 2 of
//! the 3 followers have fetched past it (the partition's high watermark passes its
//! offset), or 200 ms pass: Kafka's `acks=all` with `min.insync.replicas = 2`, waiting in
//! its produce purgatory. Each follower's fetch raises the high watermark, which
//! completes exactly the requests it satisfies, without looking at the others.
//!
//! To show expiries too, partition 0 is short of replicas: its third follower is down for
//! the whole run, and its second stalls for 300 ms every 2 s; requests to partition 0
//! made during a stall wait for it, and those that would wait past 200 ms expire.
//!
//! ```text
//! cargo run --release --example purgatory                  # 100,000 requests/s for 5 s
//! cargo run --release --example purgatory -- 300000 10     # requests/s, seconds
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickless::purgatory::{Outcome, ThresholdPurgatory};

const PARTITIONS: u64 = 8;
const FOLLOWERS: usize = 3;
/// How many followers must have a record before its request is acknowledged.
const ACKS: usize = 2;
const TIMEOUT: Duration = Duration::from_millis(200);
/// Followers fetch every 1 to 3 ms.
const FETCH_MIN_US: u64 = 1_000;
const FETCH_SPREAD_US: u64 = 2_000;
const STALL_EVERY: Duration = Duration::from_secs(2);
const STALL_FOR: Duration = Duration::from_millis(300);
/// Latencies are kept in 10 µs buckets up to 300 ms.
const BUCKET_US: u64 = 10;
const BUCKETS: usize = 30_000;

/// A deterministic spread (splitmix64) standing in for the traffic's randomness.
fn random(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A partition on the leader: where its log ends, and where each follower's copy does.
#[derive(Default)]
struct Partition {
    log_end: AtomicU64,
    fetched: [AtomicU64; FOLLOWERS],
}

impl Partition {
    /// The high watermark: the offset `ACKS` followers have all fetched up to.
    fn high_watermark(&self) -> u64 {
        let mut fetched = self.fetched.each_ref().map(|f| f.load(Ordering::Acquire));
        fetched.sort_unstable();
        fetched[FOLLOWERS - ACKS]
    }
}

/// A lock-free latency histogram.
struct Histogram(Box<[AtomicU64]>);

impl Histogram {
    fn new() -> Self {
        Histogram((0..BUCKETS).map(|_| AtomicU64::new(0)).collect())
    }

    fn record(&self, latency: Duration) {
        let bucket = (latency.as_micros() as u64 / BUCKET_US).min(BUCKETS as u64 - 1);
        self.0[bucket as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn count(&self) -> u64 {
        self.0.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The latency below which a fraction `q` of the records fall (to a bucket's width).
    fn quantile(&self, q: f64) -> Duration {
        let rank = (self.count() as f64 * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, count) in self.0.iter().enumerate() {
            seen += count.load(Ordering::Relaxed);
            if seen >= rank {
                return Duration::from_micros((bucket as u64 + 1) * BUCKET_US);
            }
        }
        Duration::ZERO
    }
}

struct Leader {
    partitions: Vec<Partition>,
    acked: ThresholdPurgatory<u64>,
    start: Instant,
    issued: AtomicU64,
    completed: Histogram,
    /// How long past its deadline each expired request was told.
    expired: Histogram,
}

impl Leader {
    /// Whether follower `follower` of `partition` is down at `elapsed`.
    fn is_down(&self, partition: u64, follower: usize, elapsed: Duration) -> bool {
        match (partition, follower) {
            (0, 2) => true,
            (0, 1) => {
                let into = elapsed.as_nanos() % STALL_EVERY.as_nanos();
                elapsed >= STALL_EVERY && into < STALL_FOR.as_nanos()
            }
            _ => false,
        }
    }

    /// A produce request: append one record, wait until `ACKS` followers have it.
    async fn produce(&self, partition: u64) {
        let sent = Instant::now();
        let offset = self.partitions[partition as usize]
            .log_end
            .fetch_add(1, Ordering::AcqRel);
        match self.acked.wait(partition, offset + 1, TIMEOUT).await {
            Outcome::Completed(_) => self.completed.record(sent.elapsed()),
            Outcome::Expired => self.expired.record(sent.elapsed().saturating_sub(TIMEOUT)),
            Outcome::Cancelled => unreachable!("nothing cancels a produce request"),
        }
    }

    /// A follower fetching until `stop`: copies the log to its end, and raises the high
    /// watermark.
    async fn follow(&self, partition: u64, follower: usize, stop: Instant) {
        let p = &self.partitions[partition as usize];
        let mut fetch = 0;
        while Instant::now() < stop || self.acked.waiting() > 0 {
            fetch += 1;
            let seed = partition * 1_000_003 + follower as u64 * 7_919 + fetch;
            let wait = FETCH_MIN_US + random(seed) % FETCH_SPREAD_US;
            tickless::sleep(Duration::from_micros(wait)).await;
            if self.is_down(partition, follower, self.start.elapsed()) {
                continue;
            }
            let end = p.log_end.load(Ordering::Acquire);
            p.fetched[follower].fetch_max(end, Ordering::AcqRel);
            self.acked.advance(&partition, p.high_watermark());
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let rate = args.next().and_then(Result::ok).unwrap_or(100_000);
    let seconds = args.next().and_then(Result::ok).unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(rate, seconds));
}

async fn run(rate: u64, seconds: u64) {
    println!(
        "{PARTITIONS} partitions x {FOLLOWERS} followers, acks={ACKS}, timeout {TIMEOUT:?}; \
         {rate} produce requests/s for {seconds} s"
    );
    println!(
        "partition 0: follower 2 down, follower 1 stalls {STALL_FOR:?} every {STALL_EVERY:?}\n"
    );
    let leader = Arc::new(Leader {
        partitions: (0..PARTITIONS).map(|_| Partition::default()).collect(),
        acked: ThresholdPurgatory::new(),
        start: Instant::now(),
        issued: AtomicU64::new(0),
        completed: Histogram::new(),
        expired: Histogram::new(),
    });
    let stop = leader.start + Duration::from_secs(seconds);
    let followers: Vec<_> = (0..PARTITIONS)
        .flat_map(|p| (0..FOLLOWERS).map(move |f| (p, f)))
        .map(|(p, f)| {
            let leader = leader.clone();
            tokio::spawn(async move { leader.follow(p, f, stop).await })
        })
        .collect();

    // Requests arrive in 1 ms batches, catching up if a batch was late.
    let mut ticks = tickless::interval(Duration::from_millis(1));
    let mut requests = Vec::new();
    let mut next_report = Duration::from_millis(500);
    let mut reported = (0, 0, 0);
    loop {
        ticks.tick().await;
        let elapsed = leader.start.elapsed();
        if elapsed >= Duration::from_secs(seconds) {
            break;
        }
        let due = (elapsed.as_secs_f64() * rate as f64) as u64;
        let issued = leader.issued.load(Ordering::Relaxed);
        for n in issued..due {
            let leader = leader.clone();
            requests.push(tokio::spawn(async move {
                leader.produce(random(n) % PARTITIONS).await
            }));
        }
        leader.issued.store(due.max(issued), Ordering::Relaxed);
        if elapsed >= next_report {
            let now = (
                leader.issued.load(Ordering::Relaxed),
                leader.completed.count(),
                leader.expired.count(),
            );
            println!(
                "{:>5.1} s  {:>9} req/s  completed {:>9}  expired {:>6}  waiting {:>6}",
                elapsed.as_secs_f64(),
                (now.0 - reported.0) * 2,
                now.1 - reported.1,
                now.2 - reported.2,
                leader.acked.waiting(),
            );
            reported = now;
            next_report += Duration::from_millis(500);
        }
        if requests.len() > 100_000 {
            requests.retain(|r| !r.is_finished());
        }
    }
    let elapsed = leader.start.elapsed();
    for request in requests {
        request.await.expect("a produce request");
    }
    for follower in followers {
        follower.await.expect("a follower");
    }

    let issued = leader.issued.load(Ordering::Relaxed);
    let (completed, expired) = (leader.completed.count(), leader.expired.count());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "\n{issued} requests in {:.2} s: {:.0} requests/s ({:.1} % of the target)",
        elapsed.as_secs_f64(),
        issued as f64 / elapsed.as_secs_f64(),
        issued as f64 / elapsed.as_secs_f64() / rate as f64 * 100.0
    );
    println!(
        "  acknowledged: {completed}, latency p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
        ms(leader.completed.quantile(0.5)),
        ms(leader.completed.quantile(0.99)),
        ms(leader.completed.quantile(0.999)),
    );
    println!(
        "  expired:      {expired} (partition 0 during stalls), told p50 {:.2} ms, \
         p99 {:.2} ms after their deadline",
        ms(leader.expired.quantile(0.5)),
        ms(leader.expired.quantile(0.99)),
    );
    println!(
        "  still waiting: {} (every request ended exactly once)",
        leader.acked.waiting()
    );
    assert_eq!(completed + expired, issued, "every request ends once");
    assert_eq!(leader.acked.waiting(), 0);
}
