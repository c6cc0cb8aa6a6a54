//! Issue 11's benchmark: a port of Kafka's `TestPurgatoryPerformance`, one child process
//! per run.
//!
//! Requests arrive as a Poisson process at a target rate. Each watches 3 keys of 100
//! until its condition holds, or 200 ms. When its condition comes to hold is drawn from a
//! log-normal distribution (median and 75th percentile given); if that is before the
//! timeout, a completer thread acts then:
//!
//! - `check` mode (the issue's): sets the request's flag, then checks its three keys;
//!   `check(key)` re-runs every condition watching the key, so the work per request grows
//!   with the rate (the number watching each key), and the total with its square;
//! - `force` mode (Kafka's own benchmark): completes the request directly, as Kafka's
//!   `CompletionQueue` calls `forceComplete()`; no condition is re-run, the work is
//!   linear in the rate.
//!
//! As in Kafka's benchmark, the random draws are made before the clock starts. The
//! generator hands requests to the completer, and both sleep, in rounds of at least
//! [`ROUND`], and the completer's agenda has [`SLOT`]-wide buckets: the lateness of
//! completions includes up to 0.5 ms of the harness's own.
//!
//! Reported: target and achieved request rates, process CPU, peak RSS, how late
//! completions and expiries were, how many requests were never to complete (their
//! condition comes after the timeout: they must expire), and what is still watched at
//! the end.
//!
//! - `tickless`: [`tickless::purgatory::Purgatory`], each request a `DelayedOperation`
//!   whose hooks record its outcome (no task per request), on a thread-driven timer.
//! - `tokio`: the same service as Rust users build it today: a sharded map of key to
//!   waiters, each a condition and a `tokio::sync::oneshot` sender, and a task per request
//!   awaiting `tokio::time::timeout` on its receiver (2 worker threads).
//! - `harness`: the generator and the completer alone, with no purgatory: their own
//!   CPU, which every other run's includes.
//! - [`threshold`]: [`tickless::purgatory::ThresholdPurgatory`]: each request waits until
//!   its key's high watermark passes its offset; the completer advances the watermark to
//!   each offset when its replication completes (callbacks, no task).

use crate::{answer, cpu_time, ms};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tickless::purgatory::{DelayedOperation, Outcome, Purgatory, ThresholdPurgatory};

const KEYS: u64 = 100;
const KEYS_PER_REQUEST: usize = 3;
const TIMEOUT: Duration = Duration::from_millis(200);
/// The shortest sleep of the generator and the completer, and how often the generator
/// hands its requests over: as an event loop would, so the harness does not wake once
/// per request.
const ROUND: Duration = Duration::from_micros(200);
/// Samples drawn before the run (Kafka's benchmark draws 1,000,000 of each).
const SAMPLES: usize = 1 << 16;

/// Deterministic randomness (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// The run's random draws: arrival gaps (exponential: a Poisson process), times until a
/// request's condition holds (log-normal with the given median and 75th percentile, as
/// Kafka's benchmark models them), and keys.
struct Samples {
    gaps: Vec<Duration>,
    latencies: Vec<Duration>,
    rng: Rng,
}

impl Samples {
    fn new(rate: f64, p50_ms: f64, p75_ms: f64) -> Self {
        let mut rng = Rng(7);
        let gaps = (0..SAMPLES)
            .map(|_| Duration::from_secs_f64(-rng.unit().ln() / rate))
            .collect();
        let mu = p50_ms.ln();
        let sigma = (p75_ms.ln() - mu) / 0.674_490;
        let latencies = (0..SAMPLES)
            .map(|_| {
                // Box-Muller.
                let normal = (-2.0 * rng.unit().ln()).sqrt()
                    * (2.0 * std::f64::consts::PI * rng.unit()).cos();
                Duration::from_secs_f64((mu + sigma * normal).exp() / 1e3)
            })
            .collect();
        Samples {
            gaps,
            latencies,
            rng,
        }
    }

    fn pick<T: Copy>(rng: &mut Rng, from: &[T]) -> T {
        from[(rng.next() % from.len() as u64) as usize]
    }

    fn gap(&mut self) -> Duration {
        Self::pick(&mut self.rng, &self.gaps)
    }

    fn latency(&mut self) -> Duration {
        Self::pick(&mut self.rng, &self.latencies)
    }

