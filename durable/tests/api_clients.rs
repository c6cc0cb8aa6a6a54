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
    serve_with(url, queue, &[])
}

fn serve_with(url: &str, queue: &str, extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickless-durable"))
        .args(["serve", url, queue, "--lead"])
        .args(extra)
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
    let scheme = if extra.contains(&"--tls-cert") {
        "https"
    } else {
        "http"
    };
    let addr = line
        .split(&format!("{scheme}://"))
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
        base: format!("{scheme}://{addr}"),
    }
}

fn run_client(program: &str, script: &str) {
    let server = support::RedisServer::start();
    run_client_on(&server.url(), program, script);
}

/// `program script` (a client under durable/tests/api_clients/) against a `serve` of
/// Redis at `url` (a cluster's seeds, comma-separated, as the binary takes them).
fn run_client_on(url: &str, program: &str, script: &str) {
    let queue = support::queue_name("clients");
    let served = serve(url, &queue);
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
    // serve's /metrics: the queue's figures, then the API's, by token name.
    let metrics = http_get(&served.base, "/metrics");
    for line in [
        "tickless_api_requests_total{operation=\"schedule\",status=\"201\"}",
        "tickless_api_requests_total{operation=\"claim\",status=\"200\"}",
        "tickless_api_request_duration_seconds_count{operation=\"ack\"}",
        "tickless_api_token_requests_total{token=\"clients\"}",
        "tickless_jobs{queue=",
    ] {
        assert!(metrics.contains(line), "no {line} in /metrics:\n{metrics}");
    }
    assert!(!metrics.contains(TOKEN));
    // serve's home page: the token that worked, by name, never the secret.
    let home = http_get(&served.base, "/");
    for text in [
        "id=\"api-tokens\"",
        "data-token=\"clients\"",
        "schedule: ",
        "201: ",
    ] {
        assert!(home.contains(text), "no {text} on the home page:\n{home}");
    }
    assert!(!home.contains(TOKEN), "{home}");
}

/// The body of `GET path` (HTTP/1.0, so the server closes the connection).
fn http_get(base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200"),
        "{reply}"
    );
    reply
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_string())
}

#[test]
fn a_python_service_schedules_cancels_and_works_jobs() {
    run_client("python3", "client.py");
}

#[test]
fn a_node_service_schedules_cancels_and_works_jobs() {
    run_client("node", "client.mjs");
}

/// The Python service again, through a `serve` of a Redis Cluster (3 masters): the API,
/// the leader it runs and the pull loop reach the queue's master from the seeds.
#[test]
fn a_python_service_works_through_serve_on_a_redis_cluster() {
    let cluster = support::RedisCluster::start(3, 0);
    run_client_on(&cluster.seeds().join(","), "python3", "client.py");
}

