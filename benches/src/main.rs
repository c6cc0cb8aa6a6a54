//! tickless against `tokio::time`, futures-timer and async-io (and tokio-util's
//! `DelayQueue`), every workload measured in this one run, implementations interleaved,
//! the median of several rounds reported. The workloads and targets are issue 4's; the
//! results of one run are kept in `BENCHMARKS.md`.
//!
//! ```text
//! cargo run --release -p tickless-bench                     # the full table, about 4 minutes
//! cargo run --release -p tickless-bench --features redis    # with the durable section
//! cargo run --release -p tickless-bench -- --quick          # smaller counts, one round
//! cargo run --release -p tickless-bench -- --only callbacks # one section
//! ```
//!
//! Memory, process CPU and the million-timer runs are measured in a child process per
//! implementation (this program again, with `--child`), so that no run inherits another's
//! freed memory or threads.

use futures::stream::{FuturesUnordered, StreamExt};
use std::future::{poll_fn, Future};
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tickless_bench::table::{fmt, print_targets, Better, Samples, Target};
use tickless_bench::workloads::{
    in_task, ready_timeouts, register_cancel, shared_timer, spread_over_tasks,
    spread_timeouts_over_tasks, timeout_churn, Race, YieldOnce, AHEAD,
};
use tickless_bench::{answer, child, cpu_time, ms, quantile, Peer, Readings};

/// W2 and DQ2: deadlines are uniform over `SPREAD`, starting `OFFSET` after the start, so
/// that the time it takes to register a million timers is not counted as lateness.
const OFFSET: Duration = Duration::from_secs(1);
const SPREAD: Duration = Duration::from_secs(1);

/// A section of the comparison: runs its workloads, prints its tables, returns its targets.
type Section = fn(&Sizes) -> Vec<Target>;

struct Sizes {
    rounds: usize,
    churn: u32,
    mass: u64,
    precise: u64,
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
        return durable_section(quick, true, true);
    }
    // Issue 18's speed goals alone (AOF batches, Redis restarts, a leader killed):
    // `--durable-speed`, or one part of it: `--durable-speed aof|restart|kill`.
    if let Some(i) = args.iter().position(|arg| arg == "--durable-speed") {
        let part = args.get(i + 1).filter(|arg| !arg.starts_with("--"));
        return durable_speed_section(quick, part.map(String::as_str));
    }
    // The cluster part alone (3 masters, failover, WAIT): `--durable-cluster`.
    if args.iter().any(|arg| arg == "--durable-cluster") {
        return durable_section(quick, false, true);
    }
    let sizes = if quick {
        Sizes {
            rounds: 1,
            churn: 200_000,
            mass: 100_000,
            precise: 10_000,
            idle: 10_000,
            idle_wait: Duration::from_secs(1),
        }
    } else {
        Sizes {
            rounds: 5,
            churn: 2_000_000,
            mass: 1_000_000,
            precise: 10_000,
            idle: 100_000,
            idle_wait: Duration::from_secs(5),
        }
    };
    println!(
        "# tickless compare\n\n{} round(s) of each workload, implementations interleaved; \
         medians, and ratios to a named implementation's median in this same run.",
        sizes.rounds
    );
    // `--only <section>` runs one section (while working on it); the record runs all.
    let only = args
        .iter()
        .position(|arg| arg == "--only")
        .and_then(|i| args.get(i + 1));
    let sections: [(&str, Section); 9] = [
        ("memory", memory),
        ("churn", churn_workloads),
        ("dq1", delay_queue_churn_workload),
        ("w2", mass_workloads),
        ("w5", precision_workload),
        ("w3", idle_workload),
        ("dq2", drain_workload),
        ("callbacks", callback_workloads),
        ("purgatory", purgatory_workloads),
    ];
    let mut targets = Vec::new();
    for (name, section) in sections {
        if only.is_none_or(|only| only == name) {
            targets.extend(section(&sizes));
        }
    }
    print_targets(&targets);
    #[cfg(feature = "redis")]
    durable_section(quick, true, true);
}

/// The durable sections' rows (target, measured, met) as a Markdown table under `title`.
#[cfg(feature = "redis")]
fn print_durable_targets<W: std::fmt::Display, M: std::fmt::Display>(
    title: &str,
    rows: &[(W, M, bool)],
) {
    println!("\n### Targets ({title})\n");
    println!("| target | measured | met |");
    println!("|---|---|---|");
    for (what, measured, met) in rows {
        println!(
            "| {what} | {measured} | {} |",
            if *met { "yes" } else { "**no**" }
        );
    }
}

/// Issue 18's speed goals on one node: `--features redis -- --durable-speed`.
fn durable_speed_section(quick: bool, part: Option<&str>) {
    #[cfg(feature = "redis")]
    {
        let rows = tickless_bench::durable_speed::run(quick, part);
        print_durable_targets("issue 18, speed on one node", &rows);
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = (quick, part);
        eprintln!("the durable section needs the redis feature: cargo run --release -p tickless-bench --features redis -- --durable-speed");
        std::process::exit(2);
    }
}

