//! The dashboard's session and what it shows without one, through the router in-process:
//! the login cookie holds a random session id, never the token; logging out ends the
//! session on the server, so the old cookie no longer reads or acts; `Bearer` still
//! works for scripts; payloads and job errors need the token unless `public_read`.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use tickless_durable::dashboard::Dashboard;
use tickless_durable::{Queue, WorkerOptions};
use tickless_test_support as support;
use tickless_test_support::{at, T0};
use tower::ServiceExt as _;

const TOKEN: &str = "let-me-act";
const COOKIE: &str = "tickless_dashboard";
const PAYLOAD: &str = "card 4242-4242";
const ERROR: &str = "declined for alice@example.com";
/// A queue on the manual clock with one dead job, `doomed`, whose payload and last error
/// are data: `PAYLOAD`, `ERROR`.
async fn queue_with_a_dead_job(server: &support::RedisServer, test: &str) -> Queue {
    let queue = Queue::connect(&server.url(), &support::queue_name(test))
        .await
        .unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    queue
        .with_max_attempts(1)
        .schedule("doomed", PAYLOAD.as_bytes(), at(T0))
        .await
        .unwrap();
    let worker = queue.worker(WorkerOptions::default());
    let claimed = worker.try_claim(1).await.unwrap();
    assert_eq!(claimed.len(), 1, "doomed is ready at once");
    worker.fail(&claimed[0], ERROR).await.unwrap();
    queue
}

struct Reply {
    status: StatusCode,
    set_cookie: Vec<String>,
    body: String,
}

