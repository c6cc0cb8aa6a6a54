//! The OpenAPI 3.1 document, generated from the handlers and types: served at
//! `/v1/openapi.json`.

use super::problem::Problem;
use super::routes;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tickless-durable",
        description = "Durable delayed jobs on Redis: schedule, cancel, reschedule, recurring \
                       schedules, and pull workers (claim, ack, fail, extend) over HTTP. \
                       Errors are RFC 9457 problems (application/problem+json) whose `type` \
                       is urn:tickless-durable:problem:<kind>."
    ),
    paths(
        routes::schedule,
        routes::schedule_batch,
        routes::job,
        routes::cancel,
        routes::reschedule,
        routes::schedules,
        routes::set_schedule,
        routes::unschedule,
        routes::counts,
        routes::dead,
        routes::retry_dead,
        routes::claim,
        routes::ack,
        routes::fail,
        routes::extend,
    ),
    components(schemas(Problem)),
    modifiers(&Common),
    security(("bearer" = []))
)]
struct ApiDoc;

/// The document as JSON.
pub(super) fn document() -> String {
    ApiDoc::openapi()
        .to_json()
        .unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}"))
}

/// What every operation shares: the bearer scheme, and the problems any of them may
/// answer (written once here rather than on each handler).
struct Common;

/// Statuses every operation may answer with a problem.
const PROBLEMS: &[(&str, &str)] = &[
    (
        "400",
        "Malformed JSON, or a path or query that does not parse",
    ),
    (
        "401",
        "No bearer token, an unknown one, or no token configured on the server",
    ),
    (
        "403",
        "The token lacks the scope, or may not touch this queue",
    ),
    ("404", "No such queue (or job, for a look-up)"),
    ("413", "The body, a payload or a batch is too large"),
    (
        "422",
        "A field is missing, unknown, of the wrong type or out of range",
    ),
    (
        "500",
        "The server's Redis user lacks a permission, or a key holds garbage",
    ),
    (
        "503",
        "Redis cannot be reached: send again after Retry-After seconds",
    ),
];

impl Modify for Common {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
            ];
            for operation in operations.into_iter().flatten() {
                add_problems(operation);
            }
        }
    }
}

fn problem(description: &str) -> RefOr<utoipa::openapi::Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/problem+json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            )
            .build(),
    )
}

fn add_problems(operation: &mut Operation) {
    let responses = &mut operation.responses.responses;
    for (status, description) in PROBLEMS {
        responses
            .entry(status.to_string())
            .or_insert_with(|| problem(description));
    }
    if operation.request_body.is_some() {
        responses
            .entry("415".to_string())
            .or_insert_with(|| problem("The body is not JSON (Content-Type: application/json)"));
    }
}
