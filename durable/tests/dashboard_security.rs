//! The dashboard's locks, in a real browser and over plain sockets: a read-only
//! dashboard refuses every action even with the token and leaves Redis as it was (read
//! back whole with plain commands); the login refuses wrong tokens and sets no cookie
//! for them; the login cookie is `HttpOnly` and `SameSite=Strict`, so a script of the
//! page cannot read it and a form on another site cannot act with it; logging out drops
//! it. That the cookie holds a session, not the token, is `dashboard_session.rs`.
//!
//! The dashboard serves plain HTTP (TLS, where wanted, is a proxy's), so its cookie has
//! no `Secure` attribute unless the operator asks (`dashboard_session.rs` checks that). Escaping of hostile input is `dashboard_escaping.rs`.

mod browser;

use tickless_test_support as support;

use browser::{http, post, serve, Browser};
use redis::AsyncCommands;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use support::{at, RedisServer, T0};
use tickless_durable::dashboard::Dashboard;
use tickless_durable::{Queue, WorkerOptions};

const TOKEN: &str = "let-me-act";
const COOKIE: &str = "tickless_dashboard";
/// A queue named `name` on the manual clock at T0 with one job of each kind an action
/// works on: `waiting` (due in a minute: cancel, run now), `doomed` (dead: retry,
/// delete, retry all) and the recurring schedule `hourly` (remove).
async fn queue_with_one_of_each(server: &RedisServer, name: &str) -> Queue {
    let queue = Queue::connect(&server.url(), name).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    queue
        .with_max_attempts(1)
        .schedule("doomed", b"d", at(T0))
        .await
        .unwrap();
    let worker = queue.worker(WorkerOptions::default());
    let claimed = worker.try_claim(1).await.unwrap();
    assert_eq!(claimed.len(), 1, "doomed is ready at once");
    worker.fail(&claimed[0], "no").await.unwrap();
    queue
        .schedule("waiting", b"w", at(T0 + 60_000))
        .await
        .unwrap();
    queue
        .every("hourly", Duration::from_secs(3600), b"h")
        .await
        .unwrap();
    queue
}

/// Every key of the database and what it holds, read with plain Redis commands: its
/// type, its whole value in a canonical order, and whether it has a time to live.
async fn snapshot(admin: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, String> {
    let text = |bytes: &Vec<u8>| String::from_utf8_lossy(bytes).into_owned();
    let keys: Vec<String> = admin.keys("*").await.unwrap();
    let mut all = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(admin)
            .await
            .unwrap();
        let value = match kind.as_str() {
            "string" => format!("{:?}", text(&admin.get(&key).await.unwrap())),
            "hash" => {
                let fields: BTreeMap<Vec<u8>, Vec<u8>> = admin.hgetall(&key).await.unwrap();
                let fields: BTreeMap<String, String> =
                    fields.iter().map(|(f, v)| (text(f), text(v))).collect();
                format!("{fields:?}")
            }
            "list" => {
                let items: Vec<Vec<u8>> = admin.lrange(&key, 0, -1).await.unwrap();
                format!("{:?}", items.iter().map(text).collect::<Vec<_>>())
            }
            "set" => {
                let members: Vec<Vec<u8>> = admin.smembers(&key).await.unwrap();
                let mut members: Vec<String> = members.iter().map(text).collect();
                members.sort();
                format!("{members:?}")
            }
            "zset" => {
                let scored: Vec<(Vec<u8>, String)> =
                    admin.zrange_withscores(&key, 0, -1).await.unwrap();
                let scored: Vec<(String, &String)> =
                    scored.iter().map(|(m, score)| (text(m), score)).collect();
                format!("{scored:?}")
            }
            other => panic!("{key} is a {other}: the snapshot does not read those"),
        };
        let ttl: i64 = admin.pttl(&key).await.unwrap();
        all.insert(key, format!("{kind} {value} expires:{}", ttl >= 0));
    }
    all
}

/// The keys whose contents differ between two snapshots, each with both versions.
fn changes(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|key| before.get(*key) != after.get(*key))
        .map(|key| format!("{key}: {:?} -> {:?}", before.get(key), after.get(key)))
        .collect()
}