/// `method uri` through `app` with `headers` and a form `body`.
async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if method == "POST" {
        request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let set_cookie = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let body = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .unwrap();
    Reply {
        status,
        set_cookie,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// Logs in at `/ops` with the token: the cookie's `name=value` and its attributes.
async fn log_in(app: &Router) -> (String, String) {
    let reply = call(app, "POST", "/ops/login", &[], &format!("token={TOKEN}")).await;
    assert_eq!(reply.status, 303, "a login with the token: {}", reply.body);
    assert_eq!(reply.set_cookie.len(), 1, "one cookie");
    let (pair, attributes) = reply.set_cookie[0].split_once(';').unwrap();
    (pair.to_string(), attributes.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `page` shows the job's data: its error (on a job's page and in the queue's
/// dead list), and on a job's page its payload alike.
fn shows_data(page: &str) -> bool {
    let error = page.contains(ERROR);
    if page.contains("<h2>Payload (") {
        assert_eq!(
            page.contains(PAYLOAD),
            error,
            "payload and error alike:\n{page}"
        );
    }
    error
}

#[tokio::test]
async fn the_login_cookie_holds_a_session_not_the_token_and_logout_ends_it() {
    let server = support::RedisServer::start();
    let queue = queue_with_a_dead_job(&server, "session").await;
    let name = queue.name().to_string();
    let app = Router::new().nest("/ops", Dashboard::new([queue]).action_token(TOKEN).router());
    let job = format!("/ops/queue/{name}/job?id=doomed");

    let (pair, attributes) = log_in(&app).await;
    let value = pair.strip_prefix(&format!("{COOKIE}=")).unwrap();
    assert!(
        !value.contains(TOKEN) && !value.contains(&hex(TOKEN.as_bytes())),
        "the cookie carries the token: {pair}"
    );
    assert!(
        value.len() == 64 && value.bytes().all(|c| c.is_ascii_hexdigit()),
        "a session id of 32 random bytes: {value:?}"
    );
    assert_eq!(attributes.trim(), "HttpOnly; SameSite=Strict; Path=/ops");
    let (other, _) = log_in(&app).await;
    assert_ne!(pair, other, "two logins, one session id");

    // The session reads and acts.
    let cookie = [("cookie", pair.as_str())];
    let page = call(&app, "GET", &job, &cookie, "").await;
    assert!(shows_data(&page.body), "{}", page.body);
    assert!(page.body.contains("id=\"logout\""), "{}", page.body);

    // Logging out ends it on the server, not only in this browser: the same cookie
    // sent again neither reads nor acts. The other session stays.
    let out = call(&app, "POST", "/ops/logout", &cookie, "").await;
    assert_eq!(out.status, 303, "{}", out.body);
    assert_eq!(
        out.set_cookie,
        vec![format!(
            "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/ops; Max-Age=0"
        )]
    );
    let page = call(&app, "GET", &job, &cookie, "").await;
    assert!(!shows_data(&page.body), "{}", page.body);
    assert!(page.body.contains("id=\"login\""), "{}", page.body);
    let act = call(
        &app,
        "POST",
        &format!("/ops/queue/{name}/action"),
        &cookie,
        "action=retry&id=doomed",
    )
    .await;
    assert_eq!(act.status, 403, "{}", act.body);
    assert!(
        act.body.contains("actions need the access token"),
        "{}",
        act.body
    );
    let page = call(&app, "GET", &job, &[("cookie", other.as_str())], "").await;
    assert!(shows_data(&page.body), "the other session ended too");

    // A cookie that holds the token (hex, as it once did) is no session.
    let forged = format!("{COOKIE}={}", hex(TOKEN.as_bytes()));
    let page = call(&app, "GET", &job, &[("cookie", forged.as_str())], "").await;
    assert!(!shows_data(&page.body), "{}", page.body);

    // A script's `Bearer` still reads and acts; a wrong one does neither.
    let bearer = format!("Bearer {TOKEN}");
    let page = call(&app, "GET", &job, &[("authorization", bearer.as_str())], "").await;
    assert!(shows_data(&page.body), "{}", page.body);
    let page = call(
        &app,
        "GET",
        &job,
        &[("authorization", "Bearer let-me-acu")],
        "",
    )
    .await;
    assert!(!shows_data(&page.body), "{}", page.body);
    let act = call(
        &app,
        "POST",
        &format!("/ops/queue/{name}/action"),
        &[("authorization", bearer.as_str())],
        "action=retry&id=doomed",
    )
    .await;
    assert_eq!(act.status, 303, "{}", act.body);
}

#[tokio::test]
async fn a_secure_cookie_is_marked_secure() {
    let server = support::RedisServer::start();
    let queue = queue_with_a_dead_job(&server, "secure").await;
    let app = Router::new().nest(
        "/ops",
        Dashboard::new([queue])
            .action_token(TOKEN)
            .secure_cookie(true)
            .router(),
    );
    let (_, attributes) = log_in(&app).await;
    assert_eq!(
        attributes.trim(),
        "HttpOnly; SameSite=Strict; Path=/ops; Secure"
    );
}

/// What a case is called, its dashboard, the request's headers, whether data shows.
type Case<'a> = (&'a str, Dashboard, &'a [(&'a str, &'a str)], bool);

#[tokio::test]
async fn payloads_and_job_errors_need_the_token_unless_public_read() {
    let server = support::RedisServer::start();
    let queue = queue_with_a_dead_job(&server, "public-read").await;
    let name = queue.name().to_string();
    let pages = [
        format!("/queue/{name}/job?id=doomed"),
        format!("/queue/{name}"),
    ];
    let bearer = format!("Bearer {TOKEN}");
    let with_token = [("authorization", bearer.as_str())];
    let cases: [Case; 6] = [
        (
            "a token, none given",
            Dashboard::new([queue.clone()]).action_token(TOKEN),
            &[],
            false,
        ),
        (
            "a token, given",
            Dashboard::new([queue.clone()]).action_token(TOKEN),
            &with_token,
            true,
        ),
        (
            "a token, read-only, given",
            Dashboard::new([queue.clone()])
                .action_token(TOKEN)
                .read_only(true),
            &with_token,
            true,
        ),
        (
            "no token",
            Dashboard::new([queue.clone()]),
            &with_token,
            false,
        ),
        (
            "no token, public read",
            Dashboard::new([queue.clone()]).public_read(true),
            &[],
            true,
        ),
        (
            "a token, public read, none given",
            Dashboard::new([queue.clone()])
                .action_token(TOKEN)
                .public_read(true),
            &[],
            true,
        ),
    ];
    for (case, dashboard, headers, shown) in cases {
        let app = dashboard.router();
        for page in &pages {
            let reply = call(&app, "GET", page, headers, "").await;
            assert_eq!(reply.status, 200, "{case} {page}: {}", reply.body);
            assert!(
                reply.body.contains("doomed"),
                "{case} {page}: {}",
                reply.body
            );
            assert_eq!(
                shows_data(&reply.body),
                shown,
                "{case} {page}: {}",
                reply.body
            );
            if !shown {
                assert!(
                    reply.body.contains("hidden: "),
                    "{case} {page}: {}",
                    reply.body
                );
            }
        }
    }
}
