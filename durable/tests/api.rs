//! The HTTP API (feature `api`) through its router, in-process, against a real
//! redis-server: every route's happy path; every bad request gets its 4xx problem and
//! changes nothing; tokens' scopes and queue sets; the OpenAPI document; Redis down.
//!
//! One file per area under `api/`; `api/common.rs` holds what they share.

#[path = "api/bad_requests.rs"]
mod bad_requests;
#[path = "api/common.rs"]
mod common;
#[path = "api/document.rs"]
mod document;
#[path = "api/jobs.rs"]
mod jobs;
#[path = "api/outage.rs"]
mod outage;
#[path = "api/tokens.rs"]
mod tokens;
#[path = "api/workers.rs"]
mod workers;