/// Issue 12's `durable` section: `--features redis`, alone with `--durable`.
fn durable_section(quick: bool, one_node: bool, cluster: bool) {
    #[cfg(feature = "redis")]
    {
        let mut rows = Vec::new();
        if one_node {
            rows.extend(tickless_bench::durable::run(quick));
        }
        if cluster {
            rows.extend(tickless_bench::durable_cluster::run(quick));
        }
        print_durable_targets("issue 12, durable jobs", &rows);
        let met = rows.iter().filter(|row| row.2).count();
        println!("\n{met} of {} targets met.", rows.len());
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = (quick, one_node, cluster);
        eprintln!("the durable section needs the redis feature: cargo run --release -p tickless-bench --features redis -- --durable");
        std::process::exit(2);
    }
}

fn target(issue: u32, what: &'static str, measured: String, met: bool) -> Target {
    Target {
        issue,
        what,
        measured,
        met,
    }
}

/// `size_of` per peer, and RSS growth per pending timer (one child per peer).
fn memory(sizes: &Sizes) -> Vec<Target> {
    use std::mem::size_of;
    println!("\n### Memory\n");
    println!("| implementation | size_of sleep | size_of timeout over `Ready<()>` | bytes per pending timer ({} boxed) | bytes per timer a second batch adds after the first is dropped (held after drop) |", sizes.idle);
    println!("|---|---:|---:|---:|---:|");
    let ready = || std::future::ready(());
    let mut tickless_bytes = f64::NAN;
    for peer in [
        Peer::Tickless,
        Peer::Tokio,
        Peer::FuturesTimer,
        Peer::AsyncIo,
        Peer::Pingora,
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
            Peer::Pingora => (
                size_of_val(&pingora_timeout::fast_timeout::fast_sleep(AHEAD)),
                size_of_val(&pingora_timeout::fast_timeout::fast_timeout(AHEAD, ready())),
            ),
        };
        let answer = child(&["mem", peer.arg(), &sizes.idle.to_string()]);
        let (bytes, retained) = (answer["bytes_per_timer"], answer["retained_per_timer"]);
        if peer == Peer::Tickless {
            tickless_bytes = bytes;
        }
        println!(
            "| {} | {sleep} | {timeout} | {} | {} |",
            peer.name(),
            fmt(bytes),
            fmt(retained)
        );
    }
    println!(
        "\n(futures-timer and async-io have no timeout type: theirs is a two-field race, as here. \
         pingora-timeout's `fast_sleep` is an `async fn`'s future; its resolution is 10 ms; its \
         timers here are 10 minutes ahead, not an hour: from 15 minutes on it uses tokio's.)"
    );
    let sleep = size_of::<tickless::Sleep>();
    vec![
        target(
            9,
            "size_of::<Sleep>() <= 24",
            format!("{sleep} B"),
            sleep <= 24,
        ),
        // RSS moves by pages: one page over 100,000 timers is 0.04 bytes each, so the
        // figure is compared in whole bytes.
        target(
            9,
            "<= 64 bytes per pending timer, future included (no worse than before)",
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
    multi_thread_churn_on(peer, tasks, n, false)
}

/// W4 on a runtime with tokio's alternative timer (`alt`: a `--cfg tokio_unstable` build
/// only) or its traditional one.
fn multi_thread_churn_on(peer: Peer, tasks: u32, n: u32, alt: bool) -> f64 {
    multi_thread_on(peer, tasks, n, alt, false)
}

/// W4 (`timeouts`: W4t, timeouts over a future that yields once) on a 2-worker runtime,
/// with tokio's alternative timer or its traditional one; Mops/s.
fn multi_thread_on(peer: Peer, tasks: u32, n: u32, alt: bool, timeouts: bool) -> f64 {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_time();
    #[cfg(tokio_unstable)]
    if alt {
        builder.enable_alt_timer();
    }
    #[cfg(not(tokio_unstable))]
    assert!(!alt, "the alternative timer needs --cfg tokio_unstable");
    let runtime = builder.build().expect("a runtime");
    runtime.block_on(async move {
        let timer = shared_timer(peer);
        let timer = timer.as_ref();
        let spread = |per_task| async move {
            if timeouts {
                spread_timeouts_over_tasks(peer, timer, tasks, per_task).await;
            } else {
                spread_over_tasks(peer, timer, tasks, per_task).await;
            }
        };
        spread(1_000).await; // warm up: slabs grown
        let start = Instant::now();
        spread(n / tasks).await;
        f64::from(n / tasks * tasks) / start.elapsed().as_secs_f64() / 1e6
    })
}

fn churn_workloads(sizes: &Sizes) -> Vec<Target> {
    let runtime = current_thread();
    let n = sizes.churn;
    let mut w1 = Samples::default();
    let mut w1t = Samples::default();
    let mut w4 = [Samples::default(), Samples::default()];
    let mut w1r = Samples::default();
    let mut w4t = Samples::default();
    for _ in 0..sizes.rounds {
        for peer in Peer::SLEEPS {
            w1r.push(
                peer.name(),
                in_task(&runtime, async move {
                    let timer = shared_timer(peer);
                    poll_fn(|cx| {
                        ready_timeouts(peer, timer.as_ref(), n / 10, cx); // warm up
                        let start = Instant::now();
                        ready_timeouts(peer, timer.as_ref(), n, cx);
                        Poll::Ready(ns_per_op(start, n))
                    })
                    .await
                }),
            );
            w4t.push(peer.name(), multi_thread_on(peer, 8, n / 4, false, true));
            w1.push(
                peer.name(),
                in_task(&runtime, async move {
                    let timer = shared_timer(peer);
                    poll_fn(|cx| {
                        register_cancel(peer, timer.as_ref(), n / 10, cx); // warm up
                        let start = Instant::now();
                        register_cancel(peer, timer.as_ref(), n, cx);
                        Poll::Ready(ns_per_op(start, n))
                    })
                    .await
                }),
            );
            w1t.push(
                peer.name(),
                in_task(&runtime, async move {
                    let timer = shared_timer(peer);
                    timeout_churn(peer, timer.as_ref(), n / 10).await;
                    let start = Instant::now();
                    timeout_churn(peer, timer.as_ref(), n).await;
                    ns_per_op(start, n)
                }),
            );
            for (samples, tasks) in w4.iter_mut().zip([2, 8]) {
                samples.push(peer.name(), multi_thread_churn(peer, tasks, n));
                // tokio's alternative timer (per-worker wheels), and tickless on it.
                let on_alt = match peer {
                    Peer::Tokio => Some("tokio::time, alt timer"),
                    Peer::Tickless => Some("tickless, on the alt timer"),
                    Peer::TicklessTimer => Some("tickless (Timer), on the alt timer"),
                    _ => None,
                };
                if let (Some(name), true) = (on_alt, cfg!(tokio_unstable)) {
                    samples.push(name, multi_thread_churn_on(peer, tasks, n, true));
                    if tasks == 8 {
                        w4t.push(name, multi_thread_on(peer, 8, n / 4, true, true));
                    }
                }
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
    let handle = Peer::TicklessTimer.name();
    let tokio = Peer::Tokio.name();
    w1.print(
        "W1 register+cancel (current-thread runtime)",
        "ns/op",
        tokio,
    );
    w1t.print("W1t timeout churn (current-thread runtime)", "ns/op", tokio);
    w1r.print(
        "W1r timeout(10 s) over a future ready at once (current-thread runtime)",
        "ns/op",
        tokio,
    );
    w4[0].print("W4 churn, T = 2 tasks on 2 workers", "Mops/s", tokio);
    w4[1].print("W4 churn, T = 8 tasks on 2 workers", "Mops/s", tokio);
    w4t.print(
        "W4t timeout(10 s) over a future that yields once, T = 8 tasks on 2 workers",
        "Mops/s",
        tokio,
    );
    let ratio = |samples: &Samples, name: &str| samples.median(name) / samples.median(tokio);
    // The ratios of the last record before issue 9 (BENCHMARKS.md, 2026-11-21), with 5 %
    // for the noise of this shared machine.
    let no_slower = |now: f64, before: f64| now <= before * 1.05;
    let (best, best_t8) = w4[1].best_peer(Better::Higher);
    let mut targets = Vec::new();
    for (name, w1_before, w1t_before) in [(tickless, 0.91, 0.89), (handle, 0.79, 0.79)] {
        let (w1, w1t) = (ratio(&w1, name), ratio(&w1t, name));
        targets.push(target(
            9,
            if name == tickless {
                "W1 free fn no slower than before (0.91x tokio)"
            } else {
                "W1 Timer handle no slower than before (0.79x tokio)"
            },
            format!("{w1:.2}x"),
            no_slower(w1, w1_before),
        ));
        targets.push(target(
            9,
            if name == tickless {
                "W1t free fn no slower than before (0.89x tokio)"
            } else {
                "W1t Timer handle no slower than before (0.79x tokio)"
            },
            format!("{w1t:.2}x"),
            no_slower(w1t, w1t_before),
        ));
    }
    let pingora = Peer::Pingora.name();
    let (best_t, best_w4t) = w4t.best_peer(Better::Higher);
    for name in [tickless, handle] {
        let w1r_ns = w1r.median(name);
        targets.push(target(
            20,
            if name == tickless {
                "W1r <= pingora-timeout and <= 0.7x tokio, free fns"
            } else {
                "W1r <= pingora-timeout and <= 0.7x tokio, Timer handle"
            },
            format!(
                "{:.2}x pingora, {:.2}x tokio",
                w1r_ns / w1r.median(pingora),
                ratio(&w1r, name)
            ),
            w1r_ns <= w1r.median(pingora) && ratio(&w1r, name) <= 0.7,
        ));
        let mops = w4t.median(name);
        targets.push(target(
            20,
            if name == tickless {
                "W4t T=8 >= 1.5x the best peer, free fns"
            } else {
                "W4t T=8 >= 1.5x the best peer, one shared Timer"
            },
            format!("{:.2}x {best_t}", mops / best_w4t),
            mops >= 1.5 * best_w4t,
        ));
    }
    for (what, samples) in [("W1", &w1), ("W1t", &w1t), ("W1r", &w1r)] {
        let free_over_handle = samples.median(tickless) / samples.median(handle);
        targets.push(target(
            20,
            match what {
                "W1" => "W1 free fns within 5 % of the Timer handle",
                "W1t" => "W1t free fns within 5 % of the Timer handle",
                _ => "W1r free fns within 5 % of the Timer handle",
            },
            format!("{free_over_handle:.2}x"),
            free_over_handle <= 1.05,
        ));
    }
    for name in [tickless, handle] {
        let (t2, t8) = (w4[0].median(name), w4[1].median(name));
        targets.push(target(
            9,
            if name == tickless {
                "W4 T=8 >= 2x the best peer, free fns"
            } else {
                "W4 T=8 >= 2x the best peer, one shared Timer"
            },
            format!("{:.2}x {best}", t8 / best_t8),
            t8 >= 2.0 * best_t8,
        ));
        targets.push(target(
            9,
            if name == tickless {
                "W4 T=8 > T=2, free fns"
            } else {
                "W4 T=8 > T=2, one shared Timer"
            },
            format!("{} vs {} Mops/s", fmt(t8), fmt(t2)),
            t8 > t2,
        ));
    }
    targets
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
        4,
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
        "c2" => tickless_bench::callbacks::c2(arg(1), count),
        // purgatory <tickless|tokio|threshold> <count> <rate> <p50 ms> <p75 ms> [force]
        "purgatory" => {
            let float = |i: usize| arg(i).parse::<f64>().unwrap_or(0.0);
            match arg(1) {
                "threshold" => {
                    tickless_bench::purgatory::threshold(float(3), count, float(4), float(5))
                }
                peer => tickless_bench::purgatory::general(
                    peer,
                    arg(6) == "force",
                    float(3),
                    count,
                    float(4),
                    float(5),
                ),
            }
        }
        "cmem" => tickless_bench::callbacks::memory(arg(1), count),
        other => panic!("unknown child workload {other:?}"),
    }
}

/// The deadline of item `i` of `count`, relative to `start`.
fn deadline(start: Instant, i: u64) -> Instant {
    start + OFFSET + Duration::from_micros(tickless_bench::spread(i, SPREAD.as_micros() as u64))
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
        "tickless-thread" => {
            let timer = tickless::Timer::builder()
                .driver(tickless::Driver::Thread)
                .tick(Duration::from_micros(100))
                .build()
                .expect("a thread-driven timer");
            run(count, |at| timer.sleep_until(tokio_instant(at))).await
        }
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
        "pingora" => {
            run(count, |at| {
                let after = at.saturating_duration_since(Instant::now());
                Box::pin(pingora_timeout::fast_timeout::fast_sleep(after))
            })
            .await
        }
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
        let (cpu, switches, driver) = (cpu_time(), tickless_bench::voluntary_switches(), wakeups());
        std::thread::spawn(move || {
            std::thread::sleep(wait);
            let _ = tx.send(());
        });
        rx.await.expect("the waking thread");
        answer(&[
            ("cpu_ms", ms(cpu_time() - cpu)),
            (
                "switches",
                (tickless_bench::voluntary_switches().saturating_sub(switches)) as f64,
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
        Peer::Pingora => {
            // Ten minutes: from 15 minutes on, pingora-timeout hands a timer to tokio's.
            let sleep = || Box::pin(pingora_timeout::fast_timeout::fast_sleep(TEN_MINUTES));
            run(count, wait, sleep, none).await
        }
    }
}

/// How far ahead pingora-timeout's idle and pending timers are, in W3 and memory: its own
/// wheel takes timers up to 15 minutes ahead and hands longer ones to tokio's.
const TEN_MINUTES: Duration = Duration::from_secs(600);

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
        let before = tickless_bench::rss_bytes();
        poll_fn(|cx| {
            for slot in &mut sleeps {
                let mut sleep = Box::pin(make());
                assert!(sleep.as_mut().poll(cx).is_pending());
                *slot = Some(sleep);
            }
            Poll::Ready(())
        })
        .await;
        let grown = tickless_bench::rss_bytes().saturating_sub(before);
        // All dropped (each driver given a moment to take the drops in), then as many made
        // again: RSS never shrinks, but memory that was freed is reused, so what the
        // second batch adds is what the first left held (timers still registered).
        for slot in &mut sleeps {
            *slot = None;
        }
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let first = tickless_bench::rss_bytes();
        poll_fn(|cx| {
            for slot in &mut sleeps {
                let mut sleep = Box::pin(make());
                assert!(sleep.as_mut().poll(cx).is_pending());
                *slot = Some(sleep);
            }
            Poll::Ready(())
        })
        .await;
        let retained = tickless_bench::rss_bytes().saturating_sub(first);
        answer(&[
            ("bytes_per_timer", grown as f64 / count as f64),
            ("retained_per_timer", retained as f64 / count as f64),
        ]);
    }
    const HOUR: Duration = Duration::from_secs(3600);
    match peer {
        Peer::Tickless | Peer::TicklessTimer => run(count, || tickless::sleep(HOUR)).await,
        Peer::Tokio => run(count, || tokio::time::sleep(HOUR)).await,
        Peer::FuturesTimer => run(count, || futures_timer::Delay::new(HOUR)).await,
        Peer::AsyncIo => run(count, || async_io::Timer::after(HOUR)).await,
        // Ten minutes: from 15 minutes on, pingora-timeout hands a timer to tokio's.
        Peer::Pingora => {
            run(count, || {
                pingora_timeout::fast_timeout::fast_sleep(TEN_MINUTES)
            })
            .await
        }
    }
}

/// DQ2: `count` items inserted into a `DelayQueue` and its stream drained.
async fn drain(tickless: bool, count: u64) {
    async fn run<Q: futures::Stream + Unpin>(
        start: Instant,
        mut queue: Q,
        deadline: impl Fn(Q::Item) -> Instant,
        count: u64,
        cpu: Duration,
    ) {
        let mut done = Vec::with_capacity(count as usize);
        while let Some(item) = queue.next().await {
            done.push((Instant::now(), deadline(item)));
        }
        let cpu = cpu_time() - cpu;
        let mut readings = lateness_readings(start, done);
        readings.push(("cpu_ms", ms(cpu)));
        answer(&readings);
    }
    // Process CPU from before the inserts to the end of the drain, as W2 counts it.
    let cpu = cpu_time();
    let start = Instant::now();
    if tickless {
        let mut queue = tickless::DelayQueue::with_capacity(count as usize);
        for i in 0..count {
            let at = deadline(start, i);
            queue.insert_at(at, tokio::time::Instant::from_std(at));
        }
        run(start, queue, |item| item.into_inner(), count, cpu).await;
    } else {
        let mut queue = tokio_util::time::DelayQueue::with_capacity(count as usize);
        for i in 0..count {
            let at = deadline(start, i);
            queue.insert_at(at, tokio::time::Instant::from_std(at));
        }
        run(start, queue, |item| item.into_inner(), count, cpu).await;
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
    let peers = [
        "tickless",
        "tokio",
        "futures-timer",
        "async-io",
        "pingora",
        "none",
    ];
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
    let tokio_overhead = overhead.median("tokio");
    vec![
        target(
            4,
            "W2 completes in plain mode, 0 early (every round)",
            format!(
                "fewest fired {}, most early {}",
                fmt(fewest_fired),
                fmt(most_early)
            ),
            fewest_fired == sizes.mass as f64 && most_early == 0.0,
        ),
        target(
            4,
            "W2 overhead <= 0.5x the best peer",
            format!("{} vs {} ms ({best})", fmt(ours), fmt(best_overhead)),
            ours <= 0.5 * best_overhead,
        ),
        target(
            9,
            "W2 overhead <= tokio's",
            format!("{} vs {} ms", fmt(ours), fmt(tokio_overhead)),
            ours <= tokio_overhead,
        ),
        target(
            9,
            "W2 process CPU <= 0.6x unconstrained tokio",
            format!("{cpu_ratio:.2}x"),
            cpu_ratio <= 0.6,
        ),
    ]
}

/// W5: `count` sleeps spread over a second, few enough that nothing backs up; how late
/// each completes, for the default timer, a thread-driven timer with a fine tick, and the
/// peers.
fn precision_workload(sizes: &Sizes) -> Vec<Target> {
    let peers = ["tickless", "tickless-thread", "tokio", "async-io"];
    let readings = ["fired", "early", "p50_ms", "p99_ms", "max_ms"];
    let samples = children(sizes.rounds.min(3), "w2", &peers, sizes.precise, &readings);
    println!(
        "\n### W5 precision: {} sleeps, deadlines uniform over {SPREAD:?} from {OFFSET:?} on, one FuturesUnordered\n",
        sizes.precise
    );
    println!("`tickless-thread` is a `Timer` with `Driver::Thread` and a 100 µs tick; `tickless` is the default (inside tokio's timer, 1 ms tick).\n");
    println!("| implementation | fired | early | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    for peer in peers {
        let cells: Vec<String> = samples.iter().map(|s| fmt(s.median(peer))).collect();
        println!("| {peer} | {} |", cells.join(" | "));
    }
    let p99 = samples[3].median("tickless-thread");
    let (_, most_early) = samples[1].range("tickless-thread");
    vec![target(
        9,
        "W5 fine tick (Thread, 100 us): p99 lateness <= 0.5 ms, 0 early",
        format!("{} ms, most early {}", fmt(p99), fmt(most_early)),
        p99 <= 0.5 && most_early == 0.0,
    )]
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
        Peer::Pingora,
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
            4,
            "W3 no more CPU than tokio",
            format!("{} vs {} ms", fmt(cpu), fmt(tokio_cpu)),
            cpu <= tokio_cpu,
        ),
        target(
            4,
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
        "cpu_ms",
        "p50_ms",
        "p99_ms",
        "max_ms",
    ];
    let samples = children(sizes.rounds.min(3), "dq2", &peers, sizes.mass, &readings);
    println!("\n### DQ2 DelayQueue drain: {} items, deadlines uniform over {SPREAD:?} from {OFFSET:?} on\n", sizes.mass);
    println!("| implementation | drained | early | overhead ms | process CPU ms | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for peer in peers {
        let cells: Vec<String> = samples.iter().map(|s| fmt(s.median(peer))).collect();
        println!("| {peer} DelayQueue | {} |", cells.join(" | "));
    }
    let [_, _, _, cpu, _, p99, ..] = &samples[..] else {
        unreachable!()
    };
    let cpu_ratio = cpu.median("tickless") / cpu.median("tokio-util");
    let (p99, p99_peer) = (p99.median("tickless"), p99.median("tokio-util"));
    vec![
        target(
            4,
            "DQ2 p99 lateness <= 10 ms",
            format!("{} ms", fmt(p99)),
            p99 <= 10.0,
        ),
        target(
            20,
            "DQ2 p99 lateness <= tokio-util's",
            format!("{} vs {} ms", fmt(p99), fmt(p99_peer)),
            p99 <= p99_peer,
        ),
        target(
            20,
            "DQ2 process CPU <= 0.4x tokio-util",
            format!("{cpu_ratio:.2}x"),
            cpu_ratio <= 0.4,
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Callbacks: C1, C3 (in this process), C2 and memory (one child each)

fn callback_workloads(sizes: &Sizes) -> Vec<Target> {
    use tickless_bench::callbacks::{arg, c1, c3, PEERS};
    let (mut c1s, mut c3s) = (Samples::default(), Samples::default());
    for _ in 0..sizes.rounds {
        for peer in PEERS {
            c1s.push(peer, c1(peer, sizes.churn / 2));
            c3s.push(peer, c3(peer, 8, sizes.churn / 2));
        }
    }
    let tokio = "tokio spawn+sleep";
    c1s.print("C1 callback schedule+cancel, one task", "ns/op", tokio);
    c3s.print(
        "C3 callback schedule+cancel, 8 tasks on 2 workers, one shared timer",
        "Mops/s",
        tokio,
    );
    let readings = [
        "ran",
        "early",
        "cpu_ms",
        "overhead_ms",
        "p50_ms",
        "p99_ms",
        "max_ms",
    ];
    let args: Vec<&str> = PEERS.iter().map(|peer| arg(peer)).collect();
    let c2 = children(sizes.rounds.min(3), "c2", &args, sizes.mass, &readings);
    println!(
        "\n### C2 {} callbacks due uniformly over {SPREAD:?} from {OFFSET:?} on\n",
        sizes.mass
    );
    println!("| implementation | ran | early | process CPU ms | overhead ms | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (peer, arg) in PEERS.iter().zip(&args) {
        let cells: Vec<String> = c2.iter().map(|s| fmt(s.median(arg))).collect();
        println!("| {peer} | {} |", cells.join(" | "));
    }
    println!(
        "\n### Memory per pending callback ({} fire-and-forget, an hour ahead, no captures)\n",
        sizes.idle
    );
    println!("| implementation | bytes per pending callback |");
    println!("|---|---:|");
    let mut ours = f64::NAN;
    for (peer, arg) in PEERS.iter().zip(&args) {
        let bytes = child(&["cmem", arg, &sizes.idle.to_string()])["bytes_per_callback"];
        if *arg == "tickless" {
            ours = bytes;
        }
        println!("| {peer} | {} |", fmt(bytes));
    }
    let c1_ratio = c1s.median("tickless") / c1s.median(tokio);
    let c1_ns = c1s.median("tickless");
    let c3_ratio = c3s.median("tickless") / c3s.median(tokio);
    let cpu_ratio = c2[2].median("tickless") / c2[2].median("tokio");
    let (fewest_ran, _) = c2[0].range("tickless");
    let (_, most_early) = c2[1].range("tickless");
    vec![
        target(
            10,
            "C1 schedule+cancel <= 0.5x tokio spawn+sleep+abort",
            format!("{c1_ratio:.2}x"),
            c1_ratio <= 0.5,
        ),
        target(
            10,
            "C1 schedule+cancel < 134 ns (Netty's HashedWheelTimer here)",
            format!("{} ns", fmt(c1_ns)),
            c1_ns < 134.0,
        ),
        target(
            10,
            "C2 all ran, none early (every round)",
            format!(
                "fewest ran {}, most early {}",
                fmt(fewest_ran),
                fmt(most_early)
            ),
            fewest_ran == sizes.mass as f64 && most_early == 0.0,
        ),
        target(
            10,
            "C2 process CPU <= 0.5x tokio spawn+sleep",
            format!("{cpu_ratio:.2}x"),
            cpu_ratio <= 0.5,
        ),
        target(
            10,
            "C3 >= 2x tokio spawn+sleep Mops/s",
            format!("{c3_ratio:.2}x"),
            c3_ratio >= 2.0,
        ),
        target(
            10,
            "<= 72 bytes per pending callback (Netty's here)",
            format!("{} B", fmt(ours)),
            ours.round() <= 72.0,
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Issue 11: the purgatory (a port of Kafka's TestPurgatoryPerformance)

/// One purgatory run in a child: `peer` is `tickless`, `tokio` or `threshold`; `force`
/// for Kafka's own completer (it forces completions instead of checking keys).
fn purgatory_run(
    peer: &str,
    rate: u64,
    seconds: f64,
    latency: (u32, u32),
    force: bool,
) -> Readings {
    let count = (rate as f64 * seconds) as u64;
    child(&[
        "purgatory",
        peer,
        &count.to_string(),
        &rate.to_string(),
        &latency.0.to_string(),
        &latency.1.to_string(),
        if force { "force" } else { "check" },
    ])
}

/// Whether a run kept up: it issued at the target rate, and expired no more requests than
/// had to (those whose condition comes after the timeout), give or take 1 %.
fn kept_up(run: &Readings) -> bool {
    let ended = run["completed"] + run["expired"];
    run["achieved_rate"] >= 0.99 * run["target_rate"]
        && run["expired"] <= run["unserved"] + 0.01 * ended
        && run["lost"] == 0.0
}

/// A sweep of rates for each peer, printed as one table; returns each peer's runs.
fn purgatory_sweep(
    title: &str,
    peers: &[&str],
    rates: &[u64],
    seconds: f64,
    latency: (u32, u32),
    force: bool,
) -> Vec<(String, Vec<Readings>)> {
    println!("\n### {title}\n");
    println!("| implementation | target req/s | achieved req/s | CPU µs/request | completion p50 / p99 ms | expiry p99 ms | expired (had to) | lost | watched at end | peak RSS MB | kept up |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut all = Vec::new();
    for peer in peers {
        let mut runs = Vec::new();
        for &rate in rates {
            let run = purgatory_run(peer, rate, seconds, latency, force);
            println!(
                "| {peer} | {rate} | {} | {} | {} / {} | {} | {} ({}) | {} | {} | {} | {} |",
                fmt(run["achieved_rate"]),
                fmt(run["cpu_us_per_request"]),
                fmt(run["completion_p50_ms"]),
                fmt(run["completion_p99_ms"]),
                fmt(run["expiry_p99_ms"]),
                fmt(run["expired"]),
                fmt(run["unserved"]),
                fmt(run["lost"]),
                fmt(run["left_watched"]),
                fmt(run["peak_rss_mb"]),
                if kept_up(&run) { "yes" } else { "**no**" },
            );
            let stop = !kept_up(&run);
            runs.push(run);
            if stop {
                break; // saturated: higher rates only take longer to say so
            }
        }
        all.push((peer.to_string(), runs));
    }
    all
}

/// The highest rate of a sweep below which every run kept up.
fn saturation(runs: &[Readings]) -> f64 {
    runs.iter()
        .take_while(|run| kept_up(run))
        .map(|run| run["target_rate"])
        .fold(0.0, f64::max)
}

fn purgatory_workloads(sizes: &Sizes) -> Vec<Target> {
    let quick = sizes.rounds == 1;
    let seconds = if quick { 1.0 } else { 2.0 };
    let peers = ["tickless", "tokio"];
    println!("\n### Purgatory (issue 11): Kafka's TestPurgatoryPerformance\n");
    println!("Poisson arrivals; each request watches 3 keys of 100 until its condition holds (log-normal time), or 200 ms. `check`: when a condition comes to hold, the completer checks the request's 3 keys, re-running every condition watching each (the issue's benchmark: work grows with the rate squared); `force`: the completer completes the request directly (Kafka's own benchmark). `tokio`: a sharded map of key to waiters with `oneshot` senders, and a task per request awaiting `tokio::time::timeout`. The generator and completer work in 200 µs rounds, the completer's agenda in 100 µs slots: completion lateness includes up to 0.5 ms of the harness's own. A sweep stops at the first rate that does not keep up (issues at 99 % of the target and expires no more than it must, ±1 %).");
    let check_rates: &[u64] = if quick {
        &[25_000, 50_000, 100_000]
    } else {
        &[25_000, 50_000, 75_000, 100_000, 110_000, 125_000, 150_000]
    };
    let check = purgatory_sweep(
        &format!(
            "General conditions, `check`, completion median 20 ms / p75 60 ms, {seconds} s per run"
        ),
        &peers,
        check_rates,
        seconds,
        (20, 60),
        false,
    );
    let slow_rates: &[u64] = if quick {
        &[25_000]
    } else {
        &[25_000, 50_000, 75_000, 100_000]
    };
    purgatory_sweep(
        &format!("General conditions, `check`, completion median 200 ms / p75 400 ms, {seconds} s per run"),
        &peers,
        slow_rates,
        seconds,
        (200, 400),
        false,
    );
    let force_rates: &[u64] = if quick {
        &[100_000, 200_000]
    } else {
        &[100_000, 200_000, 300_000, 400_000, 500_000, 600_000]
    };
    let forced = purgatory_sweep(
        &format!("General conditions, `force` (Kafka's completer), median 20 ms / p75 60 ms, {seconds} s per run"),
        &peers,
        force_rates,
        seconds,
        (20, 60),
        true,
    );
    // CPU per request at 50,000 requests/s: the median of several runs (process CPU is
    // counted in 10 ms ticks, and the machine is shared).
    let mut cpu = Samples::default();
    let mut worst_expiry_p99 = 0.0_f64;
    let mut retained = 0.0_f64;
    for _ in 0..sizes.rounds.min(3) {
        for peer in ["tickless", "tokio", "harness"] {
            let run = purgatory_run(peer, 50_000, seconds, (20, 60), false);
            cpu.push(peer, run["cpu_us_per_request"]);
            if peer == "tickless" {
                worst_expiry_p99 = worst_expiry_p99.max(run["expiry_p99_ms"]);
                retained = retained.max(run["left_watched"]);
            }
        }
    }
    cpu.print(
        "General conditions, `check`, 50,000 requests/s: process CPU per request (`harness`: the generator and completer alone, whose CPU every run includes)",
        "µs",
        "tokio",
    );
    let harness = cpu.median("harness");
    println!(
        "\nNet of the harness: tickless {} µs, tokio {} µs per request, {:.2}x.",
        fmt(cpu.median("tickless") - harness),
        fmt(cpu.median("tokio") - harness),
        (cpu.median("tickless") - harness) / (cpu.median("tokio") - harness),
    );
    let threshold_rates: &[u64] = if quick {
        &[1_000_000]
    } else {
        &[500_000, 1_000_000, 1_500_000]
    };
    let threshold = purgatory_sweep(
        "Threshold waits (each request waits for its key's watermark to pass its offset; the completer advances it), median 20 ms / p75 60 ms, 2 s per run",
        &["threshold"],
        threshold_rates,
        2.0,
        (20, 60),
        false,
    );
    let ours = |sweep: &[(String, Vec<Readings>)], peer: &str| {
        sweep
            .iter()
            .find(|(p, _)| p == peer)
            .map(|(_, runs)| runs.clone())
            .unwrap_or_default()
    };
    let (check_ours, check_peer) = (ours(&check, "tickless"), ours(&check, "tokio"));
    let (sat, sat_peer) = (saturation(&check_ours), saturation(&check_peer));
    let (forced_ours, forced_peer) = (ours(&forced, "tickless"), ours(&forced, "tokio"));
    let million = ours(&threshold, "threshold")
        .into_iter()
        .find(|run| run["target_rate"] == 1_000_000.0);
    let million_share = million
        .as_ref()
        .map_or(0.0, |run| run["achieved_rate"] / run["target_rate"]);
    // Every tickless run that kept up: expiry lateness, and nothing retained.
    for run in check_ours
        .iter()
        .chain(&forced_ours)
        .chain(&ours(&threshold, "threshold"))
    {
        if kept_up(run) {
            worst_expiry_p99 = worst_expiry_p99.max(run["expiry_p99_ms"]);
        }
        retained = retained.max(run["left_watched"]);
    }
    let cpu_ratio = cpu.median("tickless") / cpu.median("tokio");
    println!(
        "\nSaturation (`check`, 20/60 ms): tickless {} req/s, tokio {} req/s; (`force`): tickless {} req/s, tokio {} req/s (the highest rate of each sweep that kept up).",
        fmt(sat),
        fmt(sat_peer),
        fmt(saturation(&forced_ours)),
        fmt(saturation(&forced_peer)),
    );
    vec![
        target(
            11,
            "general (check) saturation >= 100,000 req/s",
            format!("{} req/s", fmt(sat)),
            sat >= 100_000.0,
        ),
        target(
            11,
            "general (check) saturation >= 3x the tokio-built peer's",
            format!("{:.2}x ({} vs {})", sat / sat_peer, fmt(sat), fmt(sat_peer)),
            sat >= 3.0 * sat_peer,
        ),
        target(
            11,
            "general CPU/request at 50,000 req/s <= 0.5x the peer's",
            format!("{cpu_ratio:.2}x"),
            cpu_ratio <= 0.5,
        ),
        target(
            11,
            "threshold waits: 1,000,000 req/s, achieved >= 99 %",
            format!("{:.1} %", million_share * 100.0),
            million_share >= 0.99,
        ),
        target(
            11,
            "expiry lateness p99 <= 2 ms (every tickless run that kept up)",
            format!("worst {} ms", fmt(worst_expiry_p99)),
            worst_expiry_p99 <= 2.0,
        ),
        target(
            11,
            "zero operations retained: watched() = 0 at the end (every run)",
            format!("most left {}", fmt(retained)),
            retained == 0.0,
        ),
    ]
}
