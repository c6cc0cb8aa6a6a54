//! The cold tier's scenario, on the queue's manual clock so that 48 hours pass in
//! seconds: a ride-hailing app asks for a rating 48 hours after each trip. N trips (default
//! 200,000; 200-byte payloads) are scheduled; the leader moves them into a local directory;
//! Redis's memory is read before and after; 1% are cancelled (rated early), 1% are
//! rescheduled to the next minute; the clock is brought to the 48th hour, the leader loads
//! the window back, and a worker drains every job: each remaining one once, none early.
//! Exits non-zero if anything is lost, doubled or early.
//!
//! ```text
//! redis-server --port 6379 --save '' &
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release -p tickless-durable --features cold \
//!     --example cold_ratings -- 200000
//! ```

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tickless_durable::{ColdTier, LeaderOptions, Queue, When, WorkerOptions};

const HOUR: Duration = Duration::from_secs(3600);

async fn used_memory(url: &str) -> u64 {
    let client = redis::Client::open(url).expect("REDIS_URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args().nth(1).map_or(Ok(200_000), |a| a.parse())?;
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let dir = std::env::temp_dir().join(format!("tickless-cold-ratings-{}", std::process::id()));
    let name = format!("ratings-{}", std::process::id());
    let queue = Queue::connect(&url, &name)
        .await?
        .with_cold_tier(ColdTier::local(&dir)?);
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    queue.set_manual_clock(Some(t0)).await?;
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await?;

    let before = used_memory(&url).await;
    let mut due: HashMap<String, SystemTime> = HashMap::new();
    let payload = [b'r'; 200];
    let ids: Vec<String> = (0..n).map(|i| format!("trip:{i}")).collect();
    for chunk in ids.chunks(10_000) {
        let jobs = chunk.iter().enumerate().map(|(i, id)| {
            let at = t0 + 48 * HOUR + Duration::from_millis((i as u64 * 7919) % 3_600_000);
            due.insert(id.clone(), at);
            (id.as_str(), &payload[..], When::At(at))
        });
        queue.schedule_batch(jobs.collect::<Vec<_>>()).await?;
    }
    let hot = used_memory(&url).await;
    leader.step().await?;
    let cold = used_memory(&url).await;
    println!(
        "{n} jobs due in 48 h: Redis used_memory {:.1} MB hot ({} B/job), {:.1} MB once cold ({} B/job); moved {}",
        (hot - before) as f64 / 1e6,
        (hot - before) / n,
        cold.saturating_sub(before) as f64 / 1e6,
        cold.saturating_sub(before) / n,
        leader.stats().cold_moved
    );
    for w in queue.cold_windows().await? {
        println!(
            "  window {:?}: {} jobs in {} segments, {} bytes",
            w.start, w.jobs, w.segments, w.bytes
        );
    }

    // Rated early: cancelled. Asked again sooner: rescheduled to the next minute.
    let cancelled: Vec<&str> = ids.iter().step_by(100).map(String::as_str).collect();
    queue.cancel_batch(cancelled.iter().copied()).await?;
    for id in &cancelled {
        due.remove(*id);
    }
    for id in ids.iter().skip(1).step_by(100) {
        queue
            .reschedule(id, When::At(t0 + Duration::from_secs(60)))
            .await?;
        due.insert(id.clone(), t0 + Duration::from_secs(60));
    }

    let worker = queue.worker(WorkerOptions::default());
    let mut delivered: HashMap<String, u32> = HashMap::new();
    let mut early = 0;
    for at in [t0 + Duration::from_secs(61), t0 + 46 * HOUR, t0 + 50 * HOUR] {
        queue.set_manual_clock(Some(at)).await?;
        leader.step().await?;
        leader.step().await?;
        loop {
            let jobs = worker.try_claim(1000).await?;
            if jobs.is_empty() {
                break;
            }
            for job in jobs {
                if job.due() > at || due.get(job.id()) != Some(&job.due()) {
                    early += 1;
                }
                *delivered.entry(job.id().to_string()).or_default() += 1;
                worker.ack(&job).await?;
            }
        }
    }
    let lost = due.keys().filter(|id| !delivered.contains_key(*id)).count();
    let twice = delivered.values().filter(|&&n| n > 1).count();
    let extra = delivered.keys().filter(|id| !due.contains_key(*id)).count();
    println!(
        "cancelled {}, rescheduled {}, delivered {} (loaded back: {}): lost {lost}, twice {twice}, \
         cancelled yet run {extra}, early or moved {early}",
        cancelled.len(),
        cancelled.len(),
        delivered.len(),
        leader.stats().cold_loaded
    );
    let _ = std::fs::remove_dir_all(&dir);
    if lost + twice + extra + early > 0 {
        std::process::exit(1);
    }
    Ok(())
}
