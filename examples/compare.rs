//! tickless against `tokio::time`, futures-timer and async-io (and tokio-util's
//! `DelayQueue`), every workload measured in this one run, implementations interleaved,
//! the median of several rounds reported. The workloads and targets are issue 4's; the
//! results of one run are kept in `BENCHMARKS.md`.
//!
//! ```text
//! cargo run --release --example compare            # the full table, about 4 minutes
//! cargo run --release --example compare -- --quick # smaller counts, one round
//! ```
//!
//! Memory, process CPU and the million-timer runs are measured in a child process per
//! implementation (this program again, with `--child`), so that no run inherits another's
//! freed memory or threads.

#[cfg(feature = "redis")]
#[path = "support/durable.rs"]
mod durable;
mod support;

use futures::stream::{FuturesUnordered, StreamExt};
use std::future::{poll_fn, Future};
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use support::table::{fmt, print_targets, Better, Samples, Target};
use support::workloads::{
    in_task, register_cancel, spread_over_tasks, timeout_churn, Race, YieldOnce, AHEAD,
};
use support::{answer, child, cpu_time, ms, quantile, Peer, Readings};

/// W2 and DQ2: deadlines are uniform over `SPREAD`, starting `OFFSET` after the start, so
/// that the time it takes to register a million timers is not counted as lateness.
const OFFSET: Duration = Duration::from_secs(1);
const SPREAD: Duration = Duration::from_secs(1);

struct Sizes {
    rounds: usize,
    churn: u32,
    mass: u64,
    idle: u64,
    idle_wait: Duration,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child_main(&args[1..]);
    }
    let quick = args.iter().any(|arg| arg == "--quick");
    if args.iter().any(|arg| arg == "--durable") {
        return durable_section(quick);
    }
    let sizes = if quick {
        Sizes {
            rounds: 1,
            churn: 200_000,
            mass: 100_000,
            idle: 10_000,
            idle_wait: Duration::from_secs(1),
        }
    } else {
        Sizes {
            rounds: 5,
            churn: 2_000_000,
            mass: 1_000_000,
            idle: 100_000,
            idle_wait: Duration::from_secs(5),
        }
    };
    println!(
        "# tickless compare\n\n{} round(s) of each workload, implementations interleaved; \
         medians, and ratios to a named implementation's median in this same run.",
        sizes.rounds
    );
    let mut targets = memory(&sizes);
    targets.extend(churn_workloads(&sizes));
    targets.extend(delay_queue_churn_workload(&sizes));
    targets.extend(mass_workloads(&sizes));
    targets.extend(idle_workload(&sizes));
    targets.extend(drain_workload(&sizes));
    print_targets(&targets);
    #[cfg(feature = "redis")]
    durable_section(quick);
}

/// Issue 12's `durable` section: `--features redis`, alone with `--durable`.
fn durable_section(quick: bool) {
    #[cfg(feature = "redis")]
    {
        let rows = durable::run(quick);
        println!("\n### Targets (issue 12, durable jobs)\n");
        println!("| target | measured | met |");
        println!("|---|---|---|");
        for (what, measured, met) in &rows {
            println!(
                "| {what} | {measured} | {} |",
                if *met { "yes" } else { "**no**" }
            );
        }
        let met = rows.iter().filter(|row| row.2).count();
        println!("\n{met} of {} targets met.", rows.len());
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = quick;
        eprintln!("the durable section needs the redis feature: cargo run --release --features redis --example compare -- --durable");
        std::process::exit(2);
    }
}

fn target(what: &'static str, measured: String, met: bool) -> Target {
    Target {
        what,
        measured,
        met,
    }
}

