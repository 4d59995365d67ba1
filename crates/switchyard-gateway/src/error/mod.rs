//! Every error a client or operator can receive: what it is, its status, type and typed
//! code, and the facts its body carries. Rendering it for a client API — body shape,
//! `Retry-After` (SPEC G5), stream error frames — is [`render`]'s, the one place that
//! does it. Mapping has no side effects; the response carries the error code in its
//! extensions for the request log. Nothing here depends on the pipeline.

pub mod render;

use crate::edge::BodyCut;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use switchyard_core::format::Format;
use switchyard_core::outcome::{AttemptFailure, StreamCut};
use switchyard_core::resilience::admission::Refusal;
use switchyard_core::routing::lease::Refusal as LeaseRefusal;
use switchyard_core::routing::{Exclusion, RouteError};
use switchyard_store::StoreError;

/// A JSON object body extractor whose rejections (malformed JSON, wrong types, unknown
/// fields, not an object, wrong content type) are typed API errors with the OpenAI-style
/// body, not plain text. A body that is a JSON array is refused, though serde would
/// read a struct from the array of its fields in order.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        json_body::<JsonObject<T>, S>(req, state)
            .await
            .map(|JsonObject(v)| Self(v))
    }
}

/// [`ApiJson`] for a body that is a JSON array.
#[derive(Debug, Clone, Default)]
pub struct ApiJsonArray<T>(pub Vec<T>);

impl<S, T> axum::extract::FromRequest<S> for ApiJsonArray<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        json_body::<Vec<T>, S>(req, state).await.map(Self)
    }
}

/// The request's JSON body as a `T`, or the typed error.
async fn json_body<T, S>(req: axum::extract::Request, state: &S) -> Result<T, ApiError>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    use axum::extract::rejection::JsonRejection;
    use axum::extract::FromRequest;
    match Json::<T>::from_request(req, state).await {
        Ok(Json(v)) => Ok(v),
        Err(JsonRejection::MissingJsonContentType(_)) => {
            Err(ApiError::UnsupportedMediaType(String::new()))
        }
        Err(rejection) => Err(match BodyCut::find(&rejection) {
            Some(cut) => cut.into(),
            None => ApiError::bad_request("invalid_json", rejection.body_text()),
        }),
    }
}

/// A `T` read from a JSON object only.
struct JsonObject<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for JsonObject<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Fields(std::marker::PhantomData))
            .map(Self)
    }
}

/// Defines a parts extractor wrapping axum's `$inner` whose rejections are typed API
/// errors (`400` with `$code`), not plain text.
macro_rules! typed_parts_extractor {
    ($(#[$doc:meta])* $name:ident, $inner:ident, $code:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name<T>(pub T);

        impl<S, T> axum::extract::FromRequestParts<S> for $name<T>
        where
            T: serde::de::DeserializeOwned + Send,
            S: Send + Sync,
        {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut axum::http::request::Parts,
                state: &S,
            ) -> Result<Self, ApiError> {
                axum::extract::$inner::<T>::from_request_parts(parts, state)
                    .await
                    .map(|axum::extract::$inner(v)| Self(v))
                    .map_err(|r| ApiError::bad_request($code, r.body_text()))
            }
        }
    };
}

typed_parts_extractor!(
    /// Path parameters (bad percent-encoding, wrong types → `invalid_path`).
    ApiPath,
    Path,
    "invalid_path"
);
typed_parts_extractor!(
    /// The query string (wrong types, unknown shape → `invalid_query`).
    ApiQuery,
    Query,
    "invalid_query"
);

/// The typed error code of a response, for logs and the request log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub &'static str);

