//! What the management API's operations answer besides their own results, added to
//! the OpenAPI document in one place, as the router adds it in one place: the admin
//! credential's refusals (`401`, `403`: the route layer in front of every admin route),
//! the typed extractors' (`400` for a body, path or query parameter that does not
//! parse, `415` for a body not declared as JSON), and the error body on every error
//! answer under `/api` and of `/metrics`.

use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::{Content, OpenApi, Ref, RefOr, Response};
use utoipa::Modify;

/// The component name of [`crate::error::render::ErrorBody`].
const ERROR_BODY: &str = "ErrorBody";

/// Adds the answers every management operation may give; see the module docs.
#[derive(Debug)]
pub struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        for (path, item) in &mut openapi.paths.paths {
            if !path.starts_with("/api/") && path != "/metrics" {
                continue;
            }
            for op in operations(item) {
                if path.starts_with("/api/") && op.security.is_some() {
                    add(
                        op,
                        "401",
                        "No credential, or neither the admin token nor a valid client key \
                         (`admin_required`, `revoked_api_key`).",
                    );
                    add(
                        op,
                        "403",
                        "A client key without the `admin` scope (`admin_required`).",
                    );
                }
                if op.request_body.is_some() {
                    add(
                        op,
                        "400",
                        "The body is not JSON of the documented shape (`invalid_json`), \
                         or a value is invalid (the code and the message say which).",
                    );
                    add(
                        op,
                        "415",
                        "The body is not declared as JSON (`unsupported_media_type`).",
                    );
                }
                if op.parameters.as_ref().is_some_and(|p| !p.is_empty()) {
                    add(
                        op,
                        "400",
                        "A path or query parameter does not parse (`invalid_path`, \
                         `invalid_query`), or a value is invalid (the code and the message \
                         say which).",
                    );
                }
                with_error_body(op);
            }
        }
    }
}

/// The operations of a path, whatever their methods.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// Documents `status` on `op` with `description`, unless `op` documents it already
/// with a description of its own.
fn add(op: &mut Operation, status: &str, description: &str) {
    let entry = op
        .responses
        .responses
        .entry(status.to_owned())
        .or_insert_with(|| RefOr::T(Response::new(description)));
    if let RefOr::T(r) = entry {
        if r.description.is_empty() {
            description.clone_into(&mut r.description);
        }
    }
}

/// Gives every error answer of `op` without a documented body the error body.
fn with_error_body(op: &mut Operation) {
    for (status, response) in &mut op.responses.responses {
        let RefOr::T(r) = response else { continue };
        if status.starts_with(['4', '5']) && r.content.is_empty() {
            r.content.insert(
                "application/json".to_owned(),
                Content::new(Some(Ref::from_schema_name(ERROR_BODY))),
            );
        }
    }
}