/// `size_of` per peer, and RSS growth per pending timer (one child per peer).
fn memory(sizes: &Sizes) -> Vec<Target> {
    use std::mem::size_of;
    println!("\n### Memory\n");
    println!("| implementation | size_of sleep | size_of timeout over `Ready<()>` | bytes per pending timer ({} boxed) |", sizes.idle);
    println!("|---|---:|---:|---:|");
    let ready = || std::future::ready(());
    let mut tickless_bytes = f64::NAN;
    for peer in [
        Peer::Tickless,
        Peer::Tokio,
        Peer::FuturesTimer,
        Peer::AsyncIo,
    ] {
        let (sleep, timeout) = match peer {
            Peer::Tickless | Peer::TicklessTimer => (
                size_of::<tickless::Sleep>(),
                size_of_val(&tickless::timeout(AHEAD, ready())),
            ),
            Peer::Tokio => (
                size_of::<tokio::time::Sleep>(),
                size_of::<tokio::time::Timeout<std::future::Ready<()>>>(),
            ),
            Peer::FuturesTimer => (
                size_of::<futures_timer::Delay>(),
                size_of::<Race<std::future::Ready<()>, futures_timer::Delay>>(),
            ),
            Peer::AsyncIo => (
                size_of::<async_io::Timer>(),
                size_of::<Race<std::future::Ready<()>, async_io::Timer>>(),
            ),
        };
        let bytes = child(&["mem", peer.arg(), &sizes.idle.to_string()])["bytes_per_timer"];
        if peer == Peer::Tickless {
            tickless_bytes = bytes;
        }
        println!("| {} | {sleep} | {timeout} | {} |", peer.name(), fmt(bytes));
    }
    println!(
        "\n(futures-timer and async-io have no timeout type: theirs is a two-field race, as here.)"
    );
    let sleep = size_of::<tickless::Sleep>();
    vec![
        target(
            "size_of::<Sleep>() <= 32",
            format!("{sleep} B"),
            sleep <= 32,
        ),
        // RSS moves by pages: one page over 100,000 timers is 0.04 bytes each, so the
        // figure is compared in whole bytes.
        target(
            "<= 64 bytes per pending timer, future included",
            format!("{} B", fmt(tickless_bytes)),
            tickless_bytes.round() <= 64.0,
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Churn: W1, W1t, W4, DQ1 (in this process)

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

/// What any W1 implementation must do at least once per op, timed alone: read the
/// clock (tokio's `Instant::now`, which the paused clock can drive), and clone and drop the
/// task's waker. Rows of W1, to show how far down a timer can go.
/// Times `n` ops in a task's context; ns/op.
type Timed = fn(u32, &mut Context<'_>) -> f64;

const FLOORS: [(&str, Timed); 2] = [
    ("floor: tokio Instant::now()", |n, _| {
        let start = Instant::now();
        for _ in 0..n {
            black_box(tokio::time::Instant::now());
        }
        ns_per_op(start, n)
    }),
    ("floor: waker clone + drop", |n, cx| {
        let start = Instant::now();
        for _ in 0..n {
            drop(black_box(cx.waker().clone()));
        }
        ns_per_op(start, n)
    }),
];

fn ns_per_op(start: Instant, n: u32) -> f64 {
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

/// W4: `n` register+cancels spread over `tasks` tasks on a 2-worker runtime; Mops/s.
fn multi_thread_churn(peer: Peer, tasks: u32, n: u32) -> f64 {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        spread_over_tasks(peer, tasks, 1_000).await; // warm up: timers made, slabs grown
        let start = Instant::now();
        spread_over_tasks(peer, tasks, n / tasks).await;
        f64::from(n / tasks * tasks) / start.elapsed().as_secs_f64() / 1e6
    })
}

fn churn_workloads(sizes: &Sizes) -> Vec<Target> {
    let runtime = current_thread();
    let n = sizes.churn;
    let mut w1 = Samples::default();
    let mut w1t = Samples::default();
    let mut w4 = [Samples::default(), Samples::default()];
    for _ in 0..sizes.rounds {
        for peer in Peer::SLEEPS {
            w1.push(
                peer.name(),
                in_task(
                    &runtime,
                    poll_fn(move |cx| {
                        register_cancel(peer, n / 10, cx); // warm up
                        let start = Instant::now();
                        register_cancel(peer, n, cx);
                        Poll::Ready(ns_per_op(start, n))
                    }),
                ),
            );
            w1t.push(
                peer.name(),
                in_task(&runtime, async move {
                    timeout_churn(peer, n / 10).await;
                    let start = Instant::now();
                    timeout_churn(peer, n).await;
                    ns_per_op(start, n)
                }),
            );
            for (samples, tasks) in w4.iter_mut().zip([2, 8]) {
                samples.push(peer.name(), multi_thread_churn(peer, tasks, n));
            }
        }
        for (name, floor) in FLOORS {
            w1.push(
                name,
                in_task(&runtime, poll_fn(move |cx| Poll::Ready(floor(n, cx)))),
            );
        }
    }
    let tickless = Peer::Tickless.name();
    let tokio = Peer::Tokio.name();
    w1.print(
        "W1 register+cancel (current-thread runtime)",
        "ns/op",
        tokio,
    );
    w1t.print("W1t timeout churn (current-thread runtime)", "ns/op", tokio);
    w4[0].print("W4 churn, T = 2 tasks on 2 workers", "Mops/s", tokio);
    w4[1].print("W4 churn, T = 8 tasks on 2 workers", "Mops/s", tokio);
    let (w1, w1t) = (
        w1.median(tickless) / w1.median(tokio),
        w1t.median(tickless) / w1t.median(tokio),
    );
    let (t2, t8) = (w4[0].median(tickless), w4[1].median(tickless));
    let (best, best_t8) = w4[1].best_peer(Better::Higher);
    vec![
        target("W1 <= 0.33x tokio", format!("{w1:.2}x"), w1 <= 0.33),
        target("W1t <= 0.5x tokio", format!("{w1t:.2}x"), w1t <= 0.5),
        target(
            "W4 T=8 >= 2x the best peer",
            format!("{:.2}x {best}", t8 / best_t8),
            t8 >= 2.0 * best_t8,
        ),
        target(
            "W4 more throughput at T=8 than T=2",
            format!("{} vs {} Mops/s", fmt(t8), fmt(t2)),
            t8 > t2,
        ),
    ]
}

fn delay_queue_churn_workload(sizes: &Sizes) -> Vec<Target> {
    let mut dq1 = Samples::default();
    for _ in 0..sizes.rounds {
        dq1.push("tickless DelayQueue", delay_queue_churn(true, sizes.churn));
        dq1.push(
            "tokio-util DelayQueue",
            delay_queue_churn(false, sizes.churn),
        );
    }
    dq1.print(
        "DQ1 DelayQueue insert(10 s) + remove",
        "ns/op",
        "tokio-util DelayQueue",
    );
    let ratio = dq1.median("tickless DelayQueue") / dq1.median("tokio-util DelayQueue");
    vec![target(
        "DQ1 <= 0.5x tokio-util",
        format!("{ratio:.2}x"),
        ratio <= 0.5,
    )]
}

fn delay_queue_churn(tickless: bool, n: u32) -> f64 {
    current_thread().block_on(async {
        if tickless {
            let mut queue = tickless::DelayQueue::with_capacity(16);
            let key = queue.insert(0, AHEAD); // the first insert makes the timer
            queue.remove(&key);
            let start = Instant::now();
            for i in 0..n {
                let key = queue.insert(i, AHEAD);
                black_box(queue.remove(&key));
            }
            ns_per_op(start, n)
        } else {
            let mut queue = tokio_util::time::DelayQueue::with_capacity(16);
            let start = Instant::now();
            for i in 0..n {
                let key = queue.insert(i, AHEAD);
                black_box(queue.remove(&key));
            }
            ns_per_op(start, n)
        }
    })
}

// ---------------------------------------------------------------------------------------
// Children: W2, W3, memory, DQ2 (one process each)

fn child_main(args: &[String]) {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or_default();
    let count: u64 = arg(2).parse().unwrap_or(0);
    let runtime = current_thread();
    match arg(0) {
        "w2" => runtime.block_on(mass(arg(1), count)),
        "w3" => runtime.block_on(idle(
            Peer::from_arg(arg(1)).expect("a peer"),
            count,
            Duration::from_millis(arg(3).parse().unwrap_or(5000)),
        )),
        "mem" => runtime.block_on(pending_memory(
            Peer::from_arg(arg(1)).expect("a peer"),
            count,
        )),
        "dq2" => runtime.block_on(drain(arg(1) == "tickless", count)),
        other => panic!("unknown child workload {other:?}"),
    }
}

/// The deadline of item `i` of `count`, relative to `start`.
fn deadline(start: Instant, i: u64) -> Instant {
    start + OFFSET + Duration::from_micros(support::spread(i, SPREAD.as_micros() as u64))
}

/// Lateness readings from `(done, deadline)` pairs, and the time past the last deadline.
fn lateness_readings(
    start: Instant,
    mut done: Vec<(Instant, Instant)>,
) -> Vec<(&'static str, f64)> {
    let end = Instant::now();
    let early = done.iter().filter(|(at, deadline)| at < deadline).count();
    let mut late: Vec<Duration> = done
        .drain(..)
        .map(|(at, deadline)| at.saturating_duration_since(deadline))
        .collect();
    late.sort_unstable();
    vec![
        ("fired", late.len() as f64),
        ("early", early as f64),
        (
            "overhead_ms",
            ms(end.saturating_duration_since(start + OFFSET + SPREAD)),
        ),
        ("p50_ms", ms(quantile(&late, 0.5))),
        ("p99_ms", ms(quantile(&late, 0.99))),
        ("max_ms", ms(quantile(&late, 1.0))),
    ]
}

/// W2: `count` sleeps in one `FuturesUnordered` in one task, awaited to the end.
async fn mass(peer: &str, count: u64) {
    async fn run<F: Future>(count: u64, sleep_until: impl Fn(Instant) -> F) {
        let cpu = cpu_time();
        let start = Instant::now();
        let mut all: FuturesUnordered<_> = (0..count)
            .map(|i| {
                let deadline = deadline(start, i);
                let sleep = sleep_until(deadline);
                async move {
                    sleep.await;
                    (Instant::now(), deadline)
                }
            })
            .collect();
        let mut done = Vec::with_capacity(count as usize);
        while let Some(pair) = all.next().await {
            done.push(pair);
        }
        let cpu = cpu_time() - cpu;
        let mut readings = lateness_readings(start, done);
        readings.push(("cpu_ms", ms(cpu)));
        answer(&readings);
    }
    let tokio_instant = tokio::time::Instant::from_std;
    match peer {
        "tickless" => run(count, |at| tickless::sleep_until(tokio_instant(at))).await,
        "tokio" => {
            run(count, |at| {
                tokio::task::unconstrained(tokio::time::sleep_until(tokio_instant(at)))
            })
            .await
        }
        "futures-timer" => {
            run(count, |at| {
                futures_timer::Delay::new(at.saturating_duration_since(Instant::now()))
            })
            .await
        }
        "async-io" => run(count, async_io::Timer::at).await,
        // The floor: the same futures and `FuturesUnordered`, each yielding once, no timer.
        "none" => run(count, |_| YieldOnce::default()).await,
        other => panic!("unknown peer {other:?}"),
    }
}

/// W3: `count` sleeps an hour ahead, polled once; then `wait` with nothing due. The wait
/// ends by a message from a plain thread, so no timer of any peer is involved in it.
async fn idle(peer: Peer, count: u64, wait: Duration) {
    async fn run<F: Future + Unpin>(
        count: u64,
        wait: Duration,
        make: impl Fn() -> F,
        wakeups: impl Fn() -> f64,
    ) {
        let mut sleeps: Vec<F> = (0..count).map(|_| make()).collect();
        poll_fn(|cx| {
            for sleep in &mut sleeps {
                assert!(Pin::new(sleep).poll(cx).is_pending());
            }
            Poll::Ready(())
        })
        .await;
        // Let the drivers take in what was registered (tickless arms its driver here).
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (tx, rx) = futures::channel::oneshot::channel();
        let (cpu, switches, driver) = (cpu_time(), support::voluntary_switches(), wakeups());
        std::thread::spawn(move || {
            std::thread::sleep(wait);
            let _ = tx.send(());
        });
        rx.await.expect("the waking thread");
        answer(&[
            ("cpu_ms", ms(cpu_time() - cpu)),
            (
                "switches",
                (support::voluntary_switches().saturating_sub(switches)) as f64,
            ),
            ("driver_wakeups", wakeups() - driver),
        ]);
        drop(sleeps);
    }
    const HOUR: Duration = Duration::from_secs(3600);
    let stats = || tickless::Timer::current().stats().driver_wakeups as f64;
    let none = || f64::NAN;
    match peer {
        Peer::Tickless | Peer::TicklessTimer => {
            run(count, wait, || tickless::sleep(HOUR), stats).await
        }
        Peer::Tokio => run(count, wait, || Box::pin(tokio::time::sleep(HOUR)), none).await,
        Peer::FuturesTimer => run(count, wait, || futures_timer::Delay::new(HOUR), none).await,
        Peer::AsyncIo => run(count, wait, || async_io::Timer::after(HOUR), none).await,
    }
}

/// Memory: RSS growth per pending timer, `count` boxed sleeps polled once.
async fn pending_memory(peer: Peer, count: u64) {
    async fn run<F: Future>(count: u64, make: impl Fn() -> F) {
        // The harness's own slots are filled (so their pages are resident), and one timer
        // has registered and gone (so each implementation's driver, thread or wheel levels
        // exist), before the first reading: only what each pending timer adds counts.
        let mut sleeps: Vec<Option<Pin<Box<F>>>> = (0..count).map(|_| None).collect();
        poll_fn(|cx| {
            let _ = Box::pin(make()).as_mut().poll(cx);
            Poll::Ready(())
        })
        .await;
        let before = support::rss_bytes();
        poll_fn(|cx| {
            for slot in &mut sleeps {
                let mut sleep = Box::pin(make());
                assert!(sleep.as_mut().poll(cx).is_pending());
                *slot = Some(sleep);
            }
            Poll::Ready(())
        })
        .await;
        let grown = support::rss_bytes().saturating_sub(before);
        answer(&[("bytes_per_timer", grown as f64 / count as f64)]);
    }
    const HOUR: Duration = Duration::from_secs(3600);
    match peer {
        Peer::Tickless | Peer::TicklessTimer => run(count, || tickless::sleep(HOUR)).await,
        Peer::Tokio => run(count, || tokio::time::sleep(HOUR)).await,
        Peer::FuturesTimer => run(count, || futures_timer::Delay::new(HOUR)).await,
        Peer::AsyncIo => run(count, || async_io::Timer::after(HOUR)).await,
    }
}

/// DQ2: `count` items inserted into a `DelayQueue` and its stream drained.
async fn drain(tickless: bool, count: u64) {
    async fn run<Q: futures::Stream + Unpin>(
        start: Instant,
        mut queue: Q,
        deadline: impl Fn(Q::Item) -> Instant,
        count: u64,
    ) {
        let mut done = Vec::with_capacity(count as usize);
        while let Some(item) = queue.next().await {
            done.push((Instant::now(), deadline(item)));
        }
        answer(&lateness_readings(start, done));
    }
    let start = Instant::now();
    if tickless {
        let mut queue = tickless::DelayQueue::with_capacity(count as usize);
        for i in 0..count {
            let at = deadline(start, i);
            queue.insert_at(at, tokio::time::Instant::from_std(at));
        }
        run(start, queue, |item| item.into_inner(), count).await;
    } else {
        let mut queue = tokio_util::time::DelayQueue::with_capacity(count as usize);
        for i in 0..count {
            let at = deadline(start, i);
            queue.insert_at(at, tokio::time::Instant::from_std(at));
        }
        run(start, queue, |item| item.into_inner(), count).await;
    }
}

// ---------------------------------------------------------------------------------------
// The parent's side of the child workloads

/// Runs `workload` for `peers` in children, `rounds` times interleaved; one `Samples` per
/// reading asked for.
fn children(
    rounds: usize,
    workload: &str,
    peers: &[&str],
    count: u64,
    readings: &[&str],
) -> Vec<Samples> {
    let mut samples: Vec<Samples> = readings.iter().map(|_| Samples::default()).collect();
    for _ in 0..rounds {
        for peer in peers {
            let answer: Readings = child(&[workload, peer, &count.to_string()]);
            for (samples, reading) in samples.iter_mut().zip(readings) {
                samples.push(peer, answer.get(*reading).copied().unwrap_or(f64::NAN));
            }
        }
    }
    samples
}

fn mass_workloads(sizes: &Sizes) -> Vec<Target> {
    let peers = ["tickless", "tokio", "futures-timer", "async-io", "none"];
    let readings = [
        "fired",
        "early",
        "overhead_ms",
        "cpu_ms",
        "p50_ms",
        "p99_ms",
        "max_ms",
    ];
    let samples = children(sizes.rounds.min(3), "w2", &peers, sizes.mass, &readings);
    println!(
        "\n### W2 mass schedule and fire: {} sleeps, deadlines uniform over {SPREAD:?} from {OFFSET:?} on, one FuturesUnordered\n",
        sizes.mass
    );
    println!("tokio's sleeps are wrapped in `tokio::task::unconstrained` (without it, this workload stalls under its cooperative budget); `none` is the floor: the same futures yielding once, no timer.\n");
    println!("| implementation | fired | early | overhead ms | process CPU ms | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for peer in peers {
        let cells: Vec<String> = samples.iter().map(|s| fmt(s.median(peer))).collect();
        println!("| {peer} | {} |", cells.join(" | "));
    }
    let [fired, early, overhead, cpu, ..] = &samples[..] else {
        unreachable!()
    };
    let (best, best_overhead) = {
        let mut peers_only = Samples::default();
        for peer in ["tokio", "futures-timer", "async-io"] {
            peers_only.push(peer, overhead.median(peer));
        }
        peers_only.best_peer(Better::Lower)
    };
    let ours = overhead.median("tickless");
    let cpu_ratio = cpu.median("tickless") / cpu.median("tokio");
    // Every round, not the median: one lost or early timer in any round fails it.
    let (fewest_fired, _) = fired.range("tickless");
    let (_, most_early) = early.range("tickless");
    vec![
        target(
            "W2 completes in plain mode, 0 early (every round)",
            format!(
                "fewest fired {}, most early {}",
                fmt(fewest_fired),
                fmt(most_early)
            ),
            fewest_fired == sizes.mass as f64 && most_early == 0.0,
        ),
        target(
            "W2 overhead <= 0.5x the best peer",
            format!("{} vs {} ms ({best})", fmt(ours), fmt(best_overhead)),
            ours <= 0.5 * best_overhead,
        ),
        target(
            "W2 process CPU <= 0.5x unconstrained tokio",
            format!("{cpu_ratio:.2}x"),
            cpu_ratio <= 0.5,
        ),
    ]
}

fn idle_workload(sizes: &Sizes) -> Vec<Target> {
    let wait = sizes.idle_wait.as_millis().to_string();
    println!(
        "\n### W3 idle: {} sleeps an hour ahead, polled once, then {:?} with nothing due\n",
        sizes.idle, sizes.idle_wait
    );
    println!("| implementation | process CPU ms | voluntary context switches | driver wakeups |");
    println!("|---|---:|---:|---:|");
    let mut figures = Vec::new();
    for peer in [
        Peer::Tickless,
        Peer::Tokio,
        Peer::FuturesTimer,
        Peer::AsyncIo,
    ] {
        let answer = child(&["w3", peer.arg(), &sizes.idle.to_string(), &wait]);
        let (cpu, switches, wakeups) = (
            answer["cpu_ms"],
            answer["switches"],
            answer["driver_wakeups"],
        );
        println!(
            "| {} | {} | {} | {} |",
            peer.name(),
            fmt(cpu),
            fmt(switches),
            fmt(wakeups)
        );
        figures.push((peer, cpu, wakeups));
    }
    let (_, cpu, wakeups) = figures[0];
    let (_, tokio_cpu, _) = figures[1];
    vec![
        target(
            "W3 no more CPU than tokio",
            format!("{} vs {} ms", fmt(cpu), fmt(tokio_cpu)),
            cpu <= tokio_cpu,
        ),
        target(
            "W3 0 driver wakeups while nothing is due",
            fmt(wakeups),
            wakeups == 0.0,
        ),
    ]
}

fn drain_workload(sizes: &Sizes) -> Vec<Target> {
    let peers = ["tickless", "tokio-util"];
    let readings = [
        "fired",
        "early",
        "overhead_ms",
        "p50_ms",
        "p99_ms",
        "max_ms",
    ];
    let samples = children(sizes.rounds.min(3), "dq2", &peers, sizes.mass, &readings);
    println!("\n### DQ2 DelayQueue drain: {} items, deadlines uniform over {SPREAD:?} from {OFFSET:?} on\n", sizes.mass);
    println!("| implementation | drained | early | overhead ms | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for peer in peers {
        let cells: Vec<String> = samples.iter().map(|s| fmt(s.median(peer))).collect();
        println!("| {peer} DelayQueue | {} |", cells.join(" | "));
    }
    let p99 = samples[4].median("tickless");
    vec![target(
        "DQ2 p99 lateness <= 10 ms",
        format!("{} ms", fmt(p99)),
        p99 <= 10.0,
    )]
}
