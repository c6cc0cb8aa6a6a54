//! A queue's stream outlet read by real consumers in other languages, with consumer
//! groups: Python (redis-py; `TICKLESS_REDIS_PY` names a python that has it) and Node
//! (ioredis; `TICKLESS_IOREDIS_DIR` names the directory whose `node_modules` holds it),
//! both installed by scripts/test.sh. Each gets every job of a 48-hour schedule (on the
//! manual clock) once, with its id and delivery number; one consumer process dies with
//! entries pending, and another claims them (`XAUTOCLAIM`). The README's two consumers run
//! as shown, read from durable/README.md.

use tickless_test_support as support;

use std::collections::BTreeMap;
use std::process::Command;
use support::{at, queue_name, RedisServer, Rng, T0};
use tickless_durable::{LeaderOptions, Queue, StreamOutlet};

/// The consumers' directory.
fn clients() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stream_clients")
}

/// A 48-hour schedule of `n` jobs delivered into the outlet's stream on the manual clock;
/// the stream's key and each job's delivery number, as the stream has them.
async fn two_days_streamed(server: &RedisServer, test: &str, n: u64) -> (String, Vec<String>) {
    let queue = Queue::connect(&server.url(), &queue_name(test))
        .await
        .unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let key = queue.default_stream_key();
    queue
        .set_stream_outlet(Some(&StreamOutlet::new(&key)))
        .await
        .unwrap();
    let mut rng = Rng(n);
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("{test}-{i}");
        let due = at(T0 + rng.below(48 * 3_600_000));
        queue.schedule(&id, id.as_bytes(), due).await.unwrap();
        ids.push(id);
    }
    let mut leader = queue.leader(LeaderOptions::default());
    for _ in 0..=48 {
        for _ in 0..3 {
            leader.step().await.unwrap();
        }
        queue
            .advance_manual_clock(std::time::Duration::from_secs(3_600))
            .await
            .unwrap();
    }
    for _ in 0..3 {
        leader.step().await.unwrap();
    }
    assert_eq!(queue.counters().await.unwrap().streamed, n, "all streamed");
    (key, ids)
}

/// Runs one consumer; its lines (`<id> <delivery> <how>`).
fn consume(program: &[String], args: &[&str]) -> Vec<(String, String, String)> {
    let output = Command::new(&program[0])
        .args(&program[1..])
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|err| panic!("{program:?}: {err}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{program:?} {args:?} failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text.lines()
        .map(|line| {
            let mut words = line.split(' ').map(str::to_string);
            let mut next = || words.next().unwrap_or_default();
            (next(), next(), next())
        })
        .collect()
}

/// The stream's delivery number of each job id (read as the admin).
fn deliveries(server: &RedisServer, key: &str) -> BTreeMap<String, String> {
    let text = server.cli(&["XRANGE", key, "-", "+"]);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        if *line == "id" {
            out.insert(lines[i + 1].to_string(), lines[i + 3].to_string());
        }
    }
    out
}

