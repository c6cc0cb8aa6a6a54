//! The cold scenario's leader process (`role cold-lead`), which stops at a named step of
//! a move or a load so that the parent can `kill -9` it exactly there, or restart Redis
//! under it and let it go on.
//!
//! ```text
//! role cold-lead <url> <queue> <dir> <step>:<n> <go-file>
//! ```
//!
//! A leader of `<queue>` with a cold tier in `<dir>` (12 h horizon, 1 h windows, 6 h lead,
//! a pass every 10 ms: see [`tier`]). When this process reaches the `n`-th time of `step`, it prints
//! `at <step> <n>` and waits until `<go-file>` exists (the parent kills it first, or
//! creates the file). The steps, none of which needs a hook in the library:
//!
//! - `put`: before a segment's PUT writes anything; `put-done`: after the PUT has written
//!   the object, before the leader hears of it (so before Redis is told). The store is a
//!   wrapper around the real directory ([`Stepping`]).
//! - `commit`, `load`, `retire`: before a `cold_commit.lua`, `cold_load.lua` or
//!   `cold_retire.lua` call reaches Redis. The leader talks to Redis through a proxy in
//!   this process ([`proxy`]) that reads each command (RESP) and knows the three scripts
//!   by the keys they declare (contract.rs's `script_keys`): so `load:2` is between the
//!   first and the second call of a segment's load (a segment of 10,000 jobs is loaded
//!   in calls of pass.rs's `CALL_JOBS`, 64).
//! - `delete`: before an object is deleted (after `cold_retire.lua`, or a sweep's).
//! - `none`: never stops.
//!
//! The proxy reads plain RESP, so the scenario's Redis is plain TCP whatever
//! `TICKLESS_TEST_REDIS` says.

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use std::fmt;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tickless_durable::{ColdTier, LeaderOptions, Queue};

/// How long a stopped process waits for its go file before it gives up (exit 3).
const HOLD_LIMIT: Duration = Duration::from_secs(60);

/// Where this process stops (from its command line).
struct Stop {
    step: String,
    n: u32,
    go: std::path::PathBuf,
}

static STOP: OnceLock<Stop> = OnceLock::new();

/// The steps counted so far, by name.
static COUNTS: [(&str, AtomicU32); 6] = [
    ("put", AtomicU32::new(0)),
    ("put-done", AtomicU32::new(0)),
    ("commit", AtomicU32::new(0)),
    ("load", AtomicU32::new(0)),
    ("retire", AtomicU32::new(0)),
    ("delete", AtomicU32::new(0)),
];

/// Counts `step`; whether this is the one to stop at.
fn reached(step: &str) -> bool {
    let Some((_, count)) = COUNTS.iter().find(|(name, _)| *name == step) else {
        return false;
    };
    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
    STOP.get()
        .is_some_and(|stop| stop.step == step && stop.n == n)
}

