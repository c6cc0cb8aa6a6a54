//! The API's request figures taken around every routed request: a `tower` layer of our
//! own, not `axum::middleware::from_fn`, whose every call clones the boxed inner service
//! and boxes the handler's future (with it and the `/metrics` layer, ~5 % of `serve`'s
//! CPU samples under load went to that: BENCHMARKS.md, "The HTTP API, third pass").

use super::metrics::{self, ApiMetrics};
use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

/// Counts each request it wraps by operation and status, and times it:
/// [`ApiMetrics::record`] once the answer's head is ready.
#[derive(Clone)]
pub(super) struct Track(pub(super) ApiMetrics);

impl<S> tower_layer::Layer<S> for Track {
    type Service = Tracked<S>;

    fn layer(&self, inner: S) -> Tracked<S> {
        Tracked {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// A route's service inside [`Track`].
#[derive(Clone)]
pub(super) struct Tracked<S> {
    inner: S,
    metrics: ApiMetrics,
}

/// The name of a request's token, once [`Caller`](super::routes::Caller) found it valid:
/// so that [`Track`] counts the request for that token, by status too.
#[derive(Clone, Default)]
pub(super) struct TokenName(pub(super) Arc<OnceLock<Arc<str>>>);

impl<S> tower_service::Service<Request> for Tracked<S>
where
    S: tower_service::Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> TrackedFuture<S::Future> {
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or("", |path| path.as_str());
        let operation = metrics::operation(request.method().as_str(), route);
        let token = TokenName::default();
        request.extensions_mut().insert(token.clone());
        TrackedFuture {
            inner: self.inner.call(request),
            record: Some(Record {
                metrics: self.metrics.clone(),
                operation,
                started: Instant::now(),
                token,
            }),
        }
    }
}

/// What [`TrackedFuture`] records once its answer is ready.
struct Record {
    metrics: ApiMetrics,
    operation: &'static str,
    started: Instant,
    token: TokenName,
}

pin_project_lite::pin_project! {
    /// A routed request's answer, recorded when it is ready.
    pub(super) struct TrackedFuture<F> {
        #[pin]
        inner: F,
        record: Option<Record>,
    }
}

impl<F, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = std::task::ready!(this.inner.poll(cx));
        if let (Ok(response), Some(record)) = (&answer, this.record.take()) {
            record.metrics.record(
                record.operation,
                response.status().as_u16(),
                record.started.elapsed(),
                record.token.0.get().map(|name| &**name),
            );
        }
        Poll::Ready(answer)
    }
}
