//! A `redis-server` of a test's own: on a free loopback port, in a temporary directory,
//! with the append-only file on; killed (SIGKILL) and its directory removed on drop, also
//! when the test panics.
//! `TICKLESS_TEST_REDIS` makes the servers of [`RedisServer::start`] and friends TLS-only
//! and/or gives them README's ACL user (see `redis_variant.rs`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::redis_variant::{self, readme_user, Variant};

/// A running `redis-server`; see the module docs.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    fsync: &'static str,
    /// TLS only (`--port 0 --tls-port`), with the certificates `make_certificates` made.
    tls: bool,
    /// Clients must present a certificate signed by its CA (`--tls-auth-clients yes`);
    /// `client.crt` and `client.key` in its directory are one (`redis-cli` uses them).
    client_auth: bool,
    /// README's ACL user loaded from an ACL file at every start; `url()` names it.
    acl: bool,
    /// Added to the command line after the defaults (later values win).
    extra: Vec<String>,
}

/// Where a TLS server's certificates come from (made with a CA of its own if none).
enum Certificates<'a> {
    /// Copied from a directory where [`make_certificates`] made them (a cluster's CA).
    Copy(&'a std::path::Path),
    /// Signed by the `tls` variant's CA, which the client trusts (see `redis_variant.rs`).
    Variant,
}

/// `start_tls`'s servers: TLS only, the default user.
const TLS_ONLY: Variant = Variant {
    tls: true,
    acl: false,
};

const MISSING: &str = "redis-server was not found on PATH. The durable tests and examples start \
a real Redis of their own. Install it (Debian/Ubuntu: `apt-get install -y redis-server`), or \
run `scripts/test.sh`, which installs it when it is missing.";

impl RedisServer {
    /// Starts one with `appendfsync always`, so that a write Redis answered survives a
    /// `kill -9` of it; TLS and/or with README's ACL user as `TICKLESS_TEST_REDIS` says.
    pub fn start() -> RedisServer {
        RedisServer::start_with_fsync("always")
    }

    /// Starts one with the given `appendfsync` policy (`always` or `everysec`); in the
    /// variant `TICKLESS_TEST_REDIS` names.
    pub fn start_with_fsync(fsync: &'static str) -> RedisServer {
        RedisServer::start_variant(fsync, &[])
    }

    /// Starts one with `extra` arguments after the defaults (e.g. `--replicaof`,
    /// `--appendonly no`); in the variant `TICKLESS_TEST_REDIS` names.
    pub fn start_with_args(extra: &[&str]) -> RedisServer {
        RedisServer::start_variant("always", extra)
    }

    /// [`start_with_args`](Self::start_with_args) plain whatever `TICKLESS_TEST_REDIS`
    /// says: plain TCP, the default user (cluster nodes, and tests whose point needs it).
    pub fn start_plain(extra: &[&str]) -> RedisServer {
        RedisServer::start_with("always", Variant::PLAIN, None, false, extra)
    }

    fn start_variant(fsync: &'static str, extra: &[&str]) -> RedisServer {
        RedisServer::start_with(
            fsync,
            Variant::from_env(),
            Some(Certificates::Variant),
            false,
            extra,
        )
    }

    /// Starts one that speaks only TLS (`--port 0 --tls-port P`), with a CA and a server
    /// certificate for `localhost` and `127.0.0.1` made with `openssl` in its directory
    /// (see [`ca_pem`](Self::ca_pem)); `extra` as in [`start_with_args`](Self::start_with_args).
    pub fn start_tls(extra: &[&str]) -> RedisServer {
        RedisServer::start_with("always", TLS_ONLY, None, false, extra)
    }

    /// [`start_tls`](Self::start_tls) that also asks every client for a certificate
    /// signed by its CA (`--tls-auth-clients yes`: mutual TLS); one is made for the tests
    /// ([`client_cert_pem`](Self::client_cert_pem), [`client_key_pem`](Self::client_key_pem)),
    /// and [`cli`](Self::cli) presents it.
    pub fn start_mutual_tls(extra: &[&str]) -> RedisServer {
        RedisServer::start_with("always", TLS_ONLY, None, true, extra)
    }

    /// [`start_tls`](Self::start_tls) with the certificates already in `certs` (made by
    /// `make_certificates`), so that several servers share one CA (a cluster's nodes);
    /// with `client_auth`, as [`start_mutual_tls`](Self::start_mutual_tls) with the client
    /// certificate in `certs` too (`client.crt`, `client.key`).
    pub fn start_tls_with_certificates(
        certs: &std::path::Path,
        client_auth: bool,
        extra: &[&str],
    ) -> RedisServer {
        let copy = Some(Certificates::Copy(certs));
        RedisServer::start_with("always", TLS_ONLY, copy, client_auth, extra)
    }