/// Every job once through a consumer group: 7 read by a consumer that then dies without
/// acknowledging them, claimed by the next, which handles the rest; nothing pending at
/// the end.
async fn every_job_reaches_the_group_once(program: Vec<String>, test: &str) {
    let server = RedisServer::start_with_fsync("everysec");
    let n = 150;
    let (key, ids) = two_days_streamed(&server, test, n).await;
    let stream = deliveries(&server, &key);
    assert_eq!(stream.len(), ids.len());
    let url = server.admin_url();
    let died = consume(&program, &[&url, &key, "workers", "dies", "die", "7"]);
    assert_eq!(died.len(), 7, "{died:?}");
    let total = n.to_string();
    let worked = consume(&program, &[&url, &key, "workers", "lives", "work", &total]);
    let mut seen = BTreeMap::new();
    for (id, delivery, how) in &worked {
        assert_eq!(stream.get(id), Some(delivery), "{id}: its delivery number");
        assert!(seen.insert(id.clone(), how.clone()).is_none(), "{id} twice");
    }
    let claimed: Vec<&String> = seen
        .iter()
        .filter(|(_, how)| *how == "claimed")
        .map(|(id, _)| id)
        .collect();
    let died: Vec<&String> = died.iter().map(|(id, _, _)| id).collect();
    assert_eq!(claimed.len(), 7, "{seen:?}");
    for id in died {
        assert!(
            claimed.contains(&id),
            "{id}: the dead consumer's, not claimed"
        );
    }
    let mut all: Vec<&String> = seen.keys().collect();
    all.sort();
    let mut want: Vec<&String> = ids.iter().collect();
    want.sort();
    assert_eq!(all, want, "every job once");
    let pending = server.cli(&["XPENDING", &key, "workers"]);
    assert_eq!(pending.lines().next(), Some("0"), "{pending}");
}

#[tokio::test]
async fn a_python_consumer_group_gets_every_job_once_and_claims_a_dead_consumers() {
    let Ok(python) = std::env::var("TICKLESS_REDIS_PY") else {
        panic!(
            "TICKLESS_REDIS_PY must name a python with redis-py: scripts/test.sh installs it \
             (python3 -m venv V && V/bin/pip install redis==8.1.0)"
        );
    };
    let script = clients().join("consumer.py").display().to_string();
    every_job_reaches_the_group_once(vec![python, script], "python").await;
}

#[tokio::test]
async fn a_node_consumer_group_gets_every_job_once_and_claims_a_dead_consumers() {
    let Ok(dir) = std::env::var("TICKLESS_IOREDIS_DIR") else {
        panic!(
            "TICKLESS_IOREDIS_DIR must name a directory whose node_modules holds ioredis: \
             scripts/test.sh installs it (npm install --prefix DIR ioredis@6.0.0)"
        );
    };
    assert!(
        std::path::Path::new(&dir)
            .join("node_modules/ioredis")
            .is_dir(),
        "TICKLESS_IOREDIS_DIR={dir} has no node_modules/ioredis"
    );
    let script = clients().join("consumer.cjs").display().to_string();
    every_job_reaches_the_group_once(vec!["node".into(), script], "node").await;
}