/// The `Set-Cookie` of a login with the right token at the dashboard under `base`
/// (`/ops`): the cookie's `name=value` and its attributes.
fn log_in(addr: &str, base: &str) -> (String, Vec<String>) {
    let reply = http(
        addr,
        &post(&format!("{base}/login"), "", &format!("token={TOKEN}")),
    );
    assert_eq!(reply.status, 303, "a login with the token: {}", reply.body);
    let cookies = reply.header("set-cookie");
    assert_eq!(cookies.len(), 1, "one cookie: {:?}", reply.headers);
    let mut parts = cookies[0].split(';').map(|p| p.trim().to_string());
    let pair = parts.next().unwrap();
    assert!(pair.starts_with(&format!("{COOKIE}=")), "{pair}");
    (pair, parts.collect())
}

/// The forms of the page shown that post (actions, the login), as `action` URLs.
fn post_forms(browser: &mut Browser) -> Value {
    browser.eval(
        "[...document.querySelectorAll('form')].filter(f => f.method === 'post')\
         .map(f => f.getAttribute('action'))",
    )
}

#[test]
fn read_only_refuses_every_action_even_with_the_token_and_changes_nothing_in_redis() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (addr, mut admin) = runtime.block_on(async {
        let queue = queue_with_one_of_each(&server, "ro").await;
        let app = axum::Router::new().nest(
            "/ops",
            Dashboard::new([queue])
                .action_token(TOKEN)
                .read_only(true)
                .sample_every(Duration::from_millis(100))
                .router(),
        );
        (serve(app).await, server.admin().await)
    });
    let before = runtime.block_on(snapshot(&mut admin));
    assert!(
        before.contains_key("tickless:{ro}:dead") && before.contains_key("tickless:{ro}:recur"),
        "{before:#?}"
    );
    let base = format!("http://{addr}/ops");

    // The read-only dashboard takes a login (it shows payloads and job errors to those
    // with the token), but its session acts no more than the token does.
    let (cookie, _) = log_in(&addr, "/ops");

    let forms = [
        "action=cancel&id=waiting",
        "action=run-now&id=waiting",
        "action=retry&id=doomed",
        "action=cancel&id=doomed",
        "action=retry-all",
        "action=unschedule&id=hourly",
    ];
    let auths = [
        format!("Authorization: Bearer {TOKEN}\r\n"),
        format!("Cookie: {cookie}\r\n"),
    ];
    for auth in &auths {
        for form in forms {
            let reply = http(&addr, &post("/ops/queue/ro/action", auth, form));
            assert_eq!(reply.status, 403, "{form} with {auth:?}: {}", reply.body);
            assert!(
                reply.body.contains("this dashboard is read-only"),
                "{}",
                reply.body
            );
        }
    }

    // In the browser, with that session's cookie: no action button (only "Log out"), no
    // login form, "Read-only."; forms it forges itself are refused.
    let mut browser = Browser::launch();
    browser.open(&format!("{base}/queue/ro"));
    let (name, value) = cookie.split_once('=').unwrap();
    browser.call(
        "Network.setCookie",
        json!({ "name": name, "value": value, "url": base, "path": "/ops", "httpOnly": true }),
    );
    assert_eq!(browser.cookies(&base).len(), 1);
    for page in [
        "/queue/ro",
        "/queue/ro/job?id=waiting",
        "/queue/ro/job?id=doomed",
    ] {
        browser.open(&format!("{base}{page}"));
        assert_eq!(post_forms(&mut browser), json!(["/ops/logout"]), "{page}");
        assert_eq!(
            browser.eval("document.querySelectorAll('#login, input[type=password]').length"),
            json!(0),
            "{page}"
        );
        assert_eq!(
            browser.eval("document.body.innerText.includes('Read-only.')"),
            json!(true),
            "{page}"
        );
    }
    for form in forms {
        let fields: Vec<(&str, &str)> = form
            .split('&')
            .map(|pair| pair.split_once('=').unwrap())
            .collect();
        browser.post_form(&format!("{base}/queue/ro/action"), &fields);
        assert_eq!(
            browser.text("#error"),
            "this dashboard is read-only",
            "{form}"
        );
    }

    let after = runtime.block_on(snapshot(&mut admin));
    let changed = changes(&before, &after);
    assert!(
        changed.is_empty(),
        "a read-only dashboard changed Redis:\n{}",
        changed.join("\n")
    );
}