    fn key(&mut self) -> u64 {
        self.rng.next() % KEYS
    }
}

/// Something the completer is to do at a time.
struct Due<A> {
    at: Instant,
    action: A,
}

/// The completer's agenda: a ring of [`SLOT`]-wide buckets over the timeout (whatever
/// is due later than that is never handed over), so that handing over and taking out
/// are O(1) and cost the harness little.
struct Agenda<A> {
    ring: Mutex<Ring<A>>,
    stop: AtomicBool,
}

struct Ring<A> {
    start: Instant,
    /// The first bucket not yet taken out, as a count of slots since `start`.
    next: u64,
    buckets: Vec<Vec<A>>,
    /// How many actions the buckets hold.
    held: usize,
}

/// The width of one bucket of the agenda.
const SLOT: Duration = Duration::from_micros(100);

impl<A: Send + 'static> Agenda<A> {
    fn new() -> Arc<Self> {
        let slots = (TIMEOUT.as_nanos() / SLOT.as_nanos()) as usize * 2;
        Arc::new(Agenda {
            ring: Mutex::new(Ring {
                start: Instant::now(),
                next: 0,
                buckets: (0..slots).map(|_| Vec::new()).collect(),
                held: 0,
            }),
            stop: AtomicBool::new(false),
        })
    }

    fn hand_over(&self, batch: &mut Vec<Due<A>>) {
        if batch.is_empty() {
            return;
        }
        let mut ring = self.ring.lock().unwrap();
        let len = ring.buckets.len() as u64;
        ring.held += batch.len();
        for due in batch.drain(..) {
            // Rounded up: never done before its time.
            let slot = due
                .at
                .saturating_duration_since(ring.start)
                .as_nanos()
                .div_ceil(SLOT.as_nanos()) as u64;
            let slot = slot.max(ring.next);
            ring.buckets[(slot % len) as usize].push(due.action);
        }
    }

    /// The completer's thread: does each action when its time comes, until stopped with
    /// nothing left.
    fn complete(
        self: &Arc<Self>,
        mut act: impl FnMut(A) + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let agenda = self.clone();
        std::thread::spawn(move || {
            let mut due = Vec::new();
            loop {
                let empty = {
                    let mut ring = agenda.ring.lock().unwrap();
                    let now = (Instant::now() - ring.start).as_nanos() / SLOT.as_nanos();
                    let len = ring.buckets.len() as u64;
                    while u128::from(ring.next) <= now {
                        let slot = (ring.next % len) as usize;
                        due.append(&mut ring.buckets[slot]);
                        ring.next += 1;
                    }
                    ring.held -= due.len();
                    ring.held == 0
                };
                due.drain(..).for_each(&mut act);
                if empty && agenda.stop.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(ROUND);
            }
        })
    }
}

/// Issues `count` requests at their arrival times through `issue(now, arrival, batch)`,
/// which may add to `batch` what the completer is to do; hands the batch over each round.
/// Returns how long issuing took.
fn generate<A: Send + 'static>(
    count: u64,
    samples: &mut Samples,
    agenda: &Agenda<A>,
    mut issue: impl FnMut(&mut Samples, Instant, Instant, &mut Vec<Due<A>>),
) -> Duration {
    let start = Instant::now();
    let mut arrival = start;
    let mut batch = Vec::new();
    let mut handed = start;
    for _ in 0..count {
        arrival += samples.gap();
        let mut now = Instant::now();
        if arrival > now + ROUND {
            agenda.hand_over(&mut batch);
            std::thread::sleep(arrival - now);
            now = Instant::now();
            handed = now;
        } else if now > handed + ROUND {
            agenda.hand_over(&mut batch);
            handed = now;
        }
        issue(samples, now, arrival, &mut batch);
    }
    agenda.hand_over(&mut batch);
    start.elapsed()
}

/// How late each completion and expiry came.
#[derive(Default)]
struct Lateness {
    completed: Mutex<Vec<u32>>,
    expired: Mutex<Vec<u32>>,
    done: AtomicUsize,
}

impl Lateness {
    fn record(&self, completed: bool, late: Duration) {
        let list = if completed {
            &self.completed
        } else {
            &self.expired
        };
        list.lock()
            .unwrap()
            .push(late.as_micros().min(u32::MAX as u128) as u32);
        self.done.fetch_add(1, Ordering::Release);
    }