/// The README's Python and Node services, exactly as durable/README.md shows them (read
/// from it here, so they cannot drift; only the address is this `serve`'s), each under 30
/// lines: they schedule two 48-hour jobs and cancel one; on the queue's manual clock,
/// nothing comes before 48 hours pass, then their pull loop works the other.
fn run_readme_service(lang: &str, program: &str, file: &str) {
    let address = "http://127.0.0.1:8025/v1/queues/orders";
    let snippet = support::readme_block(lang, address);
    let lines = snippet.lines().count();
    assert!(lines < 30, "the README's {lang} service has {lines} lines");
    assert_eq!(snippet.matches(address).count(), 1, "{snippet}");

    let server = support::RedisServer::start();
    let name = support::queue_name("readme");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let queue = runtime.block_on(async {
        let queue = tickless_durable::Queue::connect(&server.url(), &name)
            .await
            .unwrap();
        queue
            .set_manual_clock(Some(support::at(support::T0)))
            .await
            .unwrap();
        queue
    });
    let served = serve(&server.url(), &name);
    let dir = std::env::temp_dir().join(format!("tickless-readme-{}-{lang}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join(file);
    let queue_url = format!("{}/v1/queues/{name}", served.base);
    std::fs::write(&script, snippet.replace(address, &queue_url)).unwrap();
    let mut child = Command::new(program)
        .arg(&script)
        .env("ORDERS_TOKEN", TOKEN)
        .env("PYTHONUNBUFFERED", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let output = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    // Set when its output ends: the service stopped (its loop never ends on its own).
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stdout, output, ended) = (child.stdout.take().unwrap(), output.clone(), ended.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut output = output.lock().unwrap();
                output.push_str(&line);
                output.push('\n');
            }
            ended.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let job = |id: &str| runtime.block_on(queue.job(id)).unwrap();
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let limit = std::time::Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(
                !ended.load(std::sync::atomic::Ordering::SeqCst),
                "the {lang} service stopped: {}",
                output.lock().unwrap()
            );
            assert!(
                std::time::Instant::now() < limit,
                "{lang} service: {what} within 30 s; its output:\n{}",
                output.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // close:41 is scheduled before close:42, then cancelled.
    wait("close:42 scheduled and close:41 cancelled", &|| {
        job("close:42").is_some() && job("close:41").is_none()
    });
    let due = job("close:42").unwrap().due;
    assert_eq!(due, support::at(support::T0 + 48 * 3600 * 1000));
    runtime
        .block_on(queue.advance_manual_clock(Duration::from_secs(48 * 3600 - 1)))
        .unwrap();
    assert!(
        !output.lock().unwrap().contains("closing order"),
        "worked before it was due"
    );
    runtime
        .block_on(queue.advance_manual_clock(Duration::from_secs(1)))
        .unwrap();
    wait("close:42 worked and acked", &|| {
        output.lock().unwrap().contains("closing order 42") && job("close:42").is_none()
    });
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap();
    let output = output.lock().unwrap().clone();
    assert_eq!(output, "closing order 42\n", "the cancelled job was worked");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_readmes_python_service_runs_as_shown() {
    run_readme_service("python", "python3", "service.py");
}

#[test]
fn the_readmes_node_service_runs_as_shown() {
    run_readme_service("js", "node", "service.mjs");
}

/// schemathesis (PyPI; `TICKLESS_SCHEMATHESIS` names its binary, scripts/test.sh
/// installs it in a venv) on every operation of the served document, with the token and
/// without: no 5xx, every status and body as documented, schema-violating requests
/// refused, auth enforced. (Not `positive_data_acceptance`: a request the schema allows
/// may still be refused for what a schema cannot say, such as a due time past 2^52 ms.)
#[test]
fn schemathesis_finds_no_server_error_and_every_answer_fits_the_document() {
    let Ok(schemathesis) = std::env::var("TICKLESS_SCHEMATHESIS") else {
        panic!(
            "TICKLESS_SCHEMATHESIS must name the schemathesis binary: scripts/test.sh \
             installs it (python3 -m venv V && V/bin/pip install schemathesis==4.32.5)"
        );
    };
    let server = support::RedisServer::start();
    let queue = support::queue_name("schemathesis");
    // Ready jobs, so that claims answer at once instead of waiting out wait_ms (up to
    // 30 s each on an empty queue); claims take at most 1000 each.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let queue = tickless_durable::Queue::connect(&server.url(), &queue)
            .await
            .unwrap();
        let ids: Vec<String> = (0..100_000).map(|n| format!("ready:{n}")).collect();
        let now = tickless_durable::When::After(Duration::ZERO);
        queue
            .schedule_batch(ids.iter().map(|id| (id.as_str(), b"x", now)))
            .await
            .unwrap();
    });
    let served = serve(&server.url(), &queue);
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api_clients/schemathesis.toml");
    let document = format!("{}/v1/openapi.json", served.base);
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let work = std::env::temp_dir().join(format!("tickless-schemathesis-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    for token in [Some(bearer.as_str()), None] {
        let mut command = Command::new(&schemathesis);
        // Its cache (.schemathesis/) goes to the working directory: not the checkout.
        command
            .current_dir(&work)
            .arg("--config-file")
            .arg(&config)
            .args(["run", &document, "--checks", "all"])
            .args(["--exclude-checks", "positive_data_acceptance"])
            .args([
                "-n",
                "15",
                "--seed",
                "1",
                "--no-color",
                "--request-timeout",
                "35",
            ])
            .args(["--suppress-health-check", "filter_too_much"])
            .env("QUEUE", &queue)
            .env("NO_COLOR", "1");
        if let Some(header) = token {
            command.args(["-H", header]);
        }
        let what = format!(
            "schemathesis {} token",
            if token.is_some() { "with" } else { "without" }
        );
        let ended = support::run_to_end(&mut command, Duration::from_secs(240), &what);
        assert_eq!(
            ended.code,
            Some(0),
            "{what}:\n{}\n{}",
            ended.stdout,
            ended.stderr
        );
        // The summary's last line: "No issues found in 7.1s", or "1 warning in 7.1s"
        // (schemathesis finds an operation whose generated data mostly gets 4xx); never
        // failures or errors.
        let last = ended
            .stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        assert!(
            !last.contains("failure") && !last.contains("error") && last.contains(" in "),
            "{what}:\n{}",
            ended.stdout
        );
        assert!(
            !ended.stdout.contains(TOKEN),
            "the token shown in schemathesis's report"
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// `serve --tls-cert --tls-key`: a client that trusts the CA schedules and looks up over
/// HTTPS; plain HTTP to the same port gets no answer; SIGTERM closes an idle keep-alive
/// connection at once, and serve exits 0.
#[test]
fn serve_terminates_tls_with_the_certificate_given() {
    let server = support::RedisServer::start();
    let queue = support::queue_name("tls");
    let dir = std::env::temp_dir().join(format!("tickless-api-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A self-signed certificate for 127.0.0.1, which the client trusts as its CA.
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    let made = support::run_to_end(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
        Duration::from_secs(30),
        "openssl req",
    );
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let served = serve_with(
        &server.url(),
        &queue,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(
        served.base.starts_with("https://127.0.0.1:"),
        "{}",
        served.base
    );
    let script = r#"
import http.client, json, os, ssl, urllib.request, urllib.error
ctx = ssl.create_default_context(cafile=os.environ["CA"])
base, q = os.environ["API"], os.environ["QUEUE"]
def call(method, path, body=None, url=None):
    req = urllib.request.Request((url or base) + f"/v1/queues/{q}" + path, method=method,
        data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", "Bearer " + os.environ["TOKEN"])
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
        return resp.status, json.load(resp)
assert call("POST", "/jobs", {"id": "secure", "payload": "p", "delay_ms": 60000}) == (201, {"id": "secure", "result": "added"})
assert call("GET", "/jobs/secure")[1]["state"] == "scheduled"
try:
    urllib.request.urlopen(base.replace("https://", "http://") + "/v1/openapi.json", timeout=10)
    raise SystemExit("plain HTTP answered on the TLS port")
except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
    assert "plain HTTP" not in str(err), err
# SIGTERM with a keep-alive connection open and idle: serve closes it and exits.
import signal, time
host = base.removeprefix("https://")
conn = http.client.HTTPSConnection(host, timeout=10, context=ctx)
conn.request("GET", "/v1/openapi.json")
assert conn.getresponse().read()
os.kill(int(os.environ["PID"]), signal.SIGTERM)
try:
    assert conn.sock.recv(1) == b"", "data after the answer"
except (ssl.SSLError, ConnectionError):
    pass
print("tls client: ok")
"#;
    let ended = support::run_to_end(
        Command::new("python3")
            .args(["-c", script])
            .env("API", &served.base)
            .env("TOKEN", TOKEN)
            .env("QUEUE", &queue)
            .env("CA", &cert)
            .env("PID", served.child.id().to_string()),
        Duration::from_secs(60),
        "python3 over TLS",
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(ended.code, Some(0), "{}\n{}", ended.stdout, ended.stderr);
    assert!(ended.stdout.contains("tls client: ok"), "{}", ended.stdout);
    // Its grace is 25 s: an open connection left waiting would take that long.
    let mut served = served;
    let status = support::wait_exit(
        &mut served.child,
        Duration::from_secs(10),
        "serve after SIGTERM",
    );
    assert!(status.success(), "serve after SIGTERM: {status:?}");
}

/// `serve` killed with SIGKILL while clients schedule, then started again: every job it
/// answered 201 (added) for is in Redis, and the new process serves them.
#[test]
fn serve_killed_under_load_loses_no_job_it_answered_for() {
    let server = support::RedisServer::start();
    let queue = support::queue_name("kill9");
    let mut served = serve(&server.url(), &queue);
    let accepted = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (base, accepted, stop) = (served.base.clone(), accepted.clone(), stop.clone());
            let queue = queue.clone();
            std::thread::spawn(move || {
                for n in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    let id = format!("c{c}-{n}");
                    let body = format!(r#"{{"id":"{id}","payload":"x","delay_ms":3600000}}"#);
                    match http_post(&base, &format!("/v1/queues/{queue}/jobs"), &body) {
                        Some(201) => accepted.lock().unwrap().push(id),
                        // The process is gone: no answer, nothing promised.
                        None => return,
                        Some(status) => panic!("{id}: status {status}"),
                    }
                }
            })
        })
        .collect();
    let limit = std::time::Instant::now() + Duration::from_secs(30);
    while accepted.lock().unwrap().len() < 200 {
        assert!(
            std::time::Instant::now() < limit,
            "200 schedules were not answered within 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    served.child.kill().unwrap(); // SIGKILL
    served.child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let accepted = accepted.lock().unwrap().clone();
    let served = serve(&server.url(), &queue);
    for id in &accepted {
        let body = http_get_auth(&served.base, &format!("/v1/queues/{queue}/jobs/{id}"));
        assert!(
            body.contains("\"state\":\"scheduled\""),
            "{id} answered 201, then: {body}"
        );
    }
}

/// Redis killed (`kill -9`) and started again on the same port under a live `serve` and
/// clients that schedule: while it is down every schedule gets a 503 `redis-unavailable`
/// problem with `Retry-After` (never a hang, a 5xx of another kind, or a dead `serve`);
/// clients send the same job again, as the problem says is safe; once Redis is back they
/// are answered 201 or 200 (it was written before the answer was lost) and every job
/// answered so is in Redis (its `appendfsync always` file).
#[test]
fn redis_restarted_under_serve_answers_503_then_loses_nothing_accepted() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let mut server = support::RedisServer::start();
    let queue = support::queue_name("redis-restart");
    let mut served = serve(&server.url(), &queue);
    let accepted = Arc::new(Mutex::new(Vec::<String>::new()));
    let refused = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (base, queue) = (served.base.clone(), queue.clone());
            let (accepted, refused, stop) = (accepted.clone(), refused.clone(), stop.clone());
            std::thread::spawn(move || {
                for n in 0.. {
                    let id = format!("c{c}-{n}");
                    let body = format!(r#"{{"id":"{id}","payload":"x","delay_ms":3600000}}"#);
                    // The same job until it is answered for.
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let path = format!("/v1/queues/{queue}/jobs");
                        let reply = http_post_reply(&base, &path, &body)
                            .unwrap_or_else(|| panic!("{id}: serve closed without an answer"));
                        match status_of(&reply) {
                            Some(201 | 200) => {
                                accepted.lock().unwrap().push(id);
                                break;
                            }
                            Some(503) => {
                                let head = reply.to_ascii_lowercase();
                                assert!(
                                    head.contains("\r\nretry-after: 1\r\n")
                                        && head.contains("application/problem+json")
                                        && reply.contains("problem:redis-unavailable"),
                                    "{id}: {reply}"
                                );
                                refused.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            _ => panic!("{id}: {reply}"),
                        }
                    }
                }
            })
        })
        .collect();
    let wait = |what: &str, limit_s: u64, done: &dyn Fn() -> bool| {
        let limit = std::time::Instant::now() + Duration::from_secs(limit_s);
        while !done() {
            assert!(
                std::time::Instant::now() < limit,
                "{what} within {limit_s} s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let answered = || accepted.lock().unwrap().len();
    wait("100 schedules answered", 30, &|| answered() >= 100);
    server.kill();
    wait("a 503 while Redis is down", 10, &|| {
        refused.load(Ordering::Relaxed) >= 4
    });
    let (before, refusals) = (answered(), refused.load(Ordering::Relaxed));
    wait("more 503s while Redis is down", 10, &|| {
        refused.load(Ordering::Relaxed) >= refusals + 8
    });
    assert_eq!(answered(), before, "answered for while Redis was down");
    server.restart();
    wait("100 more schedules answered after the restart", 30, &|| {
        answered() >= before + 100
    });
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    assert!(served.child.try_wait().unwrap().is_none(), "serve died");
    let accepted = accepted.lock().unwrap().clone();
    for id in &accepted {
        let body = http_get_auth(&served.base, &format!("/v1/queues/{queue}/jobs/{id}"));
        assert!(
            body.contains("\"state\":\"scheduled\""),
            "{id} answered for, then: {body}"
        );
    }
}

/// The status of `POST path` with the token and a JSON body; `None` when the connection
/// fails or closes without an answer.
fn http_post(base: &str, path: &str, body: &str) -> Option<u16> {
    status_of(&http_post_reply(base, path, body)?)
}

/// The whole answer (status line, headers, body) to `POST path` with the token and a JSON
/// body; `None` when the connection fails or closes without an answer.
fn http_post_reply(base: &str, path: &str, body: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

fn status_of(reply: &str) -> Option<u16> {
    reply.split(' ').nth(1)?.parse().ok()
}

/// The body of `GET path` with the token.
fn http_get_auth(base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}
