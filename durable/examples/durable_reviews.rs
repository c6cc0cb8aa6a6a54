//! The seed's scenario with time compressed: "48 hours after an order closes, if the
//! customer has not reviewed it, record a 5-star review". 100,000 orders whose review
//! deadlines fall over 30 s (a tenth are reviewed in time and cancelled); a leader and a
//! spare candidate; three worker processes, one killed with SIGKILL halfway. Prints a
//! progress bar, then the lag percentiles, how many were lost (0) and how many were
//! handled twice (only orders whose handler had started in the killed worker).
//!
//! ```text
//! cargo run --release -p tickless-durable --example durable_reviews           # its own redis-server
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release -p tickless-durable --example durable_reviews
//! cargo run --release -p tickless-durable --example durable_reviews -- 20000 10   # orders, seconds
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tickless_durable::{LeaderOptions, Queue, When, WorkerOptions};

const QUEUE: &str = "reviews";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The parent reads the workers' pipes on this thread while the leaders run on the
    // runtime's workers.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    if args.first().map(String::as_str) == Some("--worker") {
        runtime.block_on(worker(&args[1]));
        return;
    }
    let orders: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let seconds: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(30);
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = tickless_test_support::RedisServer::start_with_fsync("everysec");
            let url = server.url();
            (Some(server), url)
        }
    };
    let ok = runtime.block_on(shop(&url, orders, seconds));
    drop(runtime);
    drop(_server); // stops our redis-server before the exit status is set
    if !ok {
        std::process::exit(1);
    }
}

/// A worker process: records each review, says which on stdout.
async fn worker(url: &str) {
    let queue = Queue::connect(url, QUEUE).await.expect("connect");
    let mut options = WorkerOptions::default();
    options.lease = Duration::from_secs(2);
    let result = queue
        .worker(options)
        .run(|job| async move {
            let lag_us = job.lag().as_micros();
            // "Recording the review" takes a moment, so a killed worker holds some.
            tickless::sleep(Duration::from_millis(2)).await;
            println!("{} {} {lag_us}", job.id(), job.attempt());
            Ok::<(), std::io::Error>(())
        })
        .await;
    if let Err(err) = result {
        eprintln!("worker: {err}");
    }
}

fn spawn_worker(url: &str, tx: &mpsc::Sender<(usize, String)>, n: usize) -> Child {
    let mut child = Command::new(std::env::current_exe().expect("this program"))
        .args(["--worker", url])
        .stdout(Stdio::piped())
        .spawn()
        .expect("a worker process");
    let out = child.stdout.take().expect("stdout");
    let tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((n, line));
        }
    });
    child
}

/// Runs the shop; `false` if an order was lost or handled twice without a crash to
/// explain it.
async fn shop(url: &str, orders: usize, seconds: u64) -> bool {
    let queue = Queue::connect(url, QUEUE).await.expect("connect");
    println!("{orders} orders, review deadlines over {seconds} s, queue {QUEUE:?} at {url}");
    let spread = Duration::from_secs(seconds);
    let ids: Vec<String> = (0..orders).map(|i| format!("order:{i}")).collect();
    let start = Instant::now();
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        let after = Duration::from_secs(1) + spread * i as u32 / orders as u32;
        (id.as_str(), b"5 stars".as_slice(), When::After(after))
    });
    queue.schedule_batch(jobs).await.expect("schedule");
    println!("scheduled in {:?}", start.elapsed());
    // A tenth of the customers review in time: their default reviews are cancelled.
    let reviewed: Vec<&str> = ids.iter().step_by(10).map(String::as_str).collect();
    queue
        .cancel_batch(reviewed.iter().copied())
        .await
        .expect("cancel");
    let expected = orders - reviewed.len();

    let leader = queue.leader(LeaderOptions::default()).spawn();
    let spare = queue.leader(LeaderOptions::default()).spawn();
    let (tx, rx) = mpsc::channel();
    let mut workers: Vec<Child> = (0..3).map(|n| spawn_worker(url, &tx, n)).collect();
    let mut handled: HashMap<String, Vec<(usize, u32)>> = HashMap::with_capacity(expected);
    let mut lags: Vec<u64> = Vec::with_capacity(expected);
    let mut killed = false;
    let deadline = Instant::now() + spread + Duration::from_secs(60);
    while handled.len() < expected && Instant::now() < deadline {
        while let Ok((n, line)) =
            tokio::task::block_in_place(|| rx.recv_timeout(Duration::from_millis(100)))
        {
            let mut fields = line.split(' ');
            let (Some(id), Some(attempt), Some(lag)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            handled
                .entry(id.to_string())
                .or_default()
                .push((n, attempt.parse().unwrap_or(0)));
            lags.push(lag.parse().unwrap_or(0));
            if handled.len() % 1000 == 0 {
                break;
            }
        }
        let done = handled.len();
        let bar = 40 * done / expected.max(1);
        print!(
            "\r[{}{}] {done}/{expected}",
            "#".repeat(bar),
            " ".repeat(40 - bar)
        );
        let _ = std::io::stdout().flush();
        if !killed && done >= expected / 2 {
            let _ = workers[0].kill(); // SIGKILL
            let _ = workers[0].wait();
            killed = true;
            println!("\nworker 0 killed (kill -9) at {done} reviews");
        }
    }
    println!();
    // The last acks ride on a claim or go within 5 ms.
    tickless::sleep(Duration::from_millis(200)).await;
    let stats = queue.stats().await.expect("stats");
    for worker in &mut workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }
    let _ = spare.stop().await;
    let _ = leader.stop().await;
    lags.sort_unstable();
    let q = |q: f64| {
        lags.get(((lags.len().max(1) - 1) as f64 * q) as usize)
            .map_or(0.0, |us| *us as f64 / 1e3)
    };
    let lost = ids
        .iter()
        .enumerate()
        .filter(|(i, id)| i % 10 != 0 && !handled.contains_key(*id))
        .count();
    let twice = handled.values().filter(|h| h.len() > 1).count();
    let unexplained = handled
        .values()
        .filter(|h| h.len() > 1 && !h.iter().any(|(n, _)| *n == 0))
        .count();
    println!(
        "due-to-handler lag: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        q(0.5),
        q(0.99),
        q(1.0)
    );
    println!("lost: {lost}");
    println!(
        "handled twice: {twice} (with a first run in the killed worker: {})",
        twice - unexplained
    );
    println!(
        "left in the queue: {} scheduled, {} ready, {} in flight, {} dead",
        stats.scheduled, stats.ready, stats.in_flight, stats.dead
    );
    lost == 0 && unexplained == 0
}
