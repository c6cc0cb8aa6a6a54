//! The variants of the single-node suite: `TICKLESS_TEST_REDIS` names what every server
//! that [`RedisServer::start`](crate::RedisServer::start) (and `start_with_fsync`,
//! `start_with_args`) makes speaks and whom its [`url`](crate::RedisServer::url) names:
//!
//! - unset or empty: plain TCP, the default user (no password);
//! - `tls`: TLS only, with a server certificate signed by a CA the tests make in
//!   `SSL_CERT_DIR` (an empty directory: see [`variant_ca`]); the `redis` crate's rustls
//!   takes its roots from `rustls-native-certs`, which reads `SSL_CERT_DIR`, so a plain
//!   `Queue::connect` of a `rediss://` URL checks the certificate as in production (no
//!   `#insecure`);
//! - `acl`: README's `ACL SETUSER app ...` user, from an ACL file the server loads at
//!   every start (a restart keeps it, as a deployed server's ACL file does), and `url()`
//!   carries that user and password; `admin_url()` stays the default user, for the
//!   tests' own commands (`KEYS`, `DEBUG`, `CONFIG`, ...);
//! - `tls,acl`: both.
//!
//! Servers a test starts as TLS on purpose (`start_tls`), cluster nodes and
//! [`start_plain`](crate::RedisServer::start_plain) keep their own behaviour.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that picks the variant.
pub const VARIANT_VAR: &str = "TICKLESS_TEST_REDIS";

/// What a variant server is: see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Variant {
    pub tls: bool,
    pub acl: bool,
}

impl Variant {
    /// Plain TCP, the default user.
    pub const PLAIN: Variant = Variant {
        tls: false,
        acl: false,
    };

    /// The variant `TICKLESS_TEST_REDIS` names (read once); an unknown word fails the test.
    pub fn from_env() -> Variant {
        static VARIANT: OnceLock<Variant> = OnceLock::new();
        *VARIANT.get_or_init(|| {
            let value = std::env::var(VARIANT_VAR).unwrap_or_default();
            let mut variant = Variant::PLAIN;
            for word in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                match word {
                    "tls" => variant.tls = true,
                    "acl" => variant.acl = true,
                    other => panic!(
                        "{VARIANT_VAR}={value:?}: unknown variant {other:?} (known: tls, acl, \
                         or both as `tls,acl`)"
                    ),
                }
            }
            variant
        })
    }
}

/// README's ACL line: the arguments of `ACL SETUSER` after the user's name. The one
/// parser of that line (the ACL tests and the `acl` variant read it).
pub fn readme_acl() -> Vec<String> {
    readme_acl_line()
        .split_whitespace()
        .skip(3)
        .map(str::to_string)
        .collect()
}

/// README's ACL user's name and password (its `>password` rule).
pub fn readme_user() -> (String, String) {
    let line = readme_acl_line();
    let name = line.split_whitespace().nth(2).expect("the user's name");
    let password = readme_acl()
        .iter()
        .find_map(|rule| rule.strip_prefix('>').map(str::to_string))
        .expect("a `>password` rule in README.md's ACL line");
    (name.to_string(), password)
}

fn readme_acl_line() -> &'static str {
    include_str!("../../../durable/README.md")
        .lines()
        .find(|l| l.starts_with("ACL SETUSER app "))
        .expect("README.md's ACL line (`ACL SETUSER app ...`)")
}

/// Writes README's user as an ACL file (`user app <rules>`) in `dir`; its path.
pub fn write_acl_file(dir: &Path) -> PathBuf {
    let (name, _) = readme_user();
    let path = dir.join("users.acl");
    std::fs::write(&path, format!("user {name} {}\n", readme_acl().join(" ")))
        .expect("the ACL file");
    path
}

/// The name of the `tls` variant's CA in `SSL_CERT_DIR`: `<name>.crt` and `<name>.key`.
const CA_NAME: &str = "tickless-test-ca";

/// For the `tls` variant: the directory holding the CA (`tickless-test-ca.crt`, and its
/// key) that every variant server's certificate is signed by, made once per test process
/// in `SSL_CERT_DIR`. The `redis` crate's rustls trusts what `rustls-native-certs` finds
/// there, so a plain `Queue::connect` checks the server's certificate against this CA.
///
/// `SSL_CERT_DIR`, not `SSL_CERT_FILE`: cargo runs the tests with `SSL_CERT_FILE` replaced
/// by the system's bundle unless the file exists when it starts (openssl-probe), and the
/// tests make the CA later. The directory must exist and hold nothing but this CA (the
/// tests never write into a real certificate directory).
pub fn variant_ca() -> &'static Path {
    static CA: OnceLock<PathBuf> = OnceLock::new();
    CA.get_or_init(|| {
        let dir = std::env::var_os("SSL_CERT_DIR").map(PathBuf::from);
        let Some(dir) = dir.filter(|dir| dir.is_dir()) else {
            panic!(
                "{VARIANT_VAR}=tls needs SSL_CERT_DIR to name an empty directory where the                  tests make their CA (e.g. SSL_CERT_DIR=$(mktemp -d)): the client trusts the \
                 CAs there, so the server's certificate is checked"
            )
        };
        let others: Vec<_> = std::fs::read_dir(&dir)
            .expect("SSL_CERT_DIR")
            .map(|entry| entry.expect("SSL_CERT_DIR").file_name())
            .filter(|name| !name.to_string_lossy().starts_with(CA_NAME))
            .collect();
        assert!(
            others.is_empty(),
            "SSL_CERT_DIR={} holds other files ({others:?}): name an empty directory for the \
             tests' CA",
            dir.display()
        );
        crate::redis_server::make_ca(&dir, CA_NAME);
        dir
    })
}

/// Copies the `tls` variant's CA into `dir` (`ca.crt`, `ca.key`) and makes a server
/// certificate there signed by it (`server.crt`, `server.key`).
pub fn make_variant_certificates(dir: &Path) {
    let ca = variant_ca();
    for (from, to) in [("crt", "ca.crt"), ("key", "ca.key")] {
        std::fs::copy(ca.join(format!("{CA_NAME}.{from}")), dir.join(to)).expect("the CA");
    }
    crate::redis_server::make_server_certificate(dir);
}