    /// With `variant.tls`, the certificates come from `certs`, or are made with a CA of
    /// the server's own if `None`; with `client_auth`, a client certificate too.
    fn start_with(
        fsync: &'static str,
        variant: Variant,
        certs: Option<Certificates<'_>>,
        client_auth: bool,
        extra: &[&str],
    ) -> RedisServer {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tickless-redis-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory for redis-server");
        if variant.tls {
            match certs {
                Some(Certificates::Copy(certs)) => {
                    let mut files = vec!["ca.crt", "server.crt", "server.key"];
                    if client_auth {
                        files.extend(["client.crt", "client.key"]);
                    }
                    for file in files {
                        std::fs::copy(certs.join(file), dir.join(file)).expect("a certificate");
                    }
                }
                Some(Certificates::Variant) => redis_variant::make_variant_certificates(&dir),
                None => {
                    make_certificates(&dir);
                    if client_auth {
                        make_client_certificate(&dir, "ca", "client");
                    }
                }
            }
        }
        if variant.acl {
            redis_variant::write_acl_file(&dir);
        }
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            fsync,
            tls: variant.tls,
            client_auth: variant.tls && client_auth,
            acl: variant.acl,
            extra: extra.iter().map(|arg| arg.to_string()).collect(),
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
        let mut command = Command::new("redis-server");
        if self.tls {
            let file = |name: &str| self.dir.join(name).display().to_string();
            command
                .args(["--bind", "127.0.0.1", "--port", "0", "--tls-port"])
                .arg(self.port.to_string())
                .args(["--tls-cert-file", &file("server.crt")])
                .args(["--tls-key-file", &file("server.key")])
                .args(["--tls-ca-cert-file", &file("ca.crt")])
                .args([
                    "--tls-auth-clients",
                    if self.client_auth { "yes" } else { "no" },
                ]);
        } else {
            command
                .args(["--bind", "127.0.0.1", "--port"])
                .arg(self.port.to_string());
        }
        if self.acl {
            command.arg("--aclfile").arg(self.dir.join("users.acl"));
        }
        let child = command
            .arg("--dir")
            .arg(&self.dir)
            .args(["--appendonly", "yes", "--appendfsync", self.fsync])
            .args(["--save", "", "--protected-mode", "yes", "--daemonize", "no"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.extra)
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
            let ours = if self.tls {
                self.cli_pid() == Some(child.id())
            } else {
                answering_pid(self.port) == Some(child.id()) && ping(self.port)
            };
            if ours {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// The URL a queue connects with: `redis://127.0.0.1:<port>/`, or
    /// `rediss://localhost:<port>/` for a TLS one (the name its certificate is for); with
    /// README's user and password in it when the server has that user (`acl` variant).
    pub fn url(&self) -> String {
        if self.acl {
            let (user, password) = readme_user();
            self.url_as(&user, &password)
        } else {
            self.admin_url()
        }
    }

    /// As [`url`](Self::url) but as the default user (all permissions): for a test's own
    /// commands (`KEYS`, `DEL`, `CONFIG`, `DEBUG`, ...), whatever the variant.
    pub fn admin_url(&self) -> String {
        self.url_with("")
    }

    /// A connection as the default user ([`admin_url`](Self::admin_url)): for a test to
    /// look at or plant the queue's keys with plain commands, whatever the variant.
    #[cfg(feature = "redis")]
    pub async fn admin(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.admin_url())
            .expect("the admin URL parses")
            .get_multiplexed_async_connection()
            .await
            .expect("connect as the default user")
    }

    /// Gives README's ACL user (the `acl` variant) README's extra `+scan`, which listing
    /// queues needs (`ConnectOptions::queue_names`: `serve`, `queues`); nothing otherwise.
    #[cfg(feature = "redis")]
    pub async fn allow_scan(&self) {
        if self.is_acl() {
            let _: () = redis::cmd("ACL")
                .arg(&["SETUSER", &readme_user().0, "+scan"])
                .query_async(&mut self.admin().await)
                .await
                .expect("ACL SETUSER ... +scan");
        }
    }

    /// As [`url`](Self::url) but as `user` with `password` (empty `user`: the default).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        self.url_with(&format!("{user}:{password}@"))
    }

    fn url_with(&self, userinfo: &str) -> String {
        if self.tls {
            format!("rediss://{userinfo}localhost:{}/", self.port)
        } else {
            format!("redis://{userinfo}127.0.0.1:{}/", self.port)
        }
    }

    /// Whether it speaks only TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Whether it has README's ACL user, which [`url`](Self::url) names (`acl` variant).
    pub fn is_acl(&self) -> bool {
        self.acl
    }

    /// `rediss://127.0.0.1:<port>/` for a TLS one (its certificate names the address too,
    /// and a cluster announces its nodes by address), else as
    /// [`admin_url`](Self::admin_url).
    pub fn url_by_address(&self) -> String {
        if self.tls {
            format!("rediss://127.0.0.1:{}/", self.port)
        } else {
            self.admin_url()
        }
    }

    /// The CA that signed a TLS server's certificate, as PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("ca.crt")).expect("the test CA")
    }

