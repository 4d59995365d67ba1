//! Rendering errors for the client API that asked: the one place that knows each
//! format's error body, its `Retry-After`, and the frame that ends a stream with an
//! error. A new client format adds its arms here.
//!
//! It only renders: which error to return is decided before it gets here, and nothing
//! here imports the pipeline or reads state.

use super::{ApiError, ErrorCode, StreamError};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};
use switchyard_core::format::translate::map::anthropic_error_type;
use switchyard_core::format::{Format, StreamReader};
use switchyard_core::outcome::AttemptFailure;
use switchyard_core::routing::Exclusion;

/// The error's body in `format`.
pub fn body(e: &ApiError, format: Format) -> Value {
    match format {
        Format::OpenAiChat | Format::Responses => openai_body(e),
        Format::AnthropicMessages => anthropic_body(e),
    }
}

/// Anthropic's shape `{"type":"error","error":{"type","message"}}`; our typed `code`
/// and the error's facts (diagnostics, quota, retry hints) sit beside them, as in the
/// OpenAI shape.
fn anthropic_body(e: &ApiError) -> Value {
    let (status, _, _) = e.parts();
    let Value::Object(mut facts) = openai_body(e)["error"].take() else {
        return json!({"type": "error", "error": {"type": "api_error", "message": e.to_string()}});
    };
    facts.remove("type");
    facts.remove("param");
    let mut err = serde_json::Map::with_capacity(facts.len() + 1);
    err.insert("type".into(), json!(anthropic_error_type(status.as_u16())));
    err.extend(facts);
    json!({"type": "error", "error": err})
}

/// The error as a response in `format`: status, body, `Retry-After` where waiting
/// helps, and the typed code in the extensions.
pub fn response(e: &ApiError, format: Format) -> Response {
    let (status, _, code) = e.parts();
    let mut resp = (status, Json(body(e, format))).into_response();
    if let Some(v) = e.retry_after() {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp.extensions_mut().insert(ErrorCode(code));
    resp
}

/// The frames that end a stream in `format` with `e`, as the format ends a failed
/// answer (SPEC R11): chat a last chunk with its `finish_reason`, the `error` chunk and
/// `[DONE]`; Anthropic the open block closed, `message_delta`, `event: error` and
/// `message_stop` (Claude Code reports a stream without it as a connection closed
/// mid-response); Responses `response.failed`. `reader` has read the stream so far, so
/// the frames continue it (its ids, its sequence, its open block).
pub fn stream_frame(e: StreamError, format: Format, reader: &mut StreamReader) -> Bytes {
    let (message, kind, code) = e.parts();
    let error = match format {
        Format::OpenAiChat | Format::Responses => {
            json!({"error": {"message": message, "type": kind, "code": code, "param": null}})
        }
        Format::AnthropicMessages => {
            let kind = if kind == "timeout_error" {
                "timeout_error"
            } else {
                "api_error"
            };
            json!({"type": "error", "error": {"type": kind, "message": message, "code": code}})
        }
    };
    Bytes::from(reader.cut_frames(&error))
}

/// The OpenAI-style error body as the OpenAPI document describes it: what
/// [`body`] renders in [`Format::OpenAiChat`], the management API's error shape.
#[derive(Debug, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The `error` member of [`ErrorBody`]. Facts of some errors (diagnostics, quota,
/// retry hints) sit beside these four members.
#[derive(Debug, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, in words.
    pub message: String,
    /// The OpenAI error type: `invalid_request_error`, `permission_error`,
    /// `rate_limit_error`, `server_error`, ...
    #[schema(rename = "type")]
    pub kind: String,
    /// The typed code: `admin_required`, `not_found`, `invalid_json`, ...
    pub code: String,
    /// The member of the request at fault, when one is.
    #[schema(required = true)]
    pub param: Option<String>,
}

