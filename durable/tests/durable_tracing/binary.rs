//! The operator's binary, run as a user runs it: every line it prints, with a time limit.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tickless_test_support::run_to_end;

/// How long one command of the binary may take (a refused connection, a TLS handshake or
/// a connect timeout of 5 s all end well within it).
const LIMIT: Duration = Duration::from_secs(30);

/// What one run printed.
pub struct Run {
    pub code: Option<i32>,
    /// Every line of stdout, then every line of stderr.
    pub lines: Vec<String>,
}

/// Runs `tickless-durable args...` to its end (at most [`LIMIT`], else the test fails
/// naming the command); its exit code and lines.
pub fn run(args: &[&str]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickless-durable"));
    command
        .args(args)
        .env_remove("TICKLESS_REDIS_CA")
        .env_remove("TICKLESS_REDIS_CERT")
        .env_remove("TICKLESS_REDIS_KEY");
    let ended = run_to_end(&mut command, LIMIT, &format!("tickless-durable {args:?}"));
    Run {
        code: ended.code,
        lines: (ended.stdout + &ended.stderr)
            .lines()
            .map(str::to_string)
            .collect(),
    }
}

/// Starts `tickless-durable serve args...`, which runs until killed: the first line it
/// prints (within [`LIMIT`]), and every line of stderr if it exits meanwhile; then kills it.
pub fn serve(args: &[&str]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .arg("serve")
        .args(args)
        .args(["--addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tickless-durable binary");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut lines = Vec::new();
    let code = loop {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(10)) {
            lines.push(line);
            break None; // serving: its one line is out
        }
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status.code());
        }
        assert!(
            started.elapsed() < LIMIT,
            "tickless-durable serve {args:?} printed nothing and did not end within {LIMIT:?}"
        );
    };
    if code.is_none() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let _ = reader.join(); // the pipe closed with the process
    lines.extend(rx.try_iter());
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    lines.extend(stderr.lines().map(str::to_string));
    Run {
        code: code.flatten(),
        lines,
    }
}
