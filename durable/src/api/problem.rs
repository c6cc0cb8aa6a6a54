//! Errors as RFC 9457 `application/problem+json`: one stable `type` per kind of error.

use crate::Error;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The prefix of every problem `type`; the kinds are listed in the module docs.
pub(crate) const TYPE_PREFIX: &str = "urn:tickless-durable:problem:";

/// Seconds a client should wait before sending again a request refused while Redis
/// could not be reached.
const RETRY_AFTER_S: &str = "1";

/// An RFC 9457 problem: what went wrong, with a machine-readable `type`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Problem {
    /// `urn:tickless-durable:problem:<kind>`; the kinds are stable (see the API docs).
    #[serde(rename = "type")]
    #[schema(example = "urn:tickless-durable:problem:invalid-id")]
    kind: String,
    /// A short summary of the kind.
    title: &'static str,
    /// The HTTP status, repeated.
    status: u16,
    /// What happened this time. Never holds a token or a Redis password.
    detail: String,
    #[serde(skip)]
    retry_after: bool,
}

impl Problem {
    pub(crate) fn new(
        status: StatusCode,
        kind: &str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            kind: format!("{TYPE_PREFIX}{kind}"),
            title,
            status: status.as_u16(),
            detail: detail.into(),
            retry_after: false,
        }
    }

    /// The same problem, its detail naming the job of a batch it is about.
    pub(crate) fn in_batch(mut self, n: usize) -> Problem {
        self.detail = format!(
            "jobs[{n}]: {}; nothing in the batch was scheduled",
            self.detail
        );
        self
    }

    fn retry_after(mut self) -> Problem {
        self.retry_after = true;
        self
    }

    pub(crate) fn invalid(kind: &str, title: &'static str, detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::UNPROCESSABLE_ENTITY, kind, title, detail)
    }

    pub(crate) fn unauthorized(detail: &str) -> Problem {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "No valid bearer token",
            detail,
        )
    }

    pub(crate) fn forbidden(detail: String) -> Problem {
        Problem::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "The token may not do this",
            detail,
        )
    }

    pub(crate) fn unknown_queue(name: &str) -> Problem {
        Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-queue",
            "No such queue on this server",
            format!("the API serves no queue {name:?}"),
        )
    }

    pub(crate) fn not_found(detail: String) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    pub(crate) fn too_many(detail: String) -> Problem {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch-too-large",
            "Too many items in one request",
            detail,
        )
    }
}

impl From<Error> for Problem {
    /// Each kind of the library's [`Error`] as its problem. Errors never hold a password
    /// (the library redacts URLs), so the message is the detail.
    fn from(err: Error) -> Problem {
        let detail = err.to_string();
        if err.is_invalid_id() {
            Problem::invalid("invalid-id", "Invalid job id", detail)
        } else if err.is_payload_too_large() {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Payload too large",
                detail,
            )
        } else if err.is_invalid_schedule() {
            Problem::invalid("invalid-schedule", "Invalid recurring schedule", detail)
        } else if err.is_invalid_queue_name() {
            Problem::invalid("invalid-queue-name", "Invalid queue name", detail)
        } else if err.is_redis() || err.is_connect() {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "redis-unavailable",
                "Redis cannot be reached",
                detail,
            )
            .retry_after()
        } else if err.is_replication() {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "replication",
                "Too few replicas acknowledged the write",
                detail,
            )
            .retry_after()
        } else if err.is_store() {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "cold-store",
                "The cold store failed",
                detail,
            )
            .retry_after()
        } else if err.is_permission() {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "redis-permission",
                "The server's Redis user lacks a permission",
                detail,
            )
        } else if err.is_garbage() {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "garbage",
                "A Redis key holds something this library did not write",
                detail,
            )
        } else {
            // `is_invalid_url`: the server's own configuration.
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server",
                "Server misconfigured",
                detail,
            )
        }
    }
}

impl From<PathRejection> for Problem {
    fn from(rejection: PathRejection) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-path",
            "Invalid path",
            rejection.body_text(),
        )
    }
}

impl From<QueryRejection> for Problem {
    fn from(rejection: QueryRejection) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-query",
            "Invalid query string",
            rejection.body_text(),
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
        }
        if self.status == 401 {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
