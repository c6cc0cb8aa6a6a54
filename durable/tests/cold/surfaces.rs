//! What an operator sees of the cold tier (with feature `dashboard`), read back and held
//! to what was moved: `/metrics` through the Prometheus text parser the metrics test uses
//! (`tickless_jobs{state="cold"}`, `tickless_cold_window_jobs`, `_window_bytes`,
//! `tickless_cold_segments`, `tickless_cold_next_window_start_seconds`, the `cold_moved`
//! and `cold_loaded` events), the dashboard's cold section, `inspect`'s cold lines (the
//! binary run as a process), and `Queue::counters()`. Jobs, segments and window starts
//! are exact; bytes are the segment files' sizes in the directory.

use super::common::*;
use crate::in_process::get;
use prometheus_parse::{Scrape, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tickless_durable::{ColdTier, Queue, When};
use tickless_test_support::{at, RedisServer, T0};

/// The `/metrics` samples of `metric` with one value, as (labels but `queue`, value).
fn samples(scrape: &Scrape, metric: &str) -> BTreeMap<Vec<(String, String)>, f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .map(|s| {
            let mut labels: Vec<(String, String)> = s
                .labels
                .iter()
                .filter(|(k, _)| k.as_str() != "queue")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            labels.sort();
            let value = match s.value {
                Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => v,
                _ => panic!("{metric} is not a single value"),
            };
            (labels, value)
        })
        .collect()
}

fn label(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.sort();
    labels
}

/// `tickless-durable inspect <url> <queue>`: what it printed (it must end, with 0, within
/// 30 s).
fn inspect(server: &RedisServer, queue: &Queue) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .args(["inspect", &server.url(), queue.name()])
        .env_remove("REDIS_URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run tickless-durable");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tickless-durable inspect did not end within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "inspect: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What the store holds per window (ms): (segments, bytes), from the directory.
fn stored(dir: &Path) -> BTreeMap<u64, (u64, u64)> {
    let mut per = BTreeMap::new();
    for file in files(dir) {
        let window: u64 = file
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|w| w.to_str())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{file:?} is not under a window's folder"));
        let entry = per.entry(window).or_insert((0, 0));
        entry.0 += 1;
        entry.1 += std::fs::metadata(&file).unwrap().len();
    }
    per
}

/// A cold window as every surface must show it.
#[derive(Clone, Copy, Debug)]
struct Window {
    start_ms: u64,
    jobs: u64,
    segments: u64,
    bytes: u64,
}

/// Every surface says exactly `windows` (earliest first) are cold, with the clock at
/// `now`, after `moved` jobs moved out and `loaded` back, with `hot` jobs scheduled and
/// ready in Redis.
async fn check_surfaces(
    server: &RedisServer,
    queue: &Queue,
    now: u64,
    windows: &[Window],
    (moved, loaded): (u64, u64),
    hot: (u64, u64),
) {
    let cold: u64 = windows.iter().map(|w| w.jobs).sum();
    let bytes: u64 = windows.iter().map(|w| w.bytes).sum();
    let secs = |w: &Window| (w.start_ms / 1000).to_string();

    // Queue::counters.
    let counters = queue.counters().await.unwrap();
    assert_eq!(
        (counters.cold_moved, counters.cold_loaded),
        (moved, loaded),
        "counters: cold_moved, cold_loaded"
    );

    // /metrics, through the Prometheus parser.
    let text = get(queue, "/metrics").await;
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let jobs = samples(&scrape, "tickless_jobs");
    assert_eq!(jobs[&label(&[("state", "cold")])], cold as f64, "{text}");
    assert_eq!(
        (
            jobs[&label(&[("state", "scheduled")])],
            jobs[&label(&[("state", "ready")])]
        ),
        (hot.0 as f64, hot.1 as f64),
        "{text}"
    );
    let want_jobs: BTreeMap<_, f64> = windows
        .iter()
        .map(|w| (label(&[("window", &secs(w))]), w.jobs as f64))
        .collect();
    assert_eq!(
        samples(&scrape, "tickless_cold_window_jobs"),
        want_jobs,
        "{text}"
    );
    let want_bytes: BTreeMap<_, f64> = windows
        .iter()
        .map(|w| (label(&[("window", &secs(w))]), w.bytes as f64))
        .collect();
    assert_eq!(
        samples(&scrape, "tickless_cold_window_bytes"),
        want_bytes,
        "{text}"
    );
    let segments: u64 = windows.iter().map(|w| w.segments).sum();
    assert_eq!(
        samples(&scrape, "tickless_cold_segments"),
        BTreeMap::from([(vec![], segments as f64)]),
        "{text}"
    );
    let next: BTreeMap<_, f64> = windows
        .first()
        .map(|w| (vec![], (w.start_ms / 1000) as f64))
        .into_iter()
        .collect();
    assert_eq!(
        samples(&scrape, "tickless_cold_next_window_start_seconds"),
        next,
        "{text}"
    );
    let events = samples(&scrape, "tickless_events_total");
    assert_eq!(
        (
            events[&label(&[("event", "cold_moved")])],
            events[&label(&[("event", "cold_loaded")])]
        ),
        (moved as f64, loaded as f64),
        "{text}"
    );

    // The dashboard's queue page: its cold section, a row per window.
    let page = get(queue, &format!("/queue/{}", queue.name())).await;
    if windows.is_empty() {
        assert!(
            !page.contains("id=\"cold-summary\"") && !page.contains("<table id=\"cold\""),
            "a cold section with nothing cold"
        );
    } else {
        let summary = format!(
            "<p id=\"cold-summary\">{cold} jobs in {} windows, {bytes} bytes in the store.",
            windows.len()
        );
        assert!(page.contains(&summary), "no {summary:?} in the page");
        let start = page.find("<table id=\"cold\">").expect("the cold table");
        let table = &page[start..start + page[start..].find("</table>").unwrap()];
        let rows: Vec<Vec<&str>> = table
            .split("<tr>")
            .skip(2) // before the first row, the header
            .map(|row| {
                row.split("<td")
                    .skip(1)
                    .map(|cell| {
                        let cell = &cell[cell.find('>').unwrap() + 1..];
                        &cell[..cell.find("</td>").unwrap()]
                    })
                    .collect()
            })
            .collect();
        let want: Vec<Vec<String>> = windows
            .iter()
            .map(|w| {
                vec![
                    w.jobs.to_string(),
                    w.segments.to_string(),
                    w.bytes.to_string(),
                ]
            })
            .collect();
        let got: Vec<Vec<String>> = rows
            .iter()
            .map(|r| r[1..].iter().map(|c| c.to_string()).collect())
            .collect();
        assert_eq!(got, want, "the cold table's rows: jobs, segments, bytes");
        assert!(
            rows.iter().all(|r| r[0].starts_with("in ")),
            "a window starting in the past: {rows:?}"
        );
    }

    // inspect's cold lines (its clock is the manual one: the times are exact).
    let printed = inspect(server, queue);
    let lines: Vec<&str> = printed
        .lines()
        .filter(|l| l.starts_with("  cold "))
        .collect();
    let ahead = |w: &Window| Duration::from_millis(w.start_ms - now);
    let mut want = Vec::new();
    if let Some(first) = windows.first() {
        want.push(format!(
            "  cold {cold} jobs in {} windows ({bytes} bytes in the store), the next starting \
             in {:.3?}",
            windows.len(),
            ahead(first)
        ));
    }
    for w in windows {
        want.push(format!(
            "  cold window starting in {:.3?}: {} jobs, {} segments, {} bytes",
            ahead(w),
            w.jobs,
            w.segments,
            w.bytes
        ));
    }
    assert_eq!(lines, want, "inspect printed:\n{printed}");
}