/// The OpenAI-style body `{"error":{"message","type","code","param"}}`, with the
/// error's facts (diagnostics, quota, retry hints) beside them.
fn openai_body(e: &ApiError) -> Value {
    let (_, kind, code) = e.parts();
    let mut err = json!({
        "message": e.to_string(),
        "type": kind,
        "code": code,
        "param": null,
    });
    if let ApiError::InvalidField { field, .. } = e {
        err["param"] = json!(field);
    }
    if let ApiError::InvalidRequest { param: Some(p), .. } = e {
        err["param"] = json!(p);
    }
    let listed = |list: &[Exclusion], now_left: bool| {
        list.iter()
            .map(|c| {
                let mut v = json!({
                    "target": c.target,
                    "connection": c.connection,
                    "reason": c.reason.as_str(),
                });
                if now_left {
                    v["seconds_left"] = json!(c.retry_after_ms().map(|ms| ms.div_ceil(1000)));
                }
                v
            })
            .collect::<Vec<Value>>()
    };
    match e {
        ApiError::NoExecutableTargets { excluded, .. } => {
            err["diagnostics"] = json!({ "excluded": listed(excluded, false) });
        }
        ApiError::AllTargetsCoolingDown { excluded, .. }
        | ApiError::AllTargetsSkipped { excluded, .. } => {
            err["diagnostics"] = json!({ "excluded": listed(excluded, true) });
        }
        ApiError::CombosRateLimited {
            retry_after_ms,
            reset_at_ms,
            ..
        } => {
            err["retry_after"] = json!(retry_after_ms.div_ceil(1000));
            err["reset_at"] = json!(reset_at_ms);
        }
        _ => {}
    }
    if let ApiError::Upstream {
        failure: AttemptFailure::Status(s),
        ..
    } = e
    {
        err["upstream_status"] = json!(s);
    }
    if let ApiError::Lease(r) = e {
        if let Some(s) = r.retry_after_s() {
            err["status"] = json!("waiting-for-capacity");
            err["retry_after"] = json!(s);
        }
    }
    if let ApiError::QuotaExceeded(b) = e {
        err["quota"] = json!({
            "pool": b.pool_id,
            "dimension": b.dimension.key(),
            "unit": b.dimension.unit.as_str(),
            "window": b.dimension.window.as_str(),
            "reason": b.reason().as_str(),
            "policy": b.policy.as_str(),
            "mode": b.verdict.mode.as_str(),
            "consumed": b.consumed,
            "line": b.line,
            "limit": b.dimension.limit,
            "fair_share": b.verdict.fair_share,
            "retry_after_ms": b.retry_after_ms,
        });
    }
    json!({ "error": err })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_stream_ends_with_its_finish_reason_the_error_and_done() {
        let cases = [
            (StreamError::Reset, "upstream connection broke during the stream", "upstream_error", "upstream_connection_reset"),
            (StreamError::Idle, "upstream stream stalled", "upstream_error", "upstream_stream_idle_timeout"),
            (StreamError::Execution, "the upstream exchange ran past requestQueue.executionMaxWaitMs", "timeout_error", "RATE_LIMIT_EXECUTION_TIMEOUT"),
            (StreamError::Truncated, "the upstream ended the stream before the answer was complete", "upstream_error", "upstream_stream_truncated"),
            (StreamError::FirstOutput, "the upstream stream sent no output within streamContentStall.firstOutputMs", "upstream_error", "upstream_first_output_timeout"),
            (StreamError::OutputIdle, "the upstream stream stopped producing output for streamContentStall.idleMs", "upstream_error", "upstream_output_idle_timeout"),
            (StreamError::Throughput, "the upstream stream produced output below streamThroughputWatchdog.minBytesPerSecond", "upstream_error", "upstream_throughput_low"),
        ];
        for (e, message, kind, code) in cases {
            let mut reader = Format::OpenAiChat.stream_reader();
            reader.feed(b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n");
            let want = format!(
                "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"length\"}}]}}\n\n\
                 data: {{\"error\":{{\"message\":\"{message}\",\"type\":\"{kind}\",\"code\":\"{code}\",\"param\":null}}}}\n\n\
                 data: [DONE]\n\n"
            );
            assert_eq!(
                stream_frame(e, Format::OpenAiChat, &mut reader),
                Bytes::from(want)
            );
        }
    }

    #[test]
    fn an_anthropic_stream_ends_with_the_error_then_message_stop() {
        let mut reader = Format::AnthropicMessages.stream_reader();
        reader.feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
        assert_eq!(
            stream_frame(StreamError::OutputIdle, Format::AnthropicMessages, &mut reader),
            Bytes::from_static(concat!(
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the upstream stream stopped producing output for streamContentStall.idleMs\",\"code\":\"upstream_output_idle_timeout\"}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            ).as_bytes())
        );
    }

    #[test]
    fn anthropic_errors_have_anthropics_shape_with_our_code() {
        let e = ApiError::ProviderCircuitOpen {
            provider: "alpha".into(),
            retry_after_ms: 1_200,
        };
        let r = body(&e, Format::AnthropicMessages);
        assert_eq!(
            r,
            json!({"type": "error", "error": {"type": "overloaded_error",
                "message": e.to_string(), "code": "provider_circuit_open"}})
        );
        assert_eq!(
            body(&ApiError::InvalidKey, Format::AnthropicMessages)["error"]["type"],
            "authentication_error"
        );
        assert_eq!(
            stream_frame(StreamError::Reset, Format::AnthropicMessages, &mut Format::AnthropicMessages.stream_reader()),
            Bytes::from_static(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"upstream connection broke during the stream\",\"code\":\"upstream_connection_reset\"}}\n\n")
        );
    }

    #[test]
    fn a_responses_stream_fails_its_response_continuing_the_sequence() {
        let mut reader = Format::Responses.stream_reader();
        reader.feed(b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"created_at\":7,\"model\":\"m\"}}\n\n");
        assert_eq!(
            stream_frame(StreamError::Idle, Format::Responses, &mut reader),
            Bytes::from_static(b"event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":7,\"status\":\"failed\",\"model\":\"m\",\"output\":[],\"error\":{\"code\":\"upstream_stream_idle_timeout\",\"message\":\"upstream stream stalled\"},\"usage\":null}}\n\n")
        );
    }

    #[test]
    fn responses_carry_status_code_and_retry_after() {
        let e = ApiError::ProviderCircuitOpen {
            provider: "alpha".into(),
            retry_after_ms: 1_200,
        };
        let r = response(&e, Format::OpenAiChat);
        assert_eq!(r.status().as_u16(), 503);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        assert_eq!(
            r.extensions().get::<ErrorCode>(),
            Some(&ErrorCode("provider_circuit_open"))
        );
        let r = response(&ApiError::InvalidKey, Format::OpenAiChat);
        assert_eq!(r.status().as_u16(), 401);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }
}
