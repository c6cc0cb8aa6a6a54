//! Extractors whose rejections are problems (axum's own answer in plain text).

use super::problem::Problem;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::error::Category;

/// A JSON object body: 415 not JSON, 413 too large (refused as the limit is passed, not
/// once read whole), 400 malformed, 422 not an object or of the wrong shape.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Body<T>, Problem> {
        let JsonBytes(bytes) = JsonBytes::from_request(req, state).await?;
        parse(&bytes).map(Body)
    }
}

/// The bytes of a body that [`Body`]'s checks passed, but not yet parsed: the handler
/// parses it with [`parse`] into a type that borrows its strings from these bytes (a
/// batch's ids and payloads are not copied one by one into `String`s).
pub(crate) struct JsonBytes(pub(crate) Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBytes {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<JsonBytes, Problem> {
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
        Ok(JsonBytes(bytes))
    }
}

/// `bytes` as a `T`: 400 malformed, 422 of the wrong shape, with the same words as
/// axum's `Json` (the path to the bad field, then serde's message).
///
/// A body that parses is read once by plain serde_json; only a refused one is read again
/// with `serde_path_to_error` (as axum's `Json` reads every body), whose path tracking
/// costs on every field and is only needed to say where a body went wrong.
pub(crate) fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, Problem> {
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize(&mut deserializer) {
        Ok(value) => deserializer.end().map(|()| value).map_err(malformed),
        Err(err) if err.inner().classify() == Category::Data => Err(Problem::invalid(
            "invalid-body",
            "The body does not fit the operation's schema",
            format!("Failed to deserialize the JSON body into the target type: {err}"),
        )),
        Err(err) => Err(malformed(err)),
    }
}

/// A body that is not JSON (a syntax error, or it ends too soon).
fn malformed(err: impl std::fmt::Display) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "malformed-json",
        "Malformed JSON",
        format!("Failed to parse the request body as JSON: {err}"),
    )
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

#[cfg(test)]
mod tests {
    use super::parse;
    use crate::api::model::{NewJob, NewJobs};
    use std::borrow::Cow;

    #[test]
    fn a_parsed_job_borrows_what_has_no_escape_and_owns_what_has_one() {
        let body = br#"{"jobs":[{"id":"a","payload":"plain"},{"id":"b\"c","payload":"x\ny"}]}"#;
        let batch: NewJobs<'_> = parse(body).expect("a batch");
        assert!(matches!(batch.jobs[0].id, Cow::Borrowed("a")));
        assert!(matches!(batch.jobs[0].payload, Cow::Borrowed("plain")));
        assert_eq!(batch.jobs[1].id, "b\"c");
        assert_eq!(batch.jobs[1].payload, "x\ny");
        assert!(matches!(batch.jobs[1].id, Cow::Owned(_)));
    }

    #[test]
    fn a_refused_body_is_worded_as_axums_json_with_the_path() {
        let detail = |body: &[u8]| {
            let problem = parse::<NewJobs<'_>>(body).expect_err("refused");
            serde_json::to_value(&problem).expect("a problem as JSON")
        };
        let shape = detail(br#"{"jobs":[{"id":"a"},{"id":1}]}"#);
        assert_eq!(shape["status"], 422);
        assert_eq!(
            shape["detail"],
            "Failed to deserialize the JSON body into the target type: jobs[1].id: invalid \
             type: integer `1`, expected a string at line 1 column 27"
        );
        let syntax = detail(br#"{"jobs":[{"id":"a"}"#);
        assert_eq!(syntax["status"], 400);
        assert_eq!(
            syntax["type"],
            "urn:tickless-durable:problem:malformed-json"
        );
        let trailing = detail(br#"{"jobs":[]} x"#);
        assert_eq!(trailing["status"], 400);
        assert_eq!(
            trailing["detail"],
            "Failed to parse the request body as JSON: trailing characters at line 1 column 13"
        );
        let one: NewJob<'_> = parse(br#"{"id":"z"}"#).expect("a job");
        assert_eq!(one.id, "z");
    }
}