    /// The path of `file` in the server's directory: `ca.crt`, and for a
    /// [`start_mutual_tls`](Self::start_mutual_tls) one `client.crt` and `client.key`
    /// (for a program that takes files, such as the `tickless-durable` binary).
    pub fn file(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The client certificate a [`start_mutual_tls`](Self::start_mutual_tls) server
    /// accepts, as PEM.
    pub fn client_cert_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("client.crt")).expect("the client certificate")
    }

    /// The private key of [`client_cert_pem`](Self::client_cert_pem), as PEM.
    pub fn client_key_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("client.key")).expect("the client key")
    }

    /// The password of `--requirepass`, if it was given.
    fn password(&self) -> Option<&str> {
        let at = self.extra.iter().position(|arg| arg == "--requirepass")?;
        self.extra.get(at + 1).map(String::as_str)
    }

    /// Runs `redis-cli` against this server (TLS and password as it needs); its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut command = Command::new("redis-cli");
        command
            .args(["-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string());
        if self.tls {
            command
                .arg("--tls")
                .arg("--cacert")
                .arg(self.dir.join("ca.crt"));
            if self.client_auth {
                command
                    .arg("--cert")
                    .arg(self.dir.join("client.crt"))
                    .arg("--key")
                    .arg(self.dir.join("client.key"));
            }
        }
        if let Some(password) = self.password() {
            command.args(["--no-auth-warning", "-a", password]);
        }
        let output = command
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli (Debian/Ubuntu: apt-get install -y redis-tools)");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The server's clock (`TIME`), asked through `redis-cli`.
    pub fn time(&self) -> std::time::SystemTime {
        let reply = self.cli(&["TIME"]);
        let mut parts = reply.split_whitespace().map(|part| part.parse::<u64>());
        match (parts.next(), parts.next()) {
            (Some(Ok(seconds)), Some(Ok(micros))) => {
                std::time::UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_micros(micros)
            }
            _ => panic!("TIME answered {reply:?}"),
        }
    }

    /// Asserts that this server's clock is the test's: its `TIME`, asked between two
    /// readings of `SystemTime::now()`, falls between them. A test that judges "never
    /// early" by the clock its handlers read, against the due times it asked for, rests
    /// on this (the queue's clock is Redis's `TIME`).
    pub fn assert_same_clock(&self) {
        let before = std::time::SystemTime::now();
        let redis = self.time();
        let after = std::time::SystemTime::now();
        // `TIME` has microseconds; ours may have nanoseconds.
        let before = before - Duration::from_micros(1);
        assert!(
            before <= redis && redis <= after,
            "Redis on port {} reads another clock than this process: {redis:?} outside \
             [{before:?}, {after:?}]",
            self.port
        );
    }

    /// The process id answering, asked through `redis-cli` (which speaks TLS).
    fn cli_pid(&self) -> Option<u32> {
        let info = self.cli(&["INFO", "server"]);
        let rest = info.split("process_id:").nth(1)?;
        rest.lines().next()?.trim().parse().ok()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (`STOP`, `CONT`) to it, as `kill -<signal>`.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("a running redis-server");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
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

/// A CA and a certificate for `localhost` and `127.0.0.1` signed by it, in `dir`
/// (`ca.crt`, `server.crt`, `server.key`), made with `openssl`; P-256 keys, a day long.
pub fn make_certificates(dir: &std::path::Path) {
    make_ca(dir, "ca");
    make_server_certificate(dir);
}

/// `server.crt` and `server.key` for `localhost` and `127.0.0.1` in `dir`, signed by the
/// CA there (`ca.crt`, `ca.key`).
pub fn make_server_certificate(dir: &std::path::Path) {
    sign_certificate(
        dir,
        "ca",
        "server",
        "/CN=localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
    );
}

/// `<name>.crt` and `<name>.key` in `dir`: a client certificate (for TLS client
/// authentication, `CN=<name>`) signed by the CA `<ca>.crt`/`<ca>.key` there; P-256, a
/// day long, the key in PKCS#8 PEM.
pub fn make_client_certificate(dir: &std::path::Path, ca: &str, name: &str) {
    sign_certificate(
        dir,
        ca,
        name,
        &format!("/CN={name}"),
        "extendedKeyUsage=clientAuth",
    );
}

/// `<name>.crt` and `<name>.key` in `dir` (P-256, a day long, the key in PKCS#8 PEM) for
/// `subject`, with the one X.509 extension line `extension`, signed by the CA
/// `<ca>.crt`/`<ca>.key` there.
fn sign_certificate(dir: &std::path::Path, ca: &str, name: &str, subject: &str, extension: &str) {
    let ext = format!("{name}.ext");
    std::fs::write(dir.join(&ext), format!("{extension}\n")).unwrap();
    let (crt, key, csr) = (
        format!("{name}.crt"),
        format!("{name}.key"),
        format!("{name}.csr"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-subj",
            subject,
            "-out",
            &csr,
        ],
    );
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "1",
            "-sha256",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ],
    );
}

/// A self-signed CA in `dir`: `<name>.crt` and `<name>.key`.
pub fn make_ca(dir: &std::path::Path, name: &str) {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "1",
            "-subj",
            "/CN=tickless test CA",
        ],
    );
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl (Debian/Ubuntu: apt-get install -y openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
