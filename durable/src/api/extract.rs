//! Extractors whose rejections are problems (axum's own answer in plain text).

use super::problem::Problem;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// A JSON body: 400 malformed, 415 not JSON, 413 too large, 422 wrong shape.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Body<T>, Problem> {
        let axum::Json(value) = axum::Json::<T>::from_request(req, state).await?;
        Ok(Body(value))
    }
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