#[test]
fn login_refuses_wrong_tokens_and_its_cookie_is_http_only_and_same_site_strict() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (addr, mut admin) = runtime.block_on(async {
        let queue = queue_with_one_of_each(&server, "login").await;
        let dashboard = Dashboard::new([queue]).action_token(TOKEN).router();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Another site's page (served as `localhost`, where the dashboard is
        // `127.0.0.1`: two sites to a browser) with a form that would cancel `waiting`.
        let forged = format!(
            "<!DOCTYPE html><title>forged</title><form id=forged method=post \
             action=\"http://{addr}/ops/queue/login/action\"><input type=hidden name=action \
             value=cancel><input type=hidden name=id value=waiting></form>"
        );
        let app = axum::Router::new().nest("/ops", dashboard).route(
            "/forged",
            axum::routing::get(move || async move { axum::response::Html(forged) }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr.to_string(), server.admin().await)
    });
    let base = format!("http://{addr}/ops");
    let waiting = |admin: &mut redis::aio::MultiplexedConnection| -> bool {
        runtime
            .block_on(admin.hexists("tickless:{login}:jobs", "waiting"))
            .unwrap()
    };

    // Wrong tokens, each close to the right one: refused, and no cookie.
    for wrong in [
        "",
        "let-me-ac",
        "let-me-actx",
        "let-me-acu",
        "LET-ME-ACT",
        " let-me-act",
    ] {
        let form = format!("token={}", browser::enc(wrong));
        let reply = http(&addr, &post("/ops/login", "", &form));
        assert_eq!(reply.status, 403, "{wrong:?}: {}", reply.body);
        assert!(reply.body.contains("wrong access token"), "{}", reply.body);
        assert!(
            reply.header("set-cookie").is_empty(),
            "{wrong:?}: {:?}",
            reply.headers
        );
    }
    // The right one: the cookie's attributes, as sent.
    let (_, attributes) = log_in(&addr, "/ops");
    for wanted in ["HttpOnly", "SameSite=Strict", "Path=/ops"] {
        assert!(
            attributes.iter().any(|a| a.eq_ignore_ascii_case(wanted)),
            "{wanted} in {attributes:?}"
        );
    }

    // In the browser: a wrong token at the login form, then the right one.
    let mut browser = Browser::launch();
    let fill = |token: &str| {
        format!(
            "document.getElementById('token').value = {}; document.getElementById('login').submit()",
            json!(token)
        )
    };
    browser.open(&format!("{base}/queue/login/job?id=waiting"));
    browser.submit(&fill("let-me-ac"));
    assert_eq!(browser.text("#error"), "wrong access token");
    assert_eq!(browser.cookies(&base), Vec::<Value>::new());
    browser.open(&format!("{base}/queue/login/job?id=waiting"));
    assert_eq!(
        post_forms(&mut browser),
        json!(["/ops/login"]),
        "no buttons"
    );
    browser.submit(&fill(TOKEN));
    let cookies = browser.cookies(&base);
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    let cookie = &cookies[0];
    assert_eq!(cookie["name"], json!(COOKIE), "{cookie}");
    assert_eq!(cookie["httpOnly"], json!(true), "{cookie}");
    assert_eq!(cookie["sameSite"], json!("Strict"), "{cookie}");
    assert_eq!(cookie["path"], json!("/ops"), "{cookie}");
    browser.open(&format!("{base}/queue/login/job?id=waiting"));
    assert_eq!(
        browser.eval("document.cookie"),
        json!(""),
        "a script of the page reads the login cookie"
    );
    let forms = post_forms(&mut browser);
    let (logout, actions) = forms.as_array().unwrap().split_last().unwrap();
    assert!(
        actions.len() >= 2
            && actions.iter().all(|f| f == "/ops/queue/login/action")
            && logout == "/ops/logout",
        "logged in: the job's buttons, no login form, a logout: {forms}"
    );

    // The forged form, from the other site: the cookie stays home, the action is
    // refused, the job is still there.
    let other_site = addr.replace("127.0.0.1", "localhost");
    browser.open(&format!("http://{other_site}/forged"));
    browser.submit("document.getElementById('forged').submit()");
    assert!(
        waiting(&mut admin),
        "a form of another site cancelled a job"
    );
    assert_eq!(browser.text("#error"), "actions need the access token");
    // The same form from the dashboard's own site carries the cookie and acts: what
    // stopped it above was the other site, not the form.
    browser.open(&format!("http://{addr}/forged"));
    browser.submit("document.getElementById('forged').submit()");
    assert_eq!(browser.text("#msg"), "cancelled \"waiting\"");
    assert!(!waiting(&mut admin), "the same site's form did not act");

    // Logging out: the browser drops the cookie and is offered the login again.
    browser.open(&format!("{base}/queue/login"));
    browser.submit("document.querySelector('#logout button').click()");
    assert_eq!(browser.cookies(&base), Vec::<Value>::new());
    assert_eq!(post_forms(&mut browser), json!(["/ops/login"]));
}