/// The README's consumer in `lang` (```` ```python ```` or ```` ```js ````), exactly as
/// durable/README.md shows it (read from it, so it cannot drift; only the address and the
/// key are this test's, and `handle` prints `<id> <delivery>`), under 30 lines, run
/// against a queue whose outlet is fed on the manual clock: a 48-hour schedule, the
/// first day's due jobs first, then the second's; each job reaches it once, with the
/// stream's delivery number, and none before it is due.
async fn the_readmes_consumer_gets_each_job_once_when_due(
    lang: &str,
    program: Vec<String>,
    env: (&str, String),
    file: &str,
    handle: &str,
) {
    let (address, readme_key) = ("redis://127.0.0.1/", "tickless:{orders}:stream");
    let snippet = support::readme_block(lang, readme_key);
    let lines = snippet.lines().count();
    assert!(lines < 30, "the README's {lang} consumer has {lines} lines");
    assert_eq!(snippet.matches(address).count(), 1, "{snippet}");

    let server = RedisServer::start();
    let test = format!("readme-{lang}");
    let queue = Queue::connect(&server.url(), &queue_name(&test))
        .await
        .unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let key = queue.default_stream_key();
    queue
        .set_stream_outlet(Some(&StreamOutlet::new(&key)))
        .await
        .unwrap();
    let n = 40;
    let mut rng = Rng(n + 7);
    let mut due_ms = BTreeMap::new();
    for i in 0..n {
        let id = format!("{test}-{i}");
        let offset = rng.below(48 * 3_600_000);
        queue
            .schedule(&id, b"order", at(T0 + offset))
            .await
            .unwrap();
        due_ms.insert(id, offset);
    }

    let dir = std::env::temp_dir().join(format!("tickless-readme-{}-{lang}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join(file);
    let source = format!(
        "{handle}\n{}",
        snippet
            .replace(address, &server.admin_url())
            .replace(readme_key, &key)
    );
    std::fs::write(&script, source).unwrap();
    let mut child = Command::new(&program[0])
        .args(&program[1..])
        .arg(&script)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(env.0, env.1)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("{program:?}: {err}"));
    let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let (stdout, output) = (child.stdout.take().unwrap(), output.clone());
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                output.lock().unwrap().push(line);
            }
        })
    };

    let mut leader = queue.leader(LeaderOptions::default());
    for (hours, day) in [(24, "the first day"), (25, "the second day")] {
        for _ in 0..hours {
            for _ in 0..3 {
                leader.step().await.unwrap();
            }
            queue
                .advance_manual_clock(std::time::Duration::from_secs(3_600))
                .await
                .unwrap();
        }
        for _ in 0..3 {
            leader.step().await.unwrap();
        }
        let now = queue.now().await.unwrap();
        let now_ms = now.duration_since(at(T0)).unwrap().as_millis() as u64;
        let streamed = queue.counters().await.unwrap().streamed;
        let limit = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while (output.lock().unwrap().len() as u64) < streamed {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the {lang} consumer stopped ({status}) during {day}");
            }
            assert!(
                std::time::Instant::now() < limit,
                "the {lang} consumer: {streamed} entries of {day} within 30 s; its output:\n{:?}",
                output.lock().unwrap()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let got = output.lock().unwrap().clone();
        assert_eq!(got.len() as u64, streamed, "{day}: {got:?}");
        for line in &got {
            let id = line.split(' ').next().unwrap_or_default();
            let due = due_ms
                .get(id)
                .unwrap_or_else(|| panic!("{line}: no such job"));
            assert!(
                *due <= now_ms,
                "{line}: due at {due} ms, handled at {now_ms} ms"
            );
        }
    }
    assert_eq!(queue.counters().await.unwrap().streamed, n, "all streamed");
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap();
    let stream = deliveries(&server, &key);
    let mut seen = BTreeMap::new();
    for line in output.lock().unwrap().iter() {
        let mut words = line.split(' ');
        let (id, delivery) = (words.next().unwrap(), words.next().unwrap_or_default());
        assert_eq!(stream.get(id).map(String::as_str), Some(delivery), "{line}");
        assert!(seen.insert(id.to_string(), ()).is_none(), "{id} twice");
    }
    assert_eq!(seen.len() as u64, n, "every job once");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_readmes_python_consumer_runs_as_shown() {
    let python = std::env::var("TICKLESS_REDIS_PY").expect("TICKLESS_REDIS_PY (scripts/test.sh)");
    let handle = "def handle(id, delivery, payload):\n    print(id.decode(), delivery.decode())\n";
    let env = ("PYTHONUNBUFFERED", "1".to_string());
    the_readmes_consumer_gets_each_job_once_when_due(
        "python",
        vec![python],
        env,
        "consumer.py",
        handle,
    )
    .await;
}

#[tokio::test]
async fn the_readmes_node_consumer_runs_as_shown() {
    let dir =
        std::env::var("TICKLESS_IOREDIS_DIR").expect("TICKLESS_IOREDIS_DIR (scripts/test.sh)");
    // CommonJS, so that `require("ioredis")` finds the package through NODE_PATH.
    let modules = std::path::Path::new(&dir).join("node_modules");
    let env = ("NODE_PATH", modules.display().to_string());
    let handle = "const handle = async (id, delivery) => console.log(id, delivery);";
    the_readmes_consumer_gets_each_job_once_when_due(
        "js",
        vec!["node".into()],
        env,
        "consumer.cjs",
        handle,
    )
    .await;
}
