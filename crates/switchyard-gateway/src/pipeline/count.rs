//! `count_tokens`: a prompt's input tokens, for clients that size their context
//! (`POST /v1/messages/count_tokens`). The request is authenticated, decoded and routed
//! like a completion; the first candidate whose upstream can count (an Anthropic-format
//! one) is asked, and when none can — or the one asked fails — the gateway answers its
//! own estimate, the one its quota admission books. Counting generates nothing, so it
//! takes no concurrency slot, books no quota and leaves no request-log row; the
//! resilience state is read, not written.

use super::{auth, plan, read_request};
use crate::error::{render, ApiError};
use crate::heads::Fields;
use crate::state::AppState;
use crate::upstream::{self, Call};
use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::{BodyExt, Limited};
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::format::Format;
use switchyard_core::quota::cost::Estimate;

/// Largest count answer read: `{"input_tokens": N}` is a few bytes.
const MAX_COUNT_BODY_BYTES: usize = 64 * 1024;

/// Serves a count request in `format` whose header fields the pipeline reads are
/// `fields`.
pub async fn count_tokens(
    state: &Arc<AppState>,
    format: Format,
    body: Body,
    fields: Fields,
) -> Response {
    match count(state, format, body, &fields).await {
        Ok(r) => r,
        Err(e) => render::response(&e, format),
    }
}

async fn count(
    state: &Arc<AppState>,
    format: Format,
    body: Body,
    fields: &Fields,
) -> Result<Response, ApiError> {
    let snap = state.snapshot();
    let key = auth::request_key(&snap.catalog, fields)?;
    let presented = super::headers::Presented::scan(fields);
    let lease = super::lease::presented(&state.runtime, &presented, key, state.clock.now_ms())?;
    let request = read_request(&snap, format, fields, body).await?;
    let estimate = Estimate::at_admission(request.prompt_len, None, false);
    // Counting tokens serves no conversation: no session pin is read or written. A
    // lease orders and excludes as for any request, but a count never moves it.
    let plan = plan::build(
        &state.runtime,
        &snap,
        key,
        (&request, &estimate),
        (state.next_rotation(), None, state.clock.now_ms()),
        lease.as_ref(),
    )
    .await?
    .plan;
    let protocol = super::headers::protocol(format, fields);
    let now = state.clock.now_ms();
    for c in &plan.candidates {
        let Some(target) = snap.upstreams.get(c.connection.index) else {
            continue;
        };
        let (Some(url), true) = (&target.count_url, target.adapter.format() == format) else {
            continue;
        };
        let attempt = crate::runtime::resilience::Attempt {
            conn: &c.connection,
            model: &c.upstream_model,
            may_defer: false,
            budget_ms: snap.settings.first_byte_timeout_ms,
        };
        if state
            .runtime
            .resilience
            .check(attempt, &snap.settings.resilience, now)
            .is_err()
        {
            continue;
        }
        let call = Call {
            method: axum::http::Method::POST,
            url,
            body: bytes::Bytes::from(request.body.with_model(&c.upstream_model)),
            stream: false,
            protocol: &protocol,
            extra: &[],
            success_reads: None,
        };
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(snap.settings.first_byte_timeout_ms);
        let Ok(answer) =
            upstream::send(snap.settings.connect_timeout_ms, target, call, deadline).await
        else {
            tracing::info!(
                connection_id = %c.connection.id,
                "Upstream could not be reached to count tokens; answering the gateway's estimate."
            );
            break;
        };
        if !answer.status().is_success() {
            tracing::info!(
                connection_id = %c.connection.id,
                status = answer.status().as_u16(),
                "Upstream could not count tokens; answering the gateway's estimate."
            );
            break;
        }
        let read = tokio::time::timeout_at(
            deadline,
            Limited::new(answer.into_body(), MAX_COUNT_BODY_BYTES).collect(),
        )
        .await;
        if let Ok(Ok(collected)) = read {
            let bytes = collected.to_bytes();
            // An answer that also carries an error goes out redacted, as on every route.
            let bytes = switchyard_core::redact::scrub_body(&bytes, &target.secrets)
                .map_or(bytes, bytes::Bytes::from);
            if serde_json::from_slice::<serde_json::Value>(&bytes)
                .is_ok_and(|v| v["input_tokens"].is_u64())
            {
                let mut out = Response::new(axum::body::Body::from(bytes));
                out.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                return Ok(out);
            }
        }
        break;
    }
    Ok(Json(serde_json::json!({"input_tokens": estimate.prompt_tokens})).into_response())
}
