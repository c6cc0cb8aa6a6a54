//! Inserts 1,000,000 items with deadlines uniform over one second (starting one second
//! out) into a `DelayQueue` and drains the stream, on tickless and then on tokio-util, in
//! the same process: overhead, lateness p50/p99/max, early count.
//!
//! ```text
//! cargo run --release --example delay_queue_drain [-- COUNT]
//! ```

use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;

const OFFSET: Duration = Duration::from_secs(1);
const SPREAD: Duration = Duration::from_secs(1);

fn spread(i: u64, max: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % max
}

fn report(name: &str, total: Duration, insert: Duration, mut lateness: Vec<Duration>, early: u64) {
    lateness.sort_unstable();
    let pick = |p: f64| lateness[((lateness.len() - 1) as f64 * p) as usize];
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    println!(
        "{name:<10} drained {}  early {early}  insert {}  overhead {}  lateness p50 {}  p99 {}  max {}",
        lateness.len(),
        ms(insert),
        ms(total.saturating_sub(OFFSET + SPREAD)),
        ms(pick(0.5)),
        ms(pick(0.99)),
        ms(pick(1.0)),
    );
}

fn deadlines(count: u64, start: Instant) -> impl Iterator<Item = Instant> {
    let micros = SPREAD.as_micros() as u64;
    (0..count).map(move |i| start + OFFSET + Duration::from_micros(spread(i, micros)))
}

/// Drains `queue`, whose items are their own deadlines: lateness of each, and how many
/// came out early.
async fn drain<Q, E>(
    mut queue: Q,
    deadline: impl Fn(&E) -> Instant,
    count: u64,
) -> (Vec<Duration>, u64)
where
    Q: futures::Stream<Item = E> + Unpin,
{
    let (mut lateness, mut early) = (Vec::with_capacity(count as usize), 0);
    while let Some(expired) = queue.next().await {
        let (now, deadline) = (Instant::now(), deadline(&expired));
        early += u64::from(now < deadline);
        lateness.push(now.saturating_duration_since(deadline));
    }
    (lateness, early)
}

fn main() {
    let count = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(1_000_000_u64);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    println!("{count} items, deadlines uniform over {SPREAD:?} from {OFFSET:?} on");

    let ok = runtime.block_on(async {
        let start = Instant::now();
        let mut queue = tickless::DelayQueue::with_capacity(count as usize);
        for deadline in deadlines(count, start) {
            queue.insert_at(deadline, deadline);
        }
        let insert = start.elapsed();
        let (lateness, early) = drain(queue, |expired| *expired.get_ref(), count).await;
        let total = start.elapsed();
        let drained = lateness.len() as u64;
        report("tickless", total, insert, lateness, early);
        drained == count && early == 0
    });

    runtime.block_on(async {
        let start = Instant::now();
        let mut queue = tokio_util::time::DelayQueue::with_capacity(count as usize);
        for deadline in deadlines(count, start) {
            queue.insert_at(deadline, deadline);
        }
        let insert = start.elapsed();
        let (lateness, early) = drain(queue, |expired| *expired.get_ref(), count).await;
        let total = start.elapsed();
        report("tokio-util", total, insert, lateness, early);
    });
    if !ok {
        eprintln!("FAILED: every item must come out, none early");
        std::process::exit(1);
    }
}
