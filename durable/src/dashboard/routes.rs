//! The handlers: pages, actions, login, metrics.

use super::html::{self, enc, Ctx};
use super::queue::QueueView;
use super::{metrics, same_token, tokens, State, LOOK_INDEX};
use axum::extract::{Form, NestedPath, Path, Query};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::{html, Markup};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

type Shared = axum::extract::State<Arc<State>>;
type Params = HashMap<String, String>;

const COOKIE: &str = "tickless_dashboard";
const LIST: usize = 50;

pub(super) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/queue/{name}", get(queue_page))
        .route("/queue/{name}/job", get(job_page))
        .route("/queue/{name}/action", post(action))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// Where the router is mounted: "" at the root, "/jobs" under `nest("/jobs", ...)`.
struct Base(String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Base, Self::Rejection> {
        let path = parts
            .extensions
            .get::<NestedPath>()
            .map_or("", |p| p.as_str());
        Ok(Base(path.trim_end_matches('/').to_string()))
    }
}

/// The token of `Authorization: Bearer <token>`, if the request has one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// The session id of the login cookie, if the request has one.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Whether the request proves it has the token: by `Authorization: Bearer`, or by the
/// cookie of an open session (which then counts as used now). Never without a token set.
fn signed_in(state: &State, headers: &HeaderMap) -> bool {
    let Some(token) = &state.dashboard.token else {
        return false;
    };
    if let Some(given) = bearer(headers) {
        return same_token(given.as_bytes(), token.as_bytes());
    }
    session_cookie(headers).is_some_and(|id| state.sessions.check(id, Instant::now()))
}

/// The `Set-Cookie` value for `value` at the mount path; `extra` is appended as it is.
fn cookie(state: &State, base: &Base, value: &str, extra: &str) -> Option<HeaderValue> {
    let path = if base.0.is_empty() { "/" } else { &base.0 };
    let secure = if state.dashboard.secure_cookie {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path={path}{secure}{extra}"
    ))
    .ok()
}

fn ctx<'a>(
    state: &State,
    base: &'a Base,
    headers: &HeaderMap,
    message: Option<&'a str>,
) -> Ctx<'a> {
    let logged_in = signed_in(state, headers);
    Ctx {
        base: &base.0,
        actions: state.actions,
        logged_in,
        login: state.dashboard.token.is_some(),
        readable: logged_in || state.dashboard.public_read,
        message,
    }
}

fn error_page(status: StatusCode, ctx: &Ctx<'_>, message: &str) -> Response {
    let body = html! {
        h1 { (status) }
        p id="error" { (message) }
    };
    (status, no_store(html::page(ctx, "error", body))).into_response()
}

/// Pages show live numbers: never cached.
fn no_store(page: Markup) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "no-store")],
        Html(page.into_string()),
    )
}

fn unknown_queue(state: &State, ctx: &Ctx<'_>, name: &str) -> Response {
    let message = if state.dashboard.every_queue.is_some() {
        format!(
            "no queue {name:?} on this server (a queue is there once a job was scheduled on it)"
        )
    } else {
        format!("no queue {name:?} on this dashboard")
    };
    error_page(StatusCode::NOT_FOUND, ctx, &message)
}

async fn overview(axum::extract::State(state): Shared, base: Base, headers: HeaderMap) -> Response {
    let ctx = ctx(&state, &base, &headers, None);
    state.look_again(LOOK_INDEX).await;
    let shown = state.shown();
    let mut rows = Vec::new();
    for s in &shown {
        state.sample(s).await;
        rows.push((&s.queue, s.queue.stats().await.map_err(|e| e.to_string())));
    }
    let looks = state.dashboard.every_queue.is_some();
    let api_tokens = (state.dashboard.api_tokens.as_ref())
        .map(|uses| tokens::section(SystemTime::now(), uses()));
    no_store(html::overview(
        &ctx,
        &rows,
        looks,
        &state.problems(),
        api_tokens,
    ))
    .into_response()
}