/// Errors returned to API clients.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing API key: send `Authorization: Bearer <key>`")]
    MissingKey,
    #[error("invalid API key")]
    InvalidKey,
    #[error("this API key has been revoked")]
    RevokedKey,
    #[error("management API requires the admin token or a key with the `admin` scope")]
    AdminRequired,
    /// A valid client key without the `admin` scope on the management API.
    #[error("this API key lacks the `admin` scope the management API requires")]
    AdminScopeMissing,
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge { limit: u64 },
    /// The request body did not arrive in time, or the gateway began shutting down
    /// before it had (the edge's body wrapper).
    #[error("{0}")]
    BodyCut(#[from] BodyCut),
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// A malformed client request; `param` names the member at fault.
    #[error("{message}")]
    InvalidRequest {
        param: Option<&'static str>,
        message: String,
    },
    /// A body that is not JSON; the presented content type (empty when none).
    #[error("{}", media_type_message(.0))]
    UnsupportedMediaType(String),
    #[error("no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// A field of a submitted configuration is invalid; `field` goes into `param`.
    #[error("{message}")]
    InvalidField { field: String, message: String },
    #[error("{0}")]
    Route(#[from] RouteError),
    #[error("no executable target for model `{model}`: every candidate was excluded")]
    NoExecutableTargets {
        model: String,
        /// The plan's exclusions, then the candidates out of service (terminal
        /// accounts).
        excluded: Vec<Exclusion>,
    },
    #[error("provider `{provider}` is failing; its circuit breaker is open")]
    ProviderCircuitOpen {
        provider: String,
        retry_after_ms: u64,
    },
    #[error("every target of `{model}` is cooling down; retry in {} s", retry_after_ms.div_ceil(1000))]
    AllTargetsCoolingDown {
        model: String,
        excluded: Vec<Exclusion>,
        retry_after_ms: u64,
    },
    /// Every target of a combo is held back briefly and waiting is not allowed (SPEC R9).
    #[error("every target of `{model}` is rate limited for now; retry in {} s", retry_after_ms.div_ceil(1000))]
    CombosRateLimited {
        model: String,
        retry_after_ms: u64,
        reset_at_ms: u64,
    },
    /// Every target of a combo is held back by something that does not end on its own
    /// soon: quota, auth, unknown model, terminal account (SPEC R9).
    #[error("every target of `{model}` was skipped: none can serve it now")]
    AllTargetsSkipped {
        model: String,
        excluded: Vec<Exclusion>,
    },
    #[error("{message}")]
    Upstream {
        failure: AttemptFailure,
        message: String,
        retry_after: Option<HeaderValue>,
    },
    #[error("{}", .0.message())]
    QuotaExceeded(Box<crate::runtime::quota::QuotaBlock>),
    /// The only candidates are on pools that meter `usd`, and the model has no price.
    #[error("{0}")]
    UnpricedModel(String),
    /// A concurrency gate or the request queue refused the request (SPEC R7, R10).
    #[error("{}", queue_message(*refusal, connection))]
    Queue {
        refusal: Refusal,
        connection: String,
    },
    /// The quota counter store cannot be read (Redis down or failing).
    #[error("the quota store is unavailable ({reason}); usage cannot be read now")]
    QuotaStoreUnavailable { reason: &'static str },
    /// A lease operation or a leased request refused (SPEC R16).
    #[error("{0}")]
    Lease(#[from] LeaseRefusal),
    #[error("{kind} `{id}` not found")]
    NotFound { kind: &'static str, id: String },
    /// An operator's refresh of an OAuth token got no new token (SPEC R4).
    #[error("{0}")]
    OauthRefresh(String),
    #[error("{0}")]
    Conflict(String),
    /// The database cannot be reached (PostgreSQL down): nothing was changed, and the
    /// same call later may succeed (SPEC O6).
    #[error("{0}")]
    DatabaseUnavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// Status, OpenAI error type and typed code.
    pub fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        use StatusCode as S;
        match self {
            Self::MissingKey | Self::InvalidKey => {
                (S::UNAUTHORIZED, "invalid_request_error", "invalid_api_key")
            }
            Self::RevokedKey => (S::UNAUTHORIZED, "invalid_request_error", "revoked_api_key"),
            Self::AdminRequired => (S::UNAUTHORIZED, "invalid_request_error", "admin_required"),
            Self::AdminScopeMissing => (S::FORBIDDEN, "permission_error", "admin_required"),
            Self::BodyTooLarge { .. } => (
                S::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
            ),
            Self::BodyCut(BodyCut::Timeout { .. }) => (
                S::REQUEST_TIMEOUT,
                "invalid_request_error",
                "request_body_timeout",
            ),
            Self::BodyCut(BodyCut::Shutdown) => {
                (S::SERVICE_UNAVAILABLE, "server_error", "gateway_shutdown")
            }
            Self::BadRequest { code, .. } => (S::BAD_REQUEST, "invalid_request_error", code),
            Self::InvalidRequest { .. } => {
                (S::BAD_REQUEST, "invalid_request_error", "invalid_request")
            }
            Self::UnsupportedMediaType(_) => (
                S::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                "unsupported_media_type",
            ),
            Self::RouteNotFound { .. } => (S::NOT_FOUND, "invalid_request_error", "not_found"),
            Self::MethodNotAllowed { .. } => (
                S::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "method_not_allowed",
            ),
            Self::InvalidField { .. } => {
                (S::BAD_REQUEST, "invalid_request_error", "invalid_config")
            }
            Self::Route(RouteError::UnknownModel { .. }) => {
                (S::NOT_FOUND, "invalid_request_error", "model_not_found")
            }
            Self::Route(RouteError::ModelNotAllowed(_)) => {
                (S::FORBIDDEN, "permission_error", "model_not_allowed")
            }
            Self::OauthRefresh(_) => (S::BAD_GATEWAY, "upstream_error", "oauth_refresh_failed"),
            Self::ProviderCircuitOpen { .. } => (
                S::SERVICE_UNAVAILABLE,
                "upstream_error",
                "provider_circuit_open",
            ),
            Self::AllTargetsCoolingDown { .. } => (
                S::SERVICE_UNAVAILABLE,
                "upstream_error",
                "all_targets_cooling_down",
            ),
            Self::CombosRateLimited { .. } => (
                S::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "all_targets_rate_limited",
            ),
            Self::AllTargetsSkipped { .. } => (
                S::SERVICE_UNAVAILABLE,
                "upstream_error",
                "ALL_TARGETS_SKIPPED",
            ),
            Self::NoExecutableTargets { .. } => (
                S::NOT_FOUND,
                "invalid_request_error",
                "no_executable_targets",
            ),
            Self::Upstream { failure, .. } => match failure {
                AttemptFailure::Connect => {
                    (S::BAD_GATEWAY, "upstream_error", "upstream_unavailable")
                }
                AttemptFailure::FirstByteTimeout => {
                    (S::GATEWAY_TIMEOUT, "upstream_error", "upstream_timeout")
                }
                AttemptFailure::Reset => (
                    S::BAD_GATEWAY,
                    "upstream_error",
                    "upstream_connection_reset",
                ),
                AttemptFailure::InvalidResponse => (
                    S::BAD_GATEWAY,
                    "upstream_error",
                    "upstream_invalid_response",
                ),
                AttemptFailure::Status(429) => (
                    S::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    "upstream_rate_limited",
                ),
                AttemptFailure::Status(_) => (S::BAD_GATEWAY, "upstream_error", "upstream_error"),
                AttemptFailure::Stream(StreamCut::Error) => {
                    (S::BAD_GATEWAY, "upstream_error", "upstream_stream_error")
                }
                AttemptFailure::Stream(StreamCut::Broken) => (
                    S::BAD_GATEWAY,
                    "upstream_error",
                    "upstream_connection_reset",
                ),
                AttemptFailure::Stream(cut) => {
                    let (_, kind, code) = StreamError::from(*cut).parts();
                    (S::GATEWAY_TIMEOUT, kind, code)
                }
            },
            Self::QuotaExceeded(_) => (S::TOO_MANY_REQUESTS, "rate_limit_error", "quota_exceeded"),
            Self::UnpricedModel(_) => (S::FORBIDDEN, "permission_error", "model_unpriced"),
            Self::Queue { refusal, .. } => match refusal {
                Refusal::ExecutionTimeout => (S::GATEWAY_TIMEOUT, "timeout_error", refusal.code()),
                _ => (S::TOO_MANY_REQUESTS, "rate_limit_error", refusal.code()),
            },
            Self::QuotaStoreUnavailable { .. } => (
                S::SERVICE_UNAVAILABLE,
                "server_error",
                "quota_store_unavailable",
            ),
            Self::Lease(r) => lease_parts(*r),
            Self::NotFound { .. } => (S::NOT_FOUND, "invalid_request_error", "not_found"),
            Self::Conflict(_) => (S::CONFLICT, "invalid_request_error", "conflict"),
            Self::DatabaseUnavailable(_) => (
                S::SERVICE_UNAVAILABLE,
                "server_error",
                "database_unavailable",
            ),
            Self::Internal(_) => (S::INTERNAL_SERVER_ERROR, "server_error", "internal_error"),
        }
    }
}

/// Status, type and code of a lease refusal (SPEC R16's codes are kebab-case).
fn lease_parts(r: LeaseRefusal) -> (StatusCode, &'static str, &'static str) {
    use LeaseRefusal as L;
    use StatusCode as S;
    match r {
        L::MalformedOwner => (
            S::BAD_REQUEST,
            "invalid_request_error",
            "lease-invalid-owner",
        ),
        L::MalformedGeneration => (
            S::BAD_REQUEST,
            "invalid_request_error",
            "lease-invalid-generation",
        ),
        L::Ttl { .. } => (S::BAD_REQUEST, "invalid_request_error", "lease-invalid-ttl"),
        L::NotPermitted => (S::FORBIDDEN, "permission_error", "lease-not-permitted"),
        L::OwnerOfOtherKey => (S::FORBIDDEN, "permission_error", "lease-owner-mismatch"),
        L::NotActive => (S::NOT_FOUND, "invalid_request_error", "lease-not-active"),
        L::Stale { .. } => (
            S::CONFLICT,
            "invalid_request_error",
            "lease-stale-generation",
        ),
        L::CapacityUnavailable { .. } => (
            S::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "lease-capacity-unavailable",
        ),
        L::NoEligibleConnection => (
            S::SERVICE_UNAVAILABLE,
            "server_error",
            "lease-no-eligible-connection",
        ),
        L::TooMany => (
            S::SERVICE_UNAVAILABLE,
            "server_error",
            "lease-limit-reached",
        ),
    }
}

fn media_type_message(presented: &str) -> String {
    if presented.is_empty() {
        "the request body must be JSON: send `Content-Type: application/json`".to_owned()
    } else {
        format!("unsupported content type `{presented}`: send `Content-Type: application/json`")
    }
}

fn queue_message(refusal: Refusal, connection: &str) -> String {
    match refusal {
        Refusal::QueueFull => format!(
            "the request queue of connection `{connection}` is full (requestQueue.maxQueueDepth); retry later"
        ),
        Refusal::Hopeless { retry_after_ms } => format!(
            "connection `{connection}` is busy: the wait for a slot would be about {} s, longer than requestQueue.maxWaitMs allows; retry later",
            retry_after_ms.div_ceil(1000)
        ),
        Refusal::QueueTimeout => format!(
            "timed out waiting for a concurrency slot on connection `{connection}` (requestQueue.maxWaitMs)"
        ),
        Refusal::GateQueueFull => format!(
            "too many requests are waiting for connection `{connection}` (concurrency.maxWaiters); retry later"
        ),
        Refusal::ExecutionTimeout => format!(
            "the upstream exchange on connection `{connection}` ran past requestQueue.executionMaxWaitMs"
        ),
    }
}

impl From<crate::state::StateError> for ApiError {
    fn from(e: crate::state::StateError) -> Self {
        use crate::state::StateError as E;
        match e {
            E::Store(e) => e.into(),
            E::Snapshot(e) => Self::Internal(e.to_string()),
            E::Task(m) | E::QuotaStore(m) => Self::Internal(m),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { kind, id } => Self::NotFound { kind, id },
            StoreError::Conflict { .. } | StoreError::InUse { .. } | StoreError::Constraint(_) => {
                Self::Conflict(e.to_string())
            }
            StoreError::Unavailable(_) => Self::DatabaseUnavailable(e.to_string()),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    /// The OpenAI-shaped response: the management API's, and the chat front door's.
    fn into_response(self) -> Response {
        render::response(&self, Format::OpenAiChat)
    }
}

impl ApiError {
    /// `Retry-After` in seconds, where waiting helps; the upstream's own value is
    /// relayed as it is.
    pub fn retry_after(&self) -> Option<HeaderValue> {
        let secs = |ms: u64| HeaderValue::from(ms.div_ceil(1000).max(1));
        match self {
            Self::Upstream { retry_after, .. } => retry_after.clone(),
            Self::ProviderCircuitOpen { retry_after_ms, .. }
            | Self::AllTargetsCoolingDown { retry_after_ms, .. }
            | Self::CombosRateLimited { retry_after_ms, .. }
            | Self::Queue {
                refusal: Refusal::Hopeless { retry_after_ms },
                ..
            } => Some(secs(*retry_after_ms)),
            Self::QuotaExceeded(b) => b.retry_after_ms.map(secs),
            Self::Lease(r) => r.retry_after_s().map(HeaderValue::from),
            // The pool gives up on an unreachable database within seconds; a retry a
            // few seconds on may find it back.
            Self::DatabaseUnavailable(_) => Some(HeaderValue::from(5u64)),
            _ => None,
        }
    }
}

/// Why the gateway ended a stream that had started: the client gets a typed error frame
/// rather than a silently truncated answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamError {
    /// The upstream connection broke mid-stream.
    Reset,
    /// The upstream fell silent for longer than `upstream.stream_idle_timeout_ms`.
    Idle,
    /// The stream ran past the execution bound (SPEC R10).
    Execution,
    /// The upstream ended the stream before the answer was complete.
    Truncated,
    /// No output within the first-output budget (SPEC R11).
    FirstOutput,
    /// No output for the idle budget after the first (SPEC R11).
    OutputIdle,
    /// Useful output below the throughput watchdog's minimum (SPEC R12).
    Throughput,
}

impl From<StreamCut> for StreamError {
    fn from(cut: StreamCut) -> Self {
        match cut {
            StreamCut::FirstOutput => Self::FirstOutput,
            StreamCut::OutputIdle => Self::OutputIdle,
            StreamCut::Total => Self::Execution,
            StreamCut::Throughput => Self::Throughput,
            StreamCut::Silent => Self::Idle,
            StreamCut::Broken | StreamCut::Error => Self::Reset,
        }
    }
}

impl StreamError {
    /// Message, error type and typed code.
    pub fn parts(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Reset => (
                "upstream connection broke during the stream",
                "upstream_error",
                "upstream_connection_reset",
            ),
            Self::Idle => (
                "upstream stream stalled",
                "upstream_error",
                "upstream_stream_idle_timeout",
            ),
            Self::Execution => (
                "the upstream exchange ran past requestQueue.executionMaxWaitMs",
                "timeout_error",
                "RATE_LIMIT_EXECUTION_TIMEOUT",
            ),
            Self::Truncated => (
                "the upstream ended the stream before the answer was complete",
                "upstream_error",
                "upstream_stream_truncated",
            ),
            Self::FirstOutput => (
                "the upstream stream sent no output within streamContentStall.firstOutputMs",
                "upstream_error",
                "upstream_first_output_timeout",
            ),
            Self::OutputIdle => (
                "the upstream stream stopped producing output for streamContentStall.idleMs",
                "upstream_error",
                "upstream_output_idle_timeout",
            ),
            Self::Throughput => (
                "the upstream stream produced output below streamThroughputWatchdog.minBytesPerSecond",
                "upstream_error",
                "upstream_throughput_low",
            ),
        }
    }

    /// The typed code, for the request log.
    pub fn code(self) -> &'static str {
        self.parts().2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn upstream_failures_map_to_typed_codes() {
        let up = |f| ApiError::Upstream {
            failure: f,
            message: "x".into(),
            retry_after: None,
        };
        let cases = [
            (AttemptFailure::Connect, 502, "upstream_unavailable"),
            (AttemptFailure::FirstByteTimeout, 504, "upstream_timeout"),
            (AttemptFailure::Reset, 502, "upstream_connection_reset"),
            (
                AttemptFailure::InvalidResponse,
                502,
                "upstream_invalid_response",
            ),
            (AttemptFailure::Status(429), 429, "upstream_rate_limited"),
            (AttemptFailure::Status(503), 502, "upstream_error"),
        ];
        for (f, status, code) in cases {
            let (s, _, c) = up(f).parts();
            assert_eq!((s.as_u16(), c), (status, code));
        }
    }

    #[test]
    fn cut_bodies_map_to_408_and_503() {
        let timeout = ApiError::from(BodyCut::Timeout { limit_ms: 300 });
        assert_eq!(
            (
                timeout.parts().0.as_u16(),
                render::body(&timeout, Format::OpenAiChat)
            ),
            (
                408,
                json!({"error": {
                    "message": "the request body was not complete within 300 ms (server.body_read_timeout_ms)",
                    "type": "invalid_request_error",
                    "code": "request_body_timeout",
                    "param": null,
                }})
            )
        );
        let shutdown = ApiError::from(BodyCut::Shutdown);
        assert_eq!(
            (shutdown.parts().0.as_u16(), shutdown.parts().2),
            (503, "gateway_shutdown")
        );
    }

    #[test]
    fn body_is_openai_shaped() {
        let b = render::body(&ApiError::InvalidKey, Format::OpenAiChat);
        assert_eq!(
            b,
            json!({"error": {"message": "invalid API key", "type": "invalid_request_error", "code": "invalid_api_key", "param": null}})
        );
    }
}
