//! Receivers in Python and Node (tests/webhooks/receiver.py, receiver.cjs) verifying with
//! the reference `standardwebhooks` packages, which scripts/test.sh installs
//! (TICKLESS_WEBHOOKS_PYTHON names the venv's python, TICKLESS_WEBHOOKS_NODE_PATH the
//! node_modules directory).

use super::{queue, secret, serve, wait_info, wait_state};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tickless_durable::hook::webhook_id;
use tickless_durable::JobState;
use tickless_test_support as support;

/// A receiver process, killed when dropped, and the JSON lines it printed.
struct Reference {
    child: Child,
    url: String,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Reference {
    fn python(secret: &str) -> Reference {
        let python = std::env::var("TICKLESS_WEBHOOKS_PYTHON").expect(
            "TICKLESS_WEBHOOKS_PYTHON must name a python with standardwebhooks 1.1.0: \
             scripts/test.sh installs it (python3 -m venv V && V/bin/pip install standardwebhooks==1.1.0)",
        );
        let mut command = Command::new(python);
        command.arg(script("receiver.py"));
        Reference::start(command, secret)
    }

    fn node(secret: &str) -> Reference {
        let modules = std::env::var("TICKLESS_WEBHOOKS_NODE_PATH").expect(
            "TICKLESS_WEBHOOKS_NODE_PATH must name a node_modules with standardwebhooks 1.1.1: \
             scripts/test.sh installs it (npm install --prefix D standardwebhooks@1.1.1)",
        );
        let mut command = Command::new("node");
        command
            .arg(script("receiver.cjs"))
            .env("NODE_PATH", modules);
        Reference::start(command, secret)
    }

    fn start(mut command: Command, secret: &str) -> Reference {
        let mut child = command
            .env("WEBHOOK_SECRET", secret)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a reference receiver");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        let port = first
            .trim()
            .strip_prefix("port ")
            .unwrap_or_else(|| panic!("the receiver's first line is {first:?}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let shared = lines.clone();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let line = line.unwrap();
                let value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line}"));
                shared.lock().unwrap().push(value);
            }
        });
        Reference {
            child,
            url: format!("http://127.0.0.1:{port}/hook"),
            lines,
        }
    }

    fn lines(&self) -> Vec<serde_json::Value> {
        self.lines.lock().unwrap().clone()
    }
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/webhooks")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

const ALLOW: &str = "allow-host 127.0.0.1\nallow-scheme http\nallow-net 127.0.0.1/32\n";

/// A 48-hour schedule (one job an hour, on the manual clock) for a queue per language:
/// every job reaches its receiver once, verified by the reference library, with its
/// id, delivery number and attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_node_verify_every_job_of_a_48_hour_schedule() {
    let server = support::RedisServer::start();
    let (text, _) = secret(5);
    let (python, node) = (Reference::python(&text), Reference::node(&text));
    let names = [
        support::queue_name("hookpy"),
        support::queue_name("hooknode"),
    ];
    let mut queues = Vec::new();
    for name in &names {
        let queue = queue(&server.url(), name, 5).await;
        for hour in 1..=48u64 {
            let payload = format!("{{\"hour\":{hour},\"note\":\"héllo\"}}");
            queue
                .schedule(
                    &format!("job:{hour}"),
                    payload,
                    Duration::from_secs(hour * 3600),
                )
                .await
                .unwrap();
        }
        queues.push(queue);
    }
    let config = format!(
        "target py {} secret={text}\ntarget node {} secret={text}\nqueue {} py\nqueue {} node\n{ALLOW}",
        python.url, node.url, names[0], names[1]
    );
    let _served = serve(&server.url(), &[&names[0], &names[1]], &config);
    for hour in 1..=48u64 {
        // Each queue has a manual clock of its own.
        for queue in &queues {
            queue
                .advance_manual_clock(Duration::from_secs(3600))
                .await
                .unwrap();
        }
        for queue in &queues {
            let id = format!("job:{hour}");
            wait_state(
                queue,
                &id,
                &format!("{id} of {} acked", queue.name()),
                |s| s.is_none(),
            )
            .await;
        }
    }
    for (reference, name) in [(&python, &names[0]), (&node, &names[1])] {
        let lines = reference.lines();
        assert_eq!(lines.len(), 48, "{name}: one request a job");
        for (at, line) in lines.iter().enumerate() {
            let id = format!("job:{}", at + 1);
            assert_eq!(
                line["ok"], true,
                "{name}: verified by the reference library: {line}"
            );
            assert_eq!(
                line["job_id"],
                id.as_str(),
                "{name}: in due order, none early"
            );
            assert_eq!(line["webhook_id"], webhook_id(name, &id).as_str());
            assert_eq!(line["attempt"], 1);
            assert!(line["delivery"].as_u64().unwrap() >= 1);
            assert_eq!(line["payload"]["hour"], at as u64 + 1);
            assert_eq!(line["payload"]["note"], "héllo");
        }
    }
}