    /// Waits until `count` requests have ended (completed or expired): within the
    /// timeout and a margin, or it reports what was lost.
    fn wait_for(&self, count: u64) {
        let waited = Instant::now();
        while self.done.load(Ordering::Acquire) < count as usize {
            if waited.elapsed() > TIMEOUT * 25 {
                eprintln!(
                    "lost: {} of {count} requests never ended",
                    count as usize - self.done.load(Ordering::Acquire)
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Kafka's `FakeOperation`: completes once its flag is set (`check` mode), or when forced.
struct Fake {
    flag: Arc<AtomicBool>,
    completes_at: Instant,
    deadline: Instant,
    lateness: Arc<Lateness>,
}

impl DelayedOperation for Fake {
    type Output = ();

    fn try_complete(&mut self) -> Option<()> {
        self.flag.load(Ordering::Acquire).then_some(())
    }

    fn on_complete(&mut self, (): ()) {
        let late = Instant::now().saturating_duration_since(self.completes_at);
        self.lateness.record(true, late);
    }

    fn on_expiration(&mut self) {
        let late = Instant::now().saturating_duration_since(self.deadline);
        self.lateness.record(false, late);
    }
}

/// The peer's waiters under one key.
type PeerWaiters = HashMap<u64, Vec<Arc<PeerWaiter>>>;

struct PeerWaiter {
    flag: Arc<AtomicBool>,
    sender: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl PeerWaiter {
    /// Completes it unless it has been: `true` if this did.
    fn complete(&self) -> bool {
        match self.sender.lock().unwrap().take() {
            Some(sender) => sender.send(()).is_ok(),
            None => false,
        }
    }
}

/// The peer's `check(key)`: runs the conditions under `key`, completes and drops the
/// true ones, and drops those whose request is gone (completed, or timed out).
fn peer_check(shards: &[Mutex<PeerWaiters>], key: u64) -> usize {
    let mut shard = shards[key as usize % shards.len()].lock().unwrap();
    let Some(waiters) = shard.get_mut(&key) else {
        return 0;
    };
    let mut completed = 0;
    waiters.retain(|waiter| {
        let mut sender = waiter.sender.lock().unwrap();
        match &*sender {
            None => false,
            Some(open) if open.is_closed() => false,
            Some(_) if waiter.flag.load(Ordering::Acquire) => {
                let _ = sender.take().unwrap().send(());
                completed += 1;
                false
            }
            Some(_) => true,
        }
    });
    completed
}

/// One run of the general-condition benchmark (`force`: Kafka's completer, which forces
/// completions, instead of checking keys); prints its readings.
pub fn general(peer: &str, force: bool, rate: f64, count: u64, p50: f64, p75: f64) {
    let mut samples = Samples::new(rate, p50, p75);
    let lateness = Arc::new(Lateness::default());
    let mut unserved = 0;
    let cpu = cpu_time();
    let (elapsed, left) = match peer {
        "tickless" => {
            let timer = tickless::Timer::builder()
                .driver(tickless::Driver::Thread)
                .build()
                .expect("a timer");
            let purgatory: Purgatory<u64, ()> = Purgatory::with_timer(timer);
            let agenda = Agenda::new();
            let completer = {
                let purgatory = purgatory.clone();
                agenda.complete(move |action| match action {
                    Action::Check(flag, keys) => {
                        flag.store(true, Ordering::Release);
                        for key in &keys {
                            purgatory.check(key);
                        }
                    }
                    Action::Force(handle) => {
                        let _ = handle.force_complete(());
                    }
                })
            };
            let elapsed = generate(count, &mut samples, &agenda, |samples, now, at, batch| {
                let keys = [(); KEYS_PER_REQUEST].map(|_| samples.key());
                let completes_at = at + samples.latency();
                let flag = Arc::new(AtomicBool::new(false));
                let op = Fake {
                    flag: flag.clone(),
                    completes_at,
                    deadline: now + TIMEOUT,
                    lateness: lateness.clone(),
                };
                let handle = purgatory.watch_operation(keys, TIMEOUT, op);
                if completes_at >= at + TIMEOUT {
                    unserved += 1;
                } else {
                    let action = if force {
                        Action::Force(handle)
                    } else {
                        Action::Check(flag, keys)
                    };
                    batch.push(Due {
                        at: completes_at,
                        action,
                    });
                }
            });
            lateness.wait_for(count);
            agenda.stop.store(true, Ordering::Release);
            completer.join().unwrap();
            (elapsed, (purgatory.watched(), purgatory.delayed()))
        }
        "harness" => {
            // The harness alone: the same generator and completer, no purgatory; what it
            // costs is in every other run's CPU too.
            let agenda = Agenda::new();
            let completer = {
                let lateness = lateness.clone();
                agenda.complete(move |completes_at: Instant| {
                    lateness.record(true, Instant::now().saturating_duration_since(completes_at));
                })
            };
            let elapsed = generate(count, &mut samples, &agenda, |samples, _, at, batch| {
                let _keys = [(); KEYS_PER_REQUEST].map(|_| samples.key());
                let completes_at = at + samples.latency();
                if completes_at >= at + TIMEOUT {
                    unserved += 1;
                    lateness.record(false, Duration::ZERO);
                } else {
                    batch.push(Due {
                        at: completes_at,
                        action: completes_at,
                    });
                }
            });
            lateness.wait_for(count);
            agenda.stop.store(true, Ordering::Release);
            completer.join().unwrap();
            (elapsed, (0, 0))
        }
        _ => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time()
                .build()
                .expect("a runtime");
            let shards: Arc<Vec<Mutex<PeerWaiters>>> =
                Arc::new((0..8).map(|_| Mutex::new(HashMap::new())).collect());
            let agenda = Agenda::new();
            let completer = {
                let shards = shards.clone();
                agenda.complete(move |action: PeerAction| match action {
                    PeerAction::Check(flag, keys) => {
                        flag.store(true, Ordering::Release);
                        for key in keys {
                            peer_check(&shards, key);
                        }
                    }
                    PeerAction::Force(waiter) => {
                        waiter.complete();
                    }
                })
            };
            let handle = runtime.handle().clone();
            let elapsed = generate(count, &mut samples, &agenda, |samples, now, at, batch| {
                let keys = [(); KEYS_PER_REQUEST].map(|_| samples.key());
                let completes_at = at + samples.latency();
                let flag = Arc::new(AtomicBool::new(false));
                let (sender, receiver) = tokio::sync::oneshot::channel();
                let waiter = Arc::new(PeerWaiter {
                    flag: flag.clone(),
                    sender: Mutex::new(Some(sender)),
                });
                // tryCompleteElseWatch: try, watch under each key, try again.
                let try_complete =
                    |waiter: &PeerWaiter| waiter.flag.load(Ordering::Acquire) && waiter.complete();
                if !try_complete(&waiter) {
                    for key in keys {
                        shards[key as usize % shards.len()]
                            .lock()
                            .unwrap()
                            .entry(key)
                            .or_default()
                            .push(waiter.clone());
                    }
                    try_complete(&waiter);
                }
                let (lateness, shards, mine) = (lateness.clone(), shards.clone(), waiter.clone());
                let deadline = now + TIMEOUT;
                handle.spawn(async move {
                    let outcome = tokio::time::timeout(TIMEOUT, receiver).await;
                    let now = Instant::now();
                    match outcome {
                        Ok(_) => lateness.record(true, now.saturating_duration_since(completes_at)),
                        Err(_) => lateness.record(false, now.saturating_duration_since(deadline)),
                    }
                    if force {
                        // Nobody checks the keys: leave them, as a user would.
                        for key in keys {
                            let mut shard = shards[key as usize % shards.len()].lock().unwrap();
                            if let Some(waiters) = shard.get_mut(&key) {
                                waiters.retain(|w| !Arc::ptr_eq(w, &mine));
                                if waiters.is_empty() {
                                    shard.remove(&key);
                                }
                            }
                        }
                    }
                });
                if completes_at >= at + TIMEOUT {
                    unserved += 1;
                } else {
                    let action = if force {
                        PeerAction::Force(waiter)
                    } else {
                        PeerAction::Check(flag, keys)
                    };
                    batch.push(Due {
                        at: completes_at,
                        action,
                    });
                }
            });
            lateness.wait_for(count);
            agenda.stop.store(true, Ordering::Release);
            completer.join().unwrap();
            // What the map still holds: waiters of requests that are gone (a check of
            // their key would drop them).
            let left: usize = shards
                .iter()
                .map(|shard| shard.lock().unwrap().values().map(Vec::len).sum::<usize>())
                .sum();
            drop(runtime);
            (elapsed, (left, 0))
        }
    };
    report(rate, count, elapsed, cpu, &lateness, left, unserved);
}

/// What tickless's completer does for a request.
enum Action {
    Check(Arc<AtomicBool>, [u64; KEYS_PER_REQUEST]),
    Force(tickless::purgatory::OperationHandle<u64, ()>),
}

/// What the peer's completer does for a request.
enum PeerAction {
    Check(Arc<AtomicBool>, [u64; KEYS_PER_REQUEST]),
    Force(Arc<PeerWaiter>),
}

/// One run of the threshold benchmark: each request waits until its key's high
/// watermark passes its offset; prints its readings.
pub fn threshold(rate: f64, count: u64, p50: f64, p75: f64) {
    let mut samples = Samples::new(rate, p50, p75);
    let lateness = Arc::new(Lateness::default());
    let cpu = cpu_time();
    let timer = tickless::Timer::builder()
        .driver(tickless::Driver::Thread)
        .build()
        .expect("a timer");
    let watermarks: ThresholdPurgatory<u64> = ThresholdPurgatory::with_timer(timer);
    // When an offset's replication completes, the completer advances its key's watermark
    // to it (completing the waits for it and for every earlier offset still waiting: a
    // watermark only moves forward).
    let agenda = Agenda::new();
    let completer = {
        let watermarks = watermarks.clone();
        agenda.complete(move |(key, offset): (u64, u64)| {
            watermarks.advance(&key, offset);
        })
    };
    let mut offsets = vec![0_u64; KEYS as usize];
    let mut unserved = 0;
    let elapsed = generate(count, &mut samples, &agenda, |samples, now, at, batch| {
        let key = samples.key();
        offsets[key as usize] += 1;
        let offset = offsets[key as usize];
        let replicated = at + samples.latency();
        let deadline = now + TIMEOUT;
        let lateness = lateness.clone();
        let _ = watermarks.wait_then(key, offset, TIMEOUT, move |outcome| {
            let now = Instant::now();
            match outcome {
                Outcome::Completed(_) => {
                    lateness.record(true, now.saturating_duration_since(replicated))
                }
                _ => lateness.record(false, now.saturating_duration_since(deadline)),
            }
        });
        if replicated >= at + TIMEOUT {
            unserved += 1;
        } else {
            batch.push(Due {
                at: replicated,
                action: (key, offset),
            });
        }
    });
    lateness.wait_for(count);
    agenda.stop.store(true, Ordering::Release);
    completer.join().unwrap();
    let left = (watermarks.waiting(), 0);
    report(rate, count, elapsed, cpu, &lateness, left, unserved);
}

fn report(
    rate: f64,
    count: u64,
    elapsed: Duration,
    started_cpu: Duration,
    lateness: &Lateness,
    left: (usize, usize),
    unserved: u64,
) {
    let cpu = cpu_time() - started_cpu;
    let sorted = |list: &Mutex<Vec<u32>>| {
        let mut list = std::mem::take(&mut *list.lock().unwrap());
        list.sort_unstable();
        list
    };
    let (completed, expired) = (sorted(&lateness.completed), sorted(&lateness.expired));
    let quantile = |list: &[u32], q: f64| match list.len() {
        0 => 0.0,
        n => list[((n - 1) as f64 * q).round() as usize] as f64 / 1e3,
    };
    answer(&[
        ("target_rate", rate),
        ("achieved_rate", count as f64 / elapsed.as_secs_f64()),
        ("cpu_ms", ms(cpu)),
        ("cpu_us_per_request", ms(cpu) * 1e3 / count as f64),
        ("peak_rss_mb", crate::peak_rss_bytes() as f64 / 1e6),
        ("completed", completed.len() as f64),
        ("expired", expired.len() as f64),
        ("unserved", unserved as f64),
        (
            "lost",
            count.saturating_sub((completed.len() + expired.len()) as u64) as f64,
        ),
        ("completion_p50_ms", quantile(&completed, 0.5)),
        ("completion_p99_ms", quantile(&completed, 0.99)),
        ("expiry_p50_ms", quantile(&expired, 0.5)),
        ("expiry_p99_ms", quantile(&expired, 0.99)),
        ("left_watched", left.0 as f64),
        ("left_delayed", left.1 as f64),
    ]);
}