async fn queue_page(
    axum::extract::State(state): Shared,
    base: Base,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Response {
    let ctx = ctx(
        &state,
        &base,
        &headers,
        params.get("msg").map(String::as_str),
    );
    let Some(shown) = state.queue(&name).await else {
        return unknown_queue(&state, &ctx, &name);
    };
    state.sample(&shown).await;
    let queue = &shown.queue;
    let dead_from: usize = params
        .get("dead_from")
        .and_then(|from| from.parse().ok())
        .unwrap_or(0);
    let view = async {
        let stats = queue.stats().await?;
        let (buckets, truncated) = queue.due_buckets().await?;
        let counters = queue.counters().await.ok();
        Ok::<_, crate::Error>(QueueView {
            queue,
            stats,
            buckets,
            truncated,
            ready: queue.ready_ids(LIST).await?,
            in_flight: queue.in_flight_ids(LIST).await?,
            dead: queue.dead(dead_from, LIST).await?,
            dead_from,
            dead_page: LIST,
            schedules: queue.schedules().await.map_err(|err| err.to_string()),
            script_errors: counters.as_ref().map_or((0, None), |c| {
                (c.script_errors, c.last_script_error.clone())
            }),
            leader_failing: counters.map_or((0, None), |c| (c.leader_failing, c.leader_error)),
            cold: queue.cold_windows().await?,
            stream: queue.stream_info().await.map_err(|err| err.to_string()),
            webhook: state
                .dashboard
                .webhooks
                .as_ref()
                .and_then(|view| view(queue.name())),
        })
    };
    match view.await {
        Ok(view) => {
            let history = shown.history.lock().unwrap_or_else(|e| e.into_inner());
            no_store(super::queue::queue_page(&ctx, &view, &history)).into_response()
        }
        Err(err) => error_page(StatusCode::BAD_GATEWAY, &ctx, &err.to_string()),
    }
}

async fn job_page(
    axum::extract::State(state): Shared,
    base: Base,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Response {
    let ctx = ctx(
        &state,
        &base,
        &headers,
        params.get("msg").map(String::as_str),
    );
    let Some(shown) = state.queue(&name).await else {
        return unknown_queue(&state, &ctx, &name);
    };
    let queue = &shown.queue;
    let id = params.get("id").map(String::as_str).unwrap_or("");
    let found = async { Ok::<_, crate::Error>((queue.now().await?, queue.job(id).await?)) };
    match found.await {
        Ok((now, info)) => {
            no_store(super::job::job_page(&ctx, queue, now, id, info.as_ref())).into_response()
        }
        Err(err) if err.is_invalid_id() => {
            error_page(StatusCode::BAD_REQUEST, &ctx, &err.to_string())
        }
        Err(err) => error_page(StatusCode::BAD_GATEWAY, &ctx, &err.to_string()),
    }
}

async fn action(
    axum::extract::State(state): Shared,
    base: Base,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<Params>,
) -> Response {
    let ctx = ctx(&state, &base, &headers, None);
    if !state.actions {
        return error_page(StatusCode::FORBIDDEN, &ctx, "this dashboard is read-only");
    }
    if !ctx.logged_in {
        return error_page(StatusCode::FORBIDDEN, &ctx, "actions need the access token");
    }
    let Some(shown) = state.queue(&name).await else {
        return unknown_queue(&state, &ctx, &name);
    };
    let queue = &shown.queue;
    let id = form.get("id").map(String::as_str).unwrap_or("");
    let kind = form.get("action").map(String::as_str).unwrap_or("");
    let done = match kind {
        "cancel" => queue.cancel(id).await.map(|found| {
            if found {
                format!("cancelled {id:?}")
            } else {
                format!("no job {id:?}")
            }
        }),
        "run-now" => queue.reschedule(id, Duration::ZERO).await.map(|moved| {
            if moved {
                format!("{id:?} is due now")
            } else {
                format!("{id:?} is not waiting (in flight, dead or gone)")
            }
        }),
        "retry" => queue.retry_dead(id).await.map(|retried| {
            if retried {
                format!("retrying {id:?}")
            } else {
                format!("{id:?} is not dead")
            }
        }),
        "unschedule" => queue.unschedule(id).await.map(|found| {
            if found {
                format!("removed the recurring schedule {id:?}")
            } else {
                format!("no recurring schedule {id:?}")
            }
        }),
        "retry-all" => queue
            .retry_all_dead()
            .await
            .map(|n| format!("retrying {n} dead jobs")),
        other => {
            return error_page(
                StatusCode::BAD_REQUEST,
                &ctx,
                &format!("unknown action {other:?}"),
            );
        }
    };
    match done {
        Ok(message) => {
            let back = if matches!(kind, "retry-all" | "cancel" | "unschedule") {
                ctx.queue_url(&name)
            } else {
                ctx.job_url(&name, id)
            };
            let sep = if back.contains('?') { '&' } else { '?' };
            Redirect::to(&format!("{back}{sep}msg={}", enc(&message))).into_response()
        }
        Err(err) if err.is_invalid_id() => {
            error_page(StatusCode::BAD_REQUEST, &ctx, &err.to_string())
        }
        Err(err) => error_page(StatusCode::BAD_GATEWAY, &ctx, &err.to_string()),
    }
}

/// Opens a session for the right token: its id goes in the cookie, the token nowhere.
async fn login(
    axum::extract::State(state): Shared,
    base: Base,
    Form(form): Form<Params>,
) -> Response {
    let given = form.get("token").map(String::as_str).unwrap_or("");
    let ctx = Ctx {
        base: &base.0,
        actions: state.actions,
        logged_in: false,
        login: state.dashboard.token.is_some(),
        readable: state.dashboard.public_read,
        message: None,
    };
    let good = match &state.dashboard.token {
        Some(token) => same_token(given.as_bytes(), token.as_bytes()),
        None => false,
    };
    if !good {
        return error_page(StatusCode::FORBIDDEN, &ctx, "wrong access token");
    }
    if cookie(&state, &base, "", "").is_none() {
        return error_page(
            StatusCode::BAD_REQUEST,
            &ctx,
            "the mount path cannot be a cookie path",
        );
    }
    let Some(id) = state.sessions.open(Instant::now()) else {
        return error_page(
            StatusCode::SERVICE_UNAVAILABLE,
            &ctx,
            "no randomness for a session id",
        );
    };
    let mut response = Redirect::to(&ctx.home()).into_response();
    if let Some(value) = cookie(&state, &base, &id, "") {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Ends this browser's session on the server and clears its cookie.
async fn logout(axum::extract::State(state): Shared, base: Base, headers: HeaderMap) -> Response {
    if let Some(id) = session_cookie(&headers) {
        state.sessions.close(id);
    }
    let home = if base.0.is_empty() { "/" } else { &base.0 };
    let mut response = Redirect::to(home).into_response();
    if let Some(value) = cookie(&state, &base, "", "; Max-Age=0") {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

async fn metrics_text(axum::extract::State(state): Shared) -> Response {
    state.look_again(LOOK_INDEX).await;
    let queues: Vec<_> = state.shown().iter().map(|s| s.queue.clone()).collect();
    let text = metrics::render(&queues).await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_and_session_come_from_their_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!((bearer(&headers), session_cookie(&headers)), (None, None));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; tickless_dashboard=6869"),
        );
        assert_eq!(session_cookie(&headers), Some("6869"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer yo"));
        assert_eq!(bearer(&headers), Some("yo"));
    }
}