/// Rotation: while a target has the old and the new secret, receivers knowing either
/// verify; once the old one is dropped, a receiver knowing only it refuses (401), and
/// the delivery fails with that status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_rotation_a_receiver_with_only_the_old_secret_refuses() {
    let server = support::RedisServer::start();
    let ((old, _), (new, _)) = (secret(6), secret(7));
    let (python_old, node_new) = (Reference::python(&old), Reference::node(&new));
    let names = [support::queue_name("rotpy"), support::queue_name("rotnode")];
    let mut queues = Vec::new();
    for name in &names {
        let queue = queue(&server.url(), name, 5).await;
        queue
            .schedule("before", b"{\"n\":1}", Duration::ZERO)
            .await
            .unwrap();
        queues.push(queue);
    }
    let config = |secrets: &str| {
        format!(
            "target py {} {secrets}\ntarget node {} {secrets}\nqueue {} py\nqueue {} node\n{ALLOW}",
            python_old.url, node_new.url, names[0], names[1]
        )
    };
    let served = serve(
        &server.url(),
        &[&names[0], &names[1]],
        &config(&format!("secret={old} secret={new}")),
    );
    for queue in &queues {
        wait_state(queue, "before", "signed with both secrets, acked", |s| {
            s.is_none()
        })
        .await;
    }
    drop(served);
    let _served = serve(
        &server.url(),
        &[&names[0], &names[1]],
        &config(&format!("secret={new}")),
    );
    for queue in &queues {
        queue
            .schedule("after", b"{\"n\":2}", Duration::ZERO)
            .await
            .unwrap();
    }
    wait_state(
        &queues[1],
        "after",
        "the new secret's receiver acked",
        |s| s.is_none(),
    )
    .await;
    let info = wait_info(
        &queues[0],
        "after",
        "the old secret's receiver refused",
        |info| info.is_some_and(|i| i.state == JobState::Scheduled && i.attempts == 1),
    )
    .await
    .unwrap();
    assert!(
        info.last_error.as_deref().unwrap().contains("401"),
        "{info:?}"
    );
    let python_lines = python_old.lines();
    assert_eq!(python_lines.len(), 2);
    assert_eq!(python_lines[0]["ok"], true);
    assert_eq!(python_lines[1]["ok"], false);
    assert!(node_new.lines().iter().all(|line| line["ok"] == true));
}

