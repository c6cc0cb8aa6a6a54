//! Extractors whose rejections are problems (axum's own answer in plain text).

use super::problem::Problem;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

/// A JSON object body: 415 not JSON, 413 too large (refused as the limit is passed, not
/// once read whole), 400 malformed, 422 not an object or of the wrong shape.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Body<T>, Problem> {
        if !is_json(req.headers()) {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "not-json",
                "The body must be JSON (Content-Type: application/json)",
                "expected Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            Problem::new(
                rejection.status(),
                "body-too-large",
                "Request body too large",
                rejection.body_text(),
            )
        })?;
        // serde reads a struct from an array too (`[1, 2]`): only an object is one.
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first.is_some_and(|&b| b != b'{') {
            return Err(Problem::invalid(
                "invalid-body",
                "The body does not fit the operation's schema",
                "the body must be a JSON object",
            ));
        }
        let axum::Json(value) = axum::Json::<T>::from_bytes(&bytes)?;
        Ok(Body(value))
    }
}

/// `application/json`, or a `+json` type, as axum's `Json` accepts.
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(mime) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Path parameters: 400 when not UTF-8 once percent-decoded.
pub(crate) struct PathOf<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathOf<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<PathOf<T>, Problem> {
        let axum::extract::Path(value) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(PathOf(value))
    }
}

/// A query string: 400 when it does not fit.
pub(crate) struct QueryOf<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryOf<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<QueryOf<T>, Problem> {
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(QueryOf(value))
    }
}
