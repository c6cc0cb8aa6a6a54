//! An S3-protocol server of a test's own: `s3s-fs` (the s3s project's server that keeps
//! each object as a file under a root directory and checks SigV4 signatures) on a free
//! loopback port, in a temporary directory, with one bucket (a subdirectory of the root);
//! killed and its directory removed on drop, also when the test panics. It can be stopped
//! and started again on the same port and directory, to make "the store is down".
//!
//! The binary is `TICKLESS_S3S_FS` if set (`scripts/test.sh` sets it), else `s3s-fs` on
//! PATH.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A running (or stopped) `s3s-fs`; see the module docs.
pub struct S3Server {
    child: Option<Child>,
    port: u16,
    /// The temporary directory: `root/` is the server's root, `s3s-fs.log` its output.
    dir: PathBuf,
}

/// The bucket every server has.
pub const S3_BUCKET: &str = "cold";
/// The access key its clients sign with.
pub const S3_ACCESS_KEY: &str = "tickless-test-access";
/// The secret key its clients sign with: tests check that it is never shown.
pub const S3_SECRET_KEY: &str = "tickless-test-secret-Zq8w3vP1";

const MISSING: &str = "s3s-fs was not found (neither TICKLESS_S3S_FS nor on PATH). The cold \
tier's S3 tests start a real S3-protocol server of their own. Install it with `cargo install \
s3s-fs@0.14.1 --features binary --locked`, or run `scripts/test.sh`, which installs it when it \
is missing.";

impl S3Server {
    /// Starts one on a free loopback port, with the bucket [`S3_BUCKET`] and the keys
    /// [`S3_ACCESS_KEY`], [`S3_SECRET_KEY`].
    pub fn start() -> S3Server {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tickless-s3-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root").join(S3_BUCKET))
            .expect("a temporary directory for s3s-fs, with its bucket");
        let mut server = S3Server {
            child: None,
            port: 0,
            dir,
        };
        for _ in 0..20 {
            server.port = free_port();
            if server.launch() {
                return server;
            }
        }
        panic!(
            "s3s-fs did not start on a free port after 20 tries (see its log in {})",
            server.dir.display()
        );
    }

    /// Starts the process; `false` if it exited (its port taken meanwhile, most likely)
    /// or did not answer within 10 s.
    fn launch(&mut self) -> bool {
        let binary = std::env::var_os("TICKLESS_S3S_FS").unwrap_or_else(|| "s3s-fs".into());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("s3s-fs.log"))
            .expect("s3s-fs's log file");
        let child = Command::new(&binary)
            .args(["--host", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--access-key", S3_ACCESS_KEY, "--secret-key", S3_SECRET_KEY])
            .arg(self.dir.join("root"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("s3s-fs's log file"))
            .stderr(log)
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!("{MISSING}"),
            Err(err) => panic!("cannot run s3s-fs ({binary:?}): {err}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            // It answers an unsigned request as S3 does (403, an XML `<Error>`), and is
            // still running after it: not another process that holds the port.
            if answers_as_s3(self.port) && matches!(child.try_wait(), Ok(None)) {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// `http://127.0.0.1:<port>`: the endpoint a client is built with.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The bucket's directory: each object is a file under it, at its key's path.
    pub fn bucket_dir(&self) -> PathBuf {
        self.dir.join("root").join(S3_BUCKET)
    }

    /// Every object of the bucket, as its key (`a/b/c`), sorted.
    pub fn objects(&self) -> Vec<String> {
        let root = self.bucket_dir();
        let mut out = Vec::new();
        let mut todo = vec![root.clone()];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    todo.push(path);
                } else if let Ok(key) = path.strip_prefix(&root) {
                    out.push(key_of(key));
                }
            }
        }
        out.sort();
        out
    }

    /// Stops it (SIGKILL): the store is down, its port closed, its objects kept.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory (after [`stop`](Self::stop)),
    /// within 10 s.
    pub fn start_again(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.launch() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not start again on port {} within 10 s (see {})",
                self.port,
                self.dir.join("s3s-fs.log").display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn key_of(relative: &Path) -> String {
    relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port on 127.0.0.1")
}

/// Whether an unsigned `GET /` on `port` is refused as an S3 server refuses it.
fn answers_as_s3(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    if stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .is_err()
    {
        return false;
    }
    let request = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    reply.starts_with("HTTP/1.1 ") && reply.contains("<Error>")
}