/// Takes back the count of `step`: the call it counted drew `NOSCRIPT` (Redis restarted
/// and forgot its scripts) and did not run; the `redis` crate loads the script and sends
/// the call again.
fn not_run(step: &str) {
    if let Some((_, count)) = COUNTS.iter().find(|(name, _)| *name == step) {
        let _ = count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

fn announce(step: &str) -> std::path::PathBuf {
    let stop = STOP.get().expect("set before the leader starts");
    println!("at {step} {}", stop.n);
    let _ = std::io::stdout().flush();
    stop.go.clone()
}

fn given_up(step: &str) -> ! {
    eprintln!("cold-lead: stopped at {step} and no go file came within {HOLD_LIMIT:?}");
    std::process::exit(3)
}

/// Stops a thread (the proxy's) at `step` until the go file exists.
fn hold_thread(step: &str) {
    let go = announce(step);
    let start = Instant::now();
    while !go.exists() {
        if start.elapsed() > HOLD_LIMIT {
            given_up(step);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Stops a task (the leader's pass, in the store) at `step` until the go file exists;
/// the rest of the leader (its lease) runs meanwhile.
async fn hold_task(step: &str) {
    let go = announce(step);
    let start = Instant::now();
    while !go.exists() {
        if start.elapsed() > HOLD_LIMIT {
            given_up(step);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The real directory, with the store's steps counted and stopped at.
#[derive(Clone)]
pub struct Stepping {
    inner: Arc<LocalFileSystem>,
}

impl fmt::Debug for Stepping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stepping({})", self.inner)
    }
}

impl fmt::Display for Stepping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stepping({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Stepping {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if reached("put") {
            hold_task("put").await;
        }
        let result = self.inner.put_opts(location, payload, opts).await;
        if reached("put-done") {
            hold_task("put-done").await;
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let inner = self.inner.clone();
        futures::stream::once(async move {
            if reached("delete") {
                hold_task("delete").await;
            }
            inner.delete_stream(locations)
        })
        .flatten()
        .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// The leaders' tier: 12 h horizon, 1 h windows, loaded 6 h ahead, a pass every 10 ms
/// (so that a pass outlasts `check_every`: the leader must then wait for it, not spin).
fn tier(store: Arc<dyn ObjectStore>) -> ColdTier {
    ColdTier::new(store)
        .horizon(Duration::from_secs(12 * 3600))
        .window(Duration::from_secs(3600))
        .check_every(Duration::from_millis(10))
}

/// `role cold-lead ...` (module docs).
pub async fn lead(args: &[String]) -> std::result::Result<(), String> {
    let [url, name, dir, stop, go] = args else {
        return Err("usage: role cold-lead <url> <queue> <dir> <step>:<n> <go-file>".into());
    };
    let (step, n) = stop
        .split_once(':')
        .and_then(|(step, n)| Some((step.to_string(), n.parse().ok()?)))
        .ok_or_else(|| format!("{stop:?} is not <step>:<n>"))?;
    let _ = STOP.set(Stop {
        step,
        n,
        go: go.into(),
    });
    let upstream = url
        .strip_prefix("redis://")
        .and_then(|rest| rest.split('/').next())
        .ok_or_else(|| format!("{url:?} is not a plain redis:// URL"))?
        .to_string();
    let port = proxy(upstream).map_err(|e| format!("proxy: {e}"))?;
    let store = LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| e.to_string())?
        .with_fsync(true);
    let store = Stepping {
        inner: Arc::new(store),
    };
    let queue = Queue::connect(&format!("redis://127.0.0.1:{port}/"), name)
        .await
        .map_err(|e| e.to_string())?
        .with_cold_tier(tier(Arc::new(store)));
    let leader = queue.leader(LeaderOptions::default()).spawn();
    let (mut seen, mut shown) = (0, (0, 0, 0));
    loop {
        let stats = leader.stats();
        if stats.leaderships > seen {
            seen = stats.leaderships;
            let ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            println!("leading {} {ms}", stats.token);
        }
        let now = (stats.cold_moved, stats.cold_loaded, stats.errors);
        if now != shown {
            shown = now;
            println!("moved {} loaded {} errors {}", now.0, now.1, now.2);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A TCP proxy to `upstream` on a free loopback port of its own (returned), a thread
/// pair per connection; the client's commands are read whole and stopped at as the
/// module docs say.
fn proxy(upstream: String) -> std::io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&upstream) else {
                // Redis is away (restarting): the client sees its connection closed.
                let _ = client.shutdown(Shutdown::Both);
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
                continue;
            };
            std::thread::spawn(move || to_server(client, server));
            std::thread::spawn(move || to_client(server2, client2));
        }
    });
    Ok(port)
}

/// Redis's answers, copied as they come; when Redis goes, so does the client's
/// connection.
fn to_client(mut server: TcpStream, mut client: TcpStream) {
    let _ = std::io::copy(&mut server, &mut client);
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}

/// The client's commands, forwarded whole, each looked at before it goes.
fn to_server(mut client: TcpStream, mut server: TcpStream) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    // The last stepped script sent on this connection.
    let mut last: Option<&'static str> = None;
    loop {
        let n = match client.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut sent = 0;
        let mut at = 0;
        while let Some((len, args)) = command(&buf[at..]) {
            if let Some(step) = loaded(&args) {
                if last.take() == Some(step) {
                    not_run(step);
                }
            }
            if let Some(step) = script_of(&args) {
                last = Some(step);
                if reached(step) {
                    // What came before it goes first; this one waits.
                    if server.write_all(&buf[sent..at]).is_err() {
                        return;
                    }
                    sent = at;
                    hold_thread(step);
                }
            }
            at += len;
        }
        if server.write_all(&buf[sent..at]).is_err() {
            break;
        }
        buf.drain(..at);
    }
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
}

/// The first whole command (a RESP array of bulk strings) of `buf`: its length in bytes
/// and its arguments; `None` until it is all there.
fn command(buf: &[u8]) -> Option<(usize, Vec<&[u8]>)> {
    fn line(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
        let end = buf[from..].windows(2).position(|w| w == b"\r\n")? + from;
        Some((&buf[from..end], end + 2))
    }
    let number = |bytes: &[u8]| std::str::from_utf8(bytes).ok()?.parse::<usize>().ok();
    let (head, mut at) = line(buf, 0)?;
    let count = number(head.strip_prefix(b"*")?)?;
    let mut args = Vec::with_capacity(count.min(8));
    for _ in 0..count {
        let (head, start) = line(buf, at)?;
        let len = number(head.strip_prefix(b"$")?)?;
        if buf.len() < start + len + 2 {
            return None;
        }
        args.push(&buf[start..start + len]);
        at = start + len + 2;
    }
    Some((at, args))
}

/// Which of the stopped-at scripts a `SCRIPT LOAD` loads: its text holds the script
/// file's first line (scripts.rs: `local function main() -- cold_load.lua: ...`).
fn loaded(args: &[&[u8]]) -> Option<&'static str> {
    let [name, sub, code] = args else {
        return None;
    };
    if !name.eq_ignore_ascii_case(b"SCRIPT") || !sub.eq_ignore_ascii_case(b"LOAD") {
        return None;
    }
    let has = |file: &str| code.windows(file.len()).any(|w| w == file.as_bytes());
    [
        ("-- cold_load.lua:", "load"),
        ("-- cold_commit.lua:", "commit"),
        ("-- cold_retire.lua:", "retire"),
    ]
    .into_iter()
    .find(|(file, _)| has(file))
    .map(|(_, step)| step)
}

/// Which of the stopped-at scripts `args` calls, by the keys it declares: cold_load.lua's
/// are meta, jobs, due, ready, cseg, errors; cold_commit.lua's meta, jobs, due, cseg, cwin;
/// cold_retire.lua's meta, cseg, cwin.
fn script_of(args: &[&[u8]]) -> Option<&'static str> {
    let name = args.first()?.to_ascii_uppercase();
    if name != b"EVALSHA" && name != b"EVAL" {
        return None;
    }
    let keys = std::str::from_utf8(args.get(2)?)
        .ok()?
        .parse::<usize>()
        .ok()?;
    let keys = args.get(3..3 + keys)?;
    let ends = |i: usize, suffix: &str| keys[i].ends_with(suffix.as_bytes());
    match keys.len() {
        6 if ends(3, ":ready") && ends(4, ":cseg") && ends(5, ":errors") => Some("load"),
        5 if ends(3, ":cseg") && ends(4, ":cwin") => Some("commit"),
        3 if ends(1, ":cseg") && ends(2, ":cwin") => Some("retire"),
        _ => None,
    }
}