/// The README's receiver in `lang`, exactly as durable/README.md shows it (read from it,
/// so it cannot drift; only its address is this test's: `listen` is replaced by `at`),
/// under 30 lines, behind a real `serve`: jobs of a 48-hour schedule on the manual clock
/// reach it when due, verified and printed once each; an unsigned request is refused.
async fn the_readmes_receiver_runs_as_shown(lang: &str, mut command: Command, file: &str) {
    let (listen, marker) = match lang {
        "python" => ("(\"0.0.0.0\", 8000)", "Handler"),
        _ => (".listen(8000)", "createServer"),
    };
    let snippet = support::readme_block(lang, marker);
    let lines = snippet.lines().count();
    assert!(lines < 30, "the README's {lang} receiver has {lines} lines");
    assert_eq!(snippet.matches(listen).count(), 1, "{snippet}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // free again once this listener is dropped
    let at = match lang {
        "python" => format!("(\"127.0.0.1\", {port})"),
        _ => format!(".listen({port}, \"127.0.0.1\")"),
    };
    let dir = std::env::temp_dir().join(format!(
        "tickless-readme-hook-{}-{lang}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, snippet.replace(listen, &at)).unwrap();
    let (text, _) = secret(8);
    let mut child = Killed(
        command
            .arg(&path)
            .env("WEBHOOK_SECRET", &text)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the README's receiver"),
    );
    let output = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let (stdout, output) = (child.0.stdout.take().unwrap(), output.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                output.lock().unwrap().push(line);
            }
        })
    };
    let addr = format!("127.0.0.1:{port}");
    let limit = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the {lang} receiver stopped"
        );
        assert!(
            std::time::Instant::now() < limit,
            "the {lang} receiver listening on {addr} within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Unsigned: refused.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let request = format!(
            "POST / HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 2\r\nwebhook-id: msg_x\r\n\r\n{{}}"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(
            response.starts_with("HTTP/1.") && response[9..].starts_with("401"),
            "{response}"
        );
    }

    let server = support::RedisServer::start();
    let name = support::queue_name(&format!("readmehook{lang}"));
    let queue = queue(&server.url(), &name, 5).await;
    let hours = [1u64, 24, 48];
    for hour in hours {
        let id = format!("close:{hour}");
        let payload = format!("{{\"order\":{hour}}}");
        queue
            .schedule(&id, payload, Duration::from_secs(hour * 3600))
            .await
            .unwrap();
    }
    let config = format!("target recv http://{addr}/ secret={text}\nqueue {name} recv\n{ALLOW}");
    let _served = serve(&server.url(), &[&name], &config);
    let mut now_h = 0;
    for (i, hour) in hours.into_iter().enumerate() {
        queue
            .advance_manual_clock(Duration::from_secs((hour - now_h) * 3600 - 1))
            .await
            .unwrap();
        queue
            .advance_manual_clock(Duration::from_secs(1))
            .await
            .unwrap();
        now_h = hour;
        let id = format!("close:{hour}");
        wait_state(&queue, &id, &format!("{id} acked"), |s| s.is_none()).await;
        let printed = output.lock().unwrap().clone();
        assert_eq!(
            printed.len(),
            i + 1,
            "one line a job, none early: {printed:?}"
        );
        let line = &printed[i];
        assert!(line.starts_with(&format!("job {id} delivery ")), "{line}");
        assert!(
            line.contains("order") && line.contains(&hour.to_string()),
            "{line}"
        );
    }
    drop(child);
    reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A receiver process killed when dropped, so that a failed assertion leaves none running
/// (one left running holds the test's output open).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_python_receiver_runs_as_shown() {
    let python = std::env::var("TICKLESS_WEBHOOKS_PYTHON")
        .expect("TICKLESS_WEBHOOKS_PYTHON (scripts/test.sh installs it)");
    the_readmes_receiver_runs_as_shown("python", Command::new(python), "receiver.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_node_receiver_runs_as_shown() {
    let modules = std::env::var("TICKLESS_WEBHOOKS_NODE_PATH")
        .expect("TICKLESS_WEBHOOKS_NODE_PATH (scripts/test.sh installs it)");
    let mut node = Command::new("node");
    node.env("NODE_PATH", modules);
    the_readmes_receiver_runs_as_shown("js", node, "receiver.cjs").await;
}
