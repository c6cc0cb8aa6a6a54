//! What errors say: each names what is wrong and what to do about it, in words of this
//! crate (never a `redis` crate variant name), and never shows a password.

use tickless_test_support as support;

use support::RedisServer;
use tickless_durable::{Error, Queue};

const SECRET: &str = "S3cretPw";

/// The forms every URL error shows.
const FORMS: &str = "expected redis://[user:password@]host[:port][/db], rediss://... for TLS, \
                     or redis+unix:///path/to/socket[?db=N&user=U&pass=P]";

/// `err`'s message: no variant name of the `redis` crate, no secret.
fn plain_message(err: &Error) -> String {
    let shown = err.to_string();
    for leak in ["InvalidClientConfig", "AuthenticationFailed", "- ", SECRET] {
        assert!(!shown.contains(leak), "{leak:?} in {shown}");
    }
    shown
}

#[tokio::test]
async fn a_bad_url_says_what_is_wrong_and_shows_the_expected_form() {
    let cases = [
        ("127.0.0.1:6379", "it has no scheme"),
        ("localhost", "it has no scheme"),
        ("http://127.0.0.1:6379/", "its scheme is http://"),
        (
            "redis://127.0.0.1:99999/",
            "port \"99999\" is not a number from 0 to 65535",
        ),
        (
            "redis://app:S3cretPw@127.0.0.1:port/",
            "port \"port\" is not a number from 0 to 65535",
        ),
        ("redis://127.0.0.1/x", "invalid database number"),
        ("redis+unix://", "missing path"),
        ("rediss://127.0.0.1/#verify", "only #insecure is supported"),
    ];
    for (url, fault) in cases {
        let err = Queue::connect(url, "q").await.unwrap_err();
        assert!(err.is_invalid_url(), "{url}: {err}");
        let shown = plain_message(&err);
        assert!(shown.contains(fault), "{url}: {shown}");
        assert!(shown.ends_with(FORMS), "{url}: {shown}");
    }
    // The URL is quoted with its password hidden.
    let err = Queue::connect("redis://app:S3cretPw@127.0.0.1:99999/", "q")
        .await
        .unwrap_err();
    let shown = plain_message(&err);
    assert!(
        shown.contains("\"redis://app:***@127.0.0.1:99999/\""),
        "{shown}"
    );
}

/// A server of the test's own whose default user has password `SECRET` (set once it
/// runs: the support's start checks it with a `PING` without one).
async fn server_with_password() -> RedisServer {
    let server = RedisServer::start_plain(&[]);
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", SECRET])
        .query_async(&mut server.admin().await)
        .await
        .unwrap();
    server
}

#[tokio::test]
async fn a_refused_password_says_so_in_words() {
    let server = server_with_password().await;
    let plain = RedisServer::start_plain(&[]);
    for url in [
        server.url_as("", "wrong"),
        server.url_as("nobody", SECRET),
        // A password sent to a server that has none: Redis refuses it as a wrong one.
        plain.url_as("", SECRET),
    ] {
        let err = Queue::connect(&url, "q").await.unwrap_err();
        assert!(err.is_connect(), "{err}");
        let shown = plain_message(&err);
        assert!(
            shown.contains("the server refused the user or password in the URL"),
            "{shown}"
        );
    }
    assert!(Queue::connect(&server.url_as("", SECRET), "q")
        .await
        .is_ok());
}

#[tokio::test]
async fn a_missing_password_says_where_it_goes() {
    let server = server_with_password().await;
    let err = Queue::connect(&server.admin_url(), "q").await.unwrap_err();
    assert!(err.is_connect(), "{err}");
    let shown = plain_message(&err);
    assert!(
        shown.contains(
            "the server asks for a password and the URL has none: redis://:password@host:port/"
        ),
        "{shown}"
    );
}

#[tokio::test]
async fn debug_shows_the_message_and_alternate_debug_the_details() {
    let err = Queue::connect("http://127.0.0.1/", "q").await.unwrap_err();
    // What `fn main() -> Result<(), Error>` prints after "Error: ".
    assert_eq!(format!("{err:?}"), err.to_string());
    let details = format!("{err:#?}");
    assert!(
        details.starts_with("Error {") && details.contains("kind: InvalidUrl"),
        "{details}"
    );
}

#[cfg(feature = "cold")]
#[test]
fn a_cold_tier_on_a_file_says_it_is_not_a_directory() {
    let file = std::env::temp_dir().join(format!("tickless-cold-file-{}", std::process::id()));
    std::fs::write(&file, b"").unwrap();
    let err = tickless_durable::ColdTier::local(&file).unwrap_err();
    let _ = std::fs::remove_file(&file);
    assert!(err.is_store(), "{err}");
    assert!(
        err.to_string().ends_with("it is a file, not a directory"),
        "{err}"
    );
}
