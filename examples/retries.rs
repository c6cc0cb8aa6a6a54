//! A client with per-request deadlines and exponential-backoff retries, built on callbacks.
//!
//! Each request is sent to a simulated flaky server: an answer comes after a random
//! latency, or never (a dropped packet). Each attempt has a timeout; when it fires first,
//! the request is retried after a backoff that doubles each time (with jitter), unless the
//! request's overall deadline would pass first, and then it times out. An answer and its
//! attempt's timeout race: whichever callback gets there first wins, and cancels the other.
//! No task, future or `Sleep` per request: three scheduled callbacks at most.
//!
//! ```text
//! cargo run --release --example retries            # 20,000 requests
//! cargo run --release --example retries -- 100000
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tickless::Instant;
use tickless::{Scheduled, Timer};

const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(50);
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const DEADLINE: Duration = Duration::from_millis(400);
/// The simulated server drops one packet in five, and answers within 80 ms otherwise.
const DROP_ONE_IN: u64 = 5;
const MAX_LATENCY_MS: u64 = 80;

#[derive(Default)]
struct Counts {
    completed_first_try: AtomicU64,
    completed_after_retry: AtomicU64,
    retries: AtomicU64,
    timed_out: AtomicU64,
}

/// Where one request stands.
enum Attempt {
    /// Waiting for the answer to attempt `n`, whose timeout is `timeout`.
    Waiting {
        n: u32,
        timeout: Option<Scheduled>,
    },
    /// Not sent yet, or waiting out a backoff before the next attempt.
    BackingOff,
    Done,
}

struct Request {
    id: u64,
    deadline: Instant,
    attempt: Mutex<Attempt>,
}

struct Client {
    timer: Timer,
    counts: Counts,
    finished: tokio::sync::Notify,
    outstanding: AtomicU64,
}

/// A deterministic spread (splitmix64) standing in for the network's randomness.
fn random(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Client {
    fn send(self: &Arc<Self>, request: Arc<Request>, n: u32) {
        let roll = random(request.id * 31 + u64::from(n));
        // The attempt's timeout first, so that an instant answer finds it to cancel.
        let timeout = {
            let (client, request) = (self.clone(), request.clone());
            self.timer
                .schedule(ATTEMPT_TIMEOUT, move || client.timed_out(&request, n))
                .expect("no limit on this timer")
        };
        *request.attempt.lock().unwrap() = Attempt::Waiting {
            n,
            timeout: Some(timeout),
        };
        if roll % DROP_ONE_IN != 0 {
            let latency = Duration::from_millis(roll / DROP_ONE_IN % MAX_LATENCY_MS);
            let client = self.clone();
            let _ = self
                .timer
                .schedule(latency, move || client.answered(&request, n))
                .expect("no limit on this timer");
        }
    }

    /// The answer to attempt `n` arrived: done, unless that attempt already timed out.
    fn answered(&self, request: &Request, n: u32) {
        let mut attempt = request.attempt.lock().unwrap();
        if let Attempt::Waiting {
            n: waiting,
            timeout,
        } = &mut *attempt
        {
            if *waiting == n && timeout.take().is_some_and(|timeout| timeout.cancel()) {
                *attempt = Attempt::Done;
                drop(attempt);
                let counter = if n == 1 {
                    &self.counts.completed_first_try
                } else {
                    &self.counts.completed_after_retry
                };
                counter.fetch_add(1, Ordering::Relaxed);
                self.finish_one();
            }
        }
    }

    /// Attempt `n` got no answer in time: back off and retry, or give up.
    fn timed_out(self: &Arc<Self>, request: &Arc<Request>, n: u32) {
        let mut attempt = request.attempt.lock().unwrap();
        if !matches!(*attempt, Attempt::Waiting { n: waiting, .. } if waiting == n) {
            return; // the answer won the race
        }
        let backoff = FIRST_BACKOFF * 2_u32.pow(n - 1);
        let jitter = Duration::from_millis(random(request.id ^ u64::from(n)) % 5);
        let retry_at = self.timer.now() + backoff + jitter;
        if retry_at + ATTEMPT_TIMEOUT > request.deadline {
            *attempt = Attempt::Done;
            drop(attempt);
            self.counts.timed_out.fetch_add(1, Ordering::Relaxed);
            return self.finish_one();
        }
        *attempt = Attempt::BackingOff;
        drop(attempt);
        self.counts.retries.fetch_add(1, Ordering::Relaxed);
        let (client, request) = (self.clone(), request.clone());
        let _ = self
            .timer
            .schedule_at(retry_at, move || client.send(request, n + 1))
            .expect("no limit on this timer");
    }

    fn finish_one(&self) {
        if self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finished.notify_one();
        }
    }
}

#[tokio::main]
async fn main() {
    let requests: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let client = Arc::new(Client {
        timer: Timer::new(),
        counts: Counts::default(),
        finished: tokio::sync::Notify::new(),
        outstanding: AtomicU64::new(requests),
    });
    let start = std::time::Instant::now();
    for id in 0..requests {
        let request = Arc::new(Request {
            id,
            deadline: client.timer.now() + DEADLINE,
            attempt: Mutex::new(Attempt::BackingOff),
        });
        client.send(request, 1);
    }
    client.finished.notified().await;
    let counts = &client.counts;
    let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let first = get(&counts.completed_first_try);
    let after = get(&counts.completed_after_retry);
    let timed_out = get(&counts.timed_out);
    println!("{requests} requests in {:.0?}", start.elapsed());
    println!(
        "  completed:      {} ({first} on the first try, {after} after retrying)",
        first + after
    );
    println!("  retries:        {}", get(&counts.retries));
    println!("  timed out:      {timed_out} (their {DEADLINE:?} deadline would have passed)");
    let stats = client.timer.stats();
    println!(
        "  callbacks run:  {} ({} still pending: answers that lost the race)",
        stats.callbacks_fired,
        client.timer.pending()
    );
    assert_eq!(
        first + after + timed_out,
        requests,
        "every request ends once"
    );
}
