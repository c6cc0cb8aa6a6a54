//! The handlers: pages, actions, login, metrics.

use super::html::{self, enc, Ctx};
use super::queue::QueueView;
use super::{metrics, same_token, State};
use axum::extract::{Form, NestedPath, Path, Query};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::{html, Markup};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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

/// The token this request carries: `Authorization: Bearer`, or the login cookie.
fn given_token(headers: &HeaderMap) -> Option<Vec<u8>> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(bearer.trim().as_bytes().to_vec());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| unhex(value))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn allowed(state: &State, headers: &HeaderMap) -> bool {
    match (&state.dashboard.token, given_token(headers)) {
        (Some(token), Some(given)) => state.actions && same_token(&given, token.as_bytes()),
        _ => false,
    }
}

fn ctx<'a>(
    state: &State,
    base: &'a Base,
    headers: &HeaderMap,
    message: Option<&'a str>,
) -> Ctx<'a> {
    Ctx {
        base: &base.0,
        actions: state.actions,
        logged_in: allowed(state, headers),
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

fn unknown_queue(ctx: &Ctx<'_>, name: &str) -> Response {
    error_page(
        StatusCode::NOT_FOUND,
        ctx,
        &format!("no queue {name:?} on this dashboard"),
    )
}

async fn overview(axum::extract::State(state): Shared, base: Base, headers: HeaderMap) -> Response {
    let ctx = ctx(&state, &base, &headers, None);
    let mut rows = Vec::new();
    for (i, queue) in state.dashboard.queues.iter().enumerate() {
        state.sample(i).await;
        rows.push((queue, queue.stats().await.map_err(|e| e.to_string())));
    }
    no_store(html::overview(&ctx, &rows)).into_response()
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
    let Some((i, queue)) = state.queue(&name) else {
        return unknown_queue(&ctx, &name);
    };
    state.sample(i).await;
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
        })
    };
    match view.await {
        Ok(view) => {
            let history = state.histories[i].lock().unwrap_or_else(|e| e.into_inner());
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
    let Some((_, queue)) = state.queue(&name) else {
        return unknown_queue(&ctx, &name);
    };
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
    let Some((_, queue)) = state.queue(&name) else {
        return unknown_queue(&ctx, &name);
    };
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
        message: None,
    };
    let good = match &state.dashboard.token {
        Some(token) => state.actions && same_token(given.as_bytes(), token.as_bytes()),
        None => false,
    };
    if !good {
        return error_page(StatusCode::FORBIDDEN, &ctx, "wrong access token");
    }
    let path = if base.0.is_empty() { "/" } else { &base.0 };
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path={path}",
        hex(given.as_bytes())
    );
    let mut response = Redirect::to(&ctx.home()).into_response();
    match HeaderValue::from_str(&cookie) {
        Ok(value) => {
            response.headers_mut().insert(header::SET_COOKIE, value);
            response
        }
        Err(_) => error_page(
            StatusCode::BAD_REQUEST,
            &ctx,
            "the mount path cannot be a cookie path",
        ),
    }
}

async fn metrics_text(axum::extract::State(state): Shared) -> Response {
    let text = metrics::render(&state.dashboard.queues).await;
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
    fn cookie_tokens_round_trip_through_hex() {
        assert_eq!(
            unhex(&hex(b"s3cret; =\xff")),
            Some(b"s3cret; =\xff".to_vec())
        );
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn tokens_come_from_bearer_or_cookie() {
        let mut headers = HeaderMap::new();
        assert_eq!(given_token(&headers), None);
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; tickless_dashboard=6869"),
        );
        assert_eq!(given_token(&headers), Some(b"hi".to_vec()));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer yo"));
        assert_eq!(given_token(&headers), Some(b"yo".to_vec()));
    }
}
