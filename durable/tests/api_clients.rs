//! Real clients against a real `tickless-durable serve` (feature `api`) and a real
//! redis-server: a Python service (standard library only) and a Node service (built-in
//! `fetch`) schedule, look up, cancel, reschedule, set recurring schedules and work jobs
//! with a pull loop (durable/tests/api_clients/); schemathesis checks every operation
//! against the served OpenAPI document (when scripts/test.sh installed it).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tickless_test_support as support;

const TOKEN: &str = "clients-admin-0123456789abcdef";

/// A `serve` process, killed when dropped.
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tickless-durable serve <url> <queue> --lead` on a free port, with one admin token for
/// `queue` (given in the environment, as an operator would).
fn serve(url: &str, queue: &str) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .args(["serve", url, queue, "--lead"])
        .env("TICKLESS_DASHBOARD_ADDR", "127.0.0.1:0")
        .env(
            "TICKLESS_API_TOKENS",
            format!("clients admin,schedule,work,read {queue} {TOKEN}"),
        )
        .env_remove("TICKLESS_API_TOKENS_FILE")
        .stdout(Stdio::piped())
        .spawn()
        .expect("run tickless-durable serve");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in serve's first line {line:?}"))
        .to_string();
    let mut api_line = String::new();
    stdout.read_line(&mut api_line).unwrap();
    assert!(
        api_line.contains("API with 1 token(s) (clients), leading 1 queue(s)"),
        "{api_line}"
    );
    assert!(!api_line.contains(TOKEN));
    // Drained, so that a later line cannot block serve on a full pipe.
    std::thread::spawn(move || for _ in stdout.lines() {});
    Served {
        child,
        base: format!("http://{addr}"),
    }
}

fn run_client(program: &str, script: &str) {
    let server = support::RedisServer::start();
    let queue = support::queue_name("clients");
    let served = serve(&server.url(), &queue);
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/api_clients")
        .join(script);
    let ended = support::run_to_end(
        Command::new(program)
            .arg(&script)
            .env("API", &served.base)
            .env("TOKEN", TOKEN)
            .env("QUEUE", &queue),
        Duration::from_secs(120),
        &format!("{program} {}", script.display()),
    );
    assert_eq!(
        ended.code,
        Some(0),
        "{program} client failed:\n{}\n{}",
        ended.stdout,
        ended.stderr
    );
    assert!(ended.stdout.contains("client: ok"), "{}", ended.stdout);
}

#[test]
fn a_python_service_schedules_cancels_and_works_jobs() {
    run_client("python3", "client.py");
}

#[test]
fn a_node_service_schedules_cancels_and_works_jobs() {
    run_client("node", "client.mjs");
}