/// Two windows go cold: the first (A) in two segments (moved by two passes: 200 jobs,
/// then 100), the second (B, 5 h later) in one of 50. Every surface says so, exactly;
/// then A is loaded and they say B alone; then B, and they say nothing is cold, every
/// job back in Redis, 350 moved and 350 loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cold_surface_counts_the_jobs_moved_and_then_loaded() {
    let server = RedisServer::start();
    let dir = Dir::new("cold-surfaces");
    let tier = ColdTier::local(&dir.0)
        .unwrap()
        .horizon(Duration::from_secs(6 * 3600))
        .window(Duration::from_secs(3600));
    let (queue, mut leader, _worker) = setup(&server, "cold-surfaces", tier).await;
    let a = (T0 + FAR) / HOUR * HOUR + HOUR;
    let b = a + 5 * HOUR;
    let batch = |prefix: &'static str, from: u64, range: std::ops::Range<u64>| {
        range
            .map(move |i| (format!("{prefix}:{i}"), from + i * 1000))
            .collect::<Vec<_>>()
    };
    let schedule = |jobs: Vec<(String, u64)>| {
        let queue = queue.clone();
        async move {
            let added = queue
                .schedule_batch(
                    jobs.iter()
                        .map(|(id, due)| (id.as_str(), b"s".as_slice(), When::At(at(*due)))),
                )
                .await
                .unwrap();
            assert!(added.iter().all(|&a| a));
        }
    };
    schedule(batch("a", a, 0..200)).await;
    leader.step().await.unwrap();
    schedule(batch("a", a, 200..300)).await;
    schedule(batch("b", b, 0..50)).await;
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 350);

    let store = stored(&dir.0);
    let window = |start_ms: u64, jobs: u64| Window {
        start_ms,
        jobs,
        segments: store[&start_ms].0,
        bytes: store[&start_ms].1,
    };
    let (wa, wb) = (window(a, 300), window(b, 50));
    assert_eq!((wa.segments, wb.segments), (2, 1), "{store:?}");
    check_surfaces(&server, &queue, T0, &[wa, wb], (350, 0), (0, 0)).await;

    // A comes within the lead (3 h); B, 5 h later, not yet.
    let now = a - 3 * HOUR;
    queue.set_manual_clock(Some(at(now))).await.unwrap();
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_loaded, 300);
    check_surfaces(&server, &queue, now, &[wb], (350, 300), (300, 0)).await;

    // B comes too; A is due by now (its jobs are ready).
    let now = b - 3 * HOUR;
    queue.set_manual_clock(Some(at(now))).await.unwrap();
    leader.step().await.unwrap();
    check_surfaces(&server, &queue, now, &[], (350, 350), (50, 300)).await;
    assert!(files(&dir.0).is_empty(), "{:?}", files(&dir.0));
}
