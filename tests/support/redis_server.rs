//! A `redis-server` of a test's own: on a free loopback port, in a temporary directory,
//! with the append-only file on; killed (SIGKILL) and its directory removed on drop, also
//! when the test panics. Shared by the durable tests and examples (`#[path]`).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A running `redis-server`; see the module docs.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    fsync: &'static str,
}

const MISSING: &str = "redis-server was not found on PATH. The durable tests and examples start \
a real Redis of their own. Install it (Debian/Ubuntu: `apt-get install -y redis-server`), or \
run `scripts/test.sh`, which installs it when it is missing.";

impl RedisServer {
    /// Starts one with `appendfsync always`, so that a write Redis answered survives a
    /// `kill -9` of it.
    pub fn start() -> RedisServer {
        RedisServer::start_with_fsync("always")
    }

    /// Starts one with the given `appendfsync` policy (`always` or `everysec`).
    pub fn start_with_fsync(fsync: &'static str) -> RedisServer {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tickless-redis-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory for redis-server");
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            fsync,
        };
        for _ in 0..20 {
            server.port = free_port();
            if server.launch() {
                return server;
            }
        }
        panic!(
            "redis-server did not start on a free port after 20 tries (see its log in {})",
            server.dir.display()
        );
    }

    fn launch(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .args(["--appendonly", "yes", "--appendfsync", self.fsync])
            .args(["--save", "", "--protected-mode", "yes", "--daemonize", "no"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!("{MISSING}"),
            Err(err) => panic!("cannot run redis-server: {err}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false; // the port was taken meanwhile, most likely
            }
            // Ours, not another server that took the port between `free_port` and the
            // bind (a parallel test's): it must answer with our child's process id; and
            // ready, its append-only file loaded (`PING` answers `LOADING` until then).
            if answering_pid(self.port) == Some(child.id()) && ping(self.port) {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills it with SIGKILL (as `kill -9`), and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory: it loads its append-only file.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.launch() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not restart on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port on 127.0.0.1")
}

/// The process id of the Redis answering on `port`, from `INFO server`.
fn answering_pid(port: u16) -> Option<u32> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream.write_all(b"INFO server\r\n").ok()?;
    let mut reply = String::new();
    let mut chunk = [0u8; 4096];
    loop {
        // The field, once its line has arrived whole.
        if let Some(rest) = reply.split("\nprocess_id:").nth(1) {
            if let Some((pid, _)) = rest.split_once("\r\n") {
                return pid.trim().parse().ok();
            }
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 || reply.len() > 1 << 16 {
            return None;
        }
        reply.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
}

/// Whether the Redis on `port` answers `PING` with `PONG` (not `LOADING`).
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    matches!(stream.read(&mut reply), Ok(n) if reply[..n].starts_with(b"+PONG"))
}
