//! What a repair pass (every new leader's) costs Redis on a queue of many jobs with big
//! payloads: the bytes Redis sends and the time its commands take. The pass reads each
//! record where it is (inside the script), so no payload leaves Redis.
//!
//! `cargo test -p tickless-durable --test durable_repair_cost -- --ignored --nocapture`
//! measures a queue of 1,000,000 jobs of 1 KB (BENCHMARKS.md, "Repair after a takeover").

use tickless_test_support as support;

use std::time::{Duration, Instant};
use support::{queue_name, RedisServer};
use tickless_durable::{Queue, When};

/// What one repair pass cost.
#[derive(Debug)]
struct Cost {
    /// Bytes Redis sent (`total_net_output_bytes`), all clients.
    bytes_out: u64,
    /// Redis's CPU time (`INFO cpu`, user and system, all threads), in milliseconds.
    redis_cpu_ms: u64,
    /// Script calls (EVALSHA and FCALL that ran).
    scripts: u64,
    /// Wall time of `Queue::repair`.
    wall: Duration,
}

/// The number after `name:` in an `INFO` reply.
fn info_value(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in INFO"))
}

async fn cpu_ms(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(admin)
        .await
        .unwrap();
    let seconds: f64 = info
        .lines()
        .filter(|line| line.starts_with("used_cpu_sys:") || line.starts_with("used_cpu_user:"))
        .filter_map(|line| line.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum();
    (seconds * 1000.0) as u64
}

async fn repair_cost(n: usize, payload_bytes: usize) -> Cost {
    let server = RedisServer::start();
    let queue = Queue::connect(&server.url(), &queue_name("repair-cost"))
        .await
        .unwrap();
    let payload = vec![b'p'; payload_bytes];
    // Ten days ahead: the jobs sit in the wheel's coarse buckets, as far jobs do.
    let when = When::After(Duration::from_secs(10 * 86_400));
    let ids: Vec<String> = (0..n).map(|i| format!("job:{i:07}")).collect();
    for chunk in ids.chunks(1_000) {
        let jobs = chunk.iter().map(|id| (id.as_str(), &payload[..], when));
        queue.schedule_batch(jobs).await.unwrap();
    }
    let mut admin = server.admin().await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .unwrap();
    let cpu_before = cpu_ms(&mut admin).await;
    let start = Instant::now();
    let repaired = queue.repair().await.unwrap();
    let wall = start.elapsed();
    let redis_cpu_ms = cpu_ms(&mut admin).await - cpu_before;
    assert_eq!(
        (repaired.placed, repaired.removed),
        (0, 0),
        "nothing to repair"
    );
    let stats: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut admin)
        .await
        .unwrap();
    let commands: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .unwrap();
    Cost {
        bytes_out: info_value(&stats, "total_net_output_bytes"),
        redis_cpu_ms,
        scripts: support::command_stats(&commands)
            .iter()
            .filter(|stat| ["evalsha", "fcall"].contains(&stat.name.as_str()))
            .map(|stat| stat.ran())
            .sum(),
        wall,
    }
}

/// 20,000 jobs of 1 KB: 20 MB of payloads. The pass sends what the ids cost, not them.
#[tokio::test]
async fn a_repair_pass_sends_no_payloads() {
    let (n, payload) = (20_000, 1_024);
    let cost = repair_cost(n, payload).await;
    println!("repair of {n} jobs of {payload} B: {cost:?}");
    assert!(
        cost.bytes_out < (n as u64) * 64,
        "{} bytes sent for {n} jobs ({} per job): payloads left Redis",
        cost.bytes_out,
        cost.bytes_out / n as u64
    );
}

#[tokio::test]
#[ignore = "a measurement: 1 GB of payloads in Redis, some minutes"]
async fn repair_cost_on_a_million_jobs_of_1_kb() {
    million(1_024).await;
}

/// The same with 16-byte payloads: what the ids and the records' other fields cost.
#[tokio::test]
#[ignore = "a measurement: some minutes"]
async fn repair_cost_on_a_million_jobs_of_16_b() {
    million(16).await;
}

async fn million(payload: usize) {
    let n = 1_000_000;
    let cost = repair_cost(n, payload).await;
    println!(
        "repair of {n} jobs of {payload} B: {} bytes sent ({:.1} per job), {} ms of Redis \
         CPU, {} script calls, {:?} wall",
        cost.bytes_out,
        cost.bytes_out as f64 / n as f64,
        cost.redis_cpu_ms,
        cost.scripts,
        cost.wall
    );
}
