//! The client request pipeline for `POST /v1/chat/completions`.
//!
//! Stages, in order (each a module or a function with a narrow interface, so a new
//! capability is a new stage rather than edits everywhere):
//!
//! 1. edge — request id, `now` read once, in-flight accounting ([`finish::Finisher`])
//! 2. auth — client key from the in-memory snapshot ([`auth`])
//! 3. parse — body size limit, JSON shape ([`switchyard_core::chat`])
//! 4. resolve + exclude + order — the routing plan ([`switchyard_core::routing`]), then
//!    candidates where the key is over a soft quota share move back (`quota`)
//! 5. attempts — per candidate: concurrency slots (`concurrency`; a refusal skips the
//!    candidate), quota reservation (`quota`; a pool that blocks skips the candidate),
//!    send upstream (`upstream`), classify the outcome, fail over on retryable failures
//!    while nothing has reached the client
//! 6. respond — a buffered JSON body, or a streaming body that owns the finisher
//!    (`stream`)
//! 7. finish — exactly once: quota settlement, request log row, metrics ([`finish`])

pub mod auth;
mod concurrency;
pub mod finish;
mod quota;
pub mod share;
mod stream;
mod upstream;

use crate::clock::Stopwatch;
use crate::error::ApiError;
use crate::metrics::{model_label, AttemptLabels};
use crate::resilience;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use finish::Finisher;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use std::sync::Arc;
use std::time::Duration;
use switchyard_core::chat::ChatRequest;
use switchyard_core::outcome::AttemptFailure;
use switchyard_core::quota::cost::Estimate;
use switchyard_core::resilience::admission::{self, Refusal};
use switchyard_core::resilience::combo_wait::{self, Hold};
use switchyard_core::resilience::cooldown;
use switchyard_core::routing;
use switchyard_core::usage::Usage;

/// Largest upstream error body relayed to the client; error bodies are short, and a
/// misbehaving upstream must not make the gateway buffer without bound.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Largest non-streaming upstream answer the gateway buffers. Chat completions are a few
/// KiB, long ones a few hundred; 64 MiB bounds memory per request against a misbehaving
/// upstream while leaving room for large tool-call payloads.
const MAX_UPSTREAM_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Header carrying the request id on every response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// `POST /v1/chat/completions`.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "client",
    request_body(content = serde_json::Value, description = "OpenAI chat-completions request; `model` is `provider/model` or a combo name"),
    responses(
        (status = 200, description = "Completion (JSON) or stream (text/event-stream)"),
        (status = 400, description = "Malformed request"),
        (status = 401, description = "Missing, unknown or revoked API key"),
        (status = 404, description = "Unknown model or nothing executable"),
        (status = 413, description = "Body too large"),
        (status = 429, description = "Upstream rate limited"),
        (status = 502, description = "Upstream failed"),
        (status = 504, description = "Upstream timed out"),
    ),
    security(("bearer" = []))
)]
pub async fn chat_completions(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let now = state.clock.now_ms();
    let mut finisher = Finisher::start(&state, state.next_request_id(), now);
    let request_id = HeaderValue::try_from(finisher.request_id()).ok();
    let mut response = match run(&state, &parts.headers, body, &mut finisher).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    finisher.finish_response(&response);
    if let Some(id) = request_id {
        response.headers_mut().insert(REQUEST_ID_HEADER, id);
    }
    response
}

/// Refuses a body declared as anything but JSON (`application/json`, or a `+json` type),
/// before it is read. A request without `Content-Type` is read as JSON.
fn check_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or_default();
    let essence = text.split(';').next().unwrap_or_default().trim();
    let json = essence.eq_ignore_ascii_case("application/json")
        || essence
            .rsplit_once('+')
            .is_some_and(|(_, suffix)| suffix.eq_ignore_ascii_case("json"));
    if json {
        return Ok(());
    }
    let shown: String = text.chars().take(100).collect();
    Err(ApiError::UnsupportedMediaType(shown))
}

async fn read_body(body: Body, limit: u64) -> Result<Bytes, ApiError> {
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, limit_usize).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(ApiError::BodyTooLarge { limit }),
        Err(e) => Err(match crate::edge::BodyCut::find(&*e) {
            Some(cut) => cut.into(),
            None => ApiError::bad_request(
                "invalid_body",
                format!("could not read the request body: {e}"),
            ),
        }),
    }
}

async fn run(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Body,
    finisher: &mut Finisher,
) -> Result<Response, ApiError> {
    let snap = state.snapshot();
    let key = auth::client_key(&snap.catalog, headers)?;
    finisher.set_key(&key.id);
    check_json_content_type(headers)?;
    let bytes = read_body(body, snap.settings.max_body_bytes).await?;
    let request = ChatRequest::parse(&bytes).map_err(|e| ApiError::InvalidRequest {
        param: e.param(),
        message: e.to_string(),
    })?;
    finisher.set_request(&request.model, request.stream);
    let mut plan = match share::plan(state, &snap, key, &request.model) {
        Some(p) => p?,
        None => routing::plan(&snap.catalog, key, &request.model, state.next_rotation())?,
    };
    let quota_share = plan
        .combo
        .as_deref()
        .is_some_and(|c| c.starts_with(share::PREFIX));
    if plan.candidates.is_empty() {
        return Err(ApiError::NoExecutableTargets {
            model: request.model.clone(),
            excluded: plan.excluded,
            unavailable: Vec::new(),
        });
    }
    let estimate =
        Estimate::at_admission(request.messages_len(), request.max_tokens, request.stream);
    if !quota_share {
        quota::order(state, &snap, &key.id, &estimate, &mut plan.candidates).await;
    }
    let first_byte = Duration::from_millis(snap.settings.first_byte_timeout_ms);
    let idle_timeout = Duration::from_millis(snap.settings.stream_idle_timeout_ms);
    let arrived = state.clock.now_ms();
    let mut waited = 0u32;
    // Time spent waiting for concurrency slots, shared by every candidate of the request
    // so `maxWaitMs` bounds the request, not each candidate.
    let mut slot_wait = Duration::ZERO;
    loop {
        let mut last: Option<(Failed, String)> = None;
        let mut blocked = Vec::new();
        let mut cooling = Vec::new();
        let mut refused: Option<(Refusal, String)> = None;
        // Candidates in order; a recovering one that is not in its share yet goes to the
        // back once (slow start), and is used there if nothing before it succeeded. One
        // whose concurrency slots are all taken is passed over at first; if nothing else
        // answers, the saturated ones are tried again, waiting for a slot.
        let mut queue: std::collections::VecDeque<(&routing::Candidate, bool, bool)> =
            plan.candidates.iter().map(|c| (c, true, false)).collect();
        let mut saturated = Vec::new();
        let mut held: Option<Response> = None;
        while let Some((candidate, may_defer, wait)) = queue.pop_front().or_else(|| {
            // Nothing left that could start at once: wait for the saturated ones.
            let next = std::mem::take(&mut saturated);
            queue.extend(next.into_iter().map(|c| (c, false, true)));
            queue.pop_front()
        }) {
            let conn = &candidate.connection;
            // Slots first, so a half-open probe is never held while waiting for them and
            // the resilience check below sees the state after any wait.
            if wait {
                let watch = Stopwatch::start();
                let admitted = concurrency::admit(
                    state,
                    &snap,
                    key,
                    conn,
                    &candidate.upstream_model,
                    quota_share,
                    slot_wait,
                    finisher,
                )
                .await;
                slot_wait += watch.elapsed();
                if let Err(refusal) = admitted {
                    refused.get_or_insert((refusal, conn.id.clone()));
                    continue;
                }
            } else if !concurrency::try_take(
                state,
                &snap,
                key,
                conn,
                &candidate.upstream_model,
                quota_share,
                finisher,
            ) {
                saturated.push(candidate);
                continue;
            }
            let attempt = resilience::Attempt {
                conn,
                model: &candidate.upstream_model,
                may_defer: may_defer && !queue.is_empty(),
                budget_ms: snap.settings.first_byte_timeout_ms,
            };
            let res_settings = &snap.settings.resilience;
            let admitted = match state
                .resilience
                .check(attempt, res_settings, state.clock.now_ms())
            {
                Ok(a) => a,
                Err(resilience::Exclusion::Warming) => {
                    finisher.release_slot();
                    queue.push_back((candidate, false, wait));
                    continue;
                }
                Err(exclusion) => {
                    finisher.release_slot();
                    cooling.push(CoolingExcluded {
                        target: format!("{}/{}", conn.provider, candidate.upstream_model),
                        connection: conn.id.clone(),
                        exclusion,
                    });
                    continue;
                }
            };
            // A probe slot that is not settled by an answer (skipped, client gone) is
            // given back when this guard drops.
            let mut probe = ProbeGuard {
                resilience: &state.resilience,
                provider: &conn.provider,
                armed: admitted.probe,
            };
            let pooled = snap.quota.pool_of(conn.index);
            let quota_headers =
                match quota::admit(state, &snap, key, candidate, estimate, finisher).await {
                    Ok(headers) => headers,
                    Err(block) => {
                        finisher.release_slot();
                        blocked.push(*block);
                        continue;
                    }
                };
            finisher.attempt(
                candidate,
                model_label(&snap.catalog, &conn.provider, &candidate.upstream_model),
            );
            let Some(target) = snap.upstreams.get(conn.index) else {
                finisher.release_quota();
                finisher.release_slot();
                continue;
            };
            let body = request.upstream_body(&candidate.upstream_model);
            let watch = Stopwatch::start();
            // One budget per attempt for the headers and, when not streaming, the whole body;
            // a stream is bounded by the execution limit (SPEC R10), never shorter than that.
            let dispatched = tokio::time::Instant::now();
            let deadline = dispatched + first_byte;
            let execution_deadline = dispatched
                + Duration::from_millis(admission::execution_bound_ms(
                    &snap.settings.concurrency.queue.with(&conn.queue),
                    snap.settings.first_byte_timeout_ms,
                ));
            let result = upstream::send(
                snap.settings.connect_timeout_ms,
                target,
                body,
                request.stream,
                deadline,
            )
            .await;
            let outcome = match result {
                Ok(response) => {
                    if pooled.is_some() {
                        state.quota.record_signals(
                            &conn.id,
                            response.headers(),
                            state.clock.now_ms(),
                        );
                    }
                    target
                        .metrics
                        .latency
                        .observe(watch.elapsed().as_secs_f64());
                    let now = state.clock.now_ms();
                    handle_response(
                        response,
                        Expect {
                            stream: request.stream,
                            deadline,
                            execution_deadline,
                            idle_timeout,
                            upstream: target,
                        },
                        finisher,
                        now,
                    )
                    .await
                }
                Err(failure) => Err(Failed::from(failure)),
            };
            let mut failed = match outcome {
                Ok(mut response) => {
                    probe.armed = false;
                    state.resilience.record(
                        attempt,
                        &resilience::Outcome::Success,
                        res_settings,
                        admitted.probe,
                        state.clock.now_ms(),
                    );
                    target.metrics.success.inc();
                    quota::add_headers(&mut response, quota_headers);
                    return Ok(response);
                }
                Err(failed) => failed,
            };
            finisher.release_quota();
            finisher.release_slot();
            probe.armed = false;
            state.resilience.record(
                attempt,
                &resilience::Outcome::Failure {
                    failure: failed.failure,
                    body: &failed.body_hint,
                    reset_at: failed.reset_at,
                },
                res_settings,
                admitted.probe,
                state.clock.now_ms(),
            );
            count_attempt(state, &conn.provider, failed.failure.label());
            if let Some(response) = failed.passthrough.take() {
                // A recovering target passed over for slow start is still worth a try
                // before an account-level error goes back to the client.
                if queue.iter().any(|(_, may_defer, _)| !may_defer) {
                    held = Some(response);
                    continue;
                }
                return Ok(response);
            }
            tracing::warn!(
                request_id = finisher.request_id(),
                provider = %conn.provider,
                connection_id = %conn.id,
                failure = failed.failure.label(),
                "Upstream attempt failed; trying the next candidate."
            );
            let message = match failed.failure {
                AttemptFailure::Status(s) => format!(
                    "upstream `{}` (connection `{}`) answered HTTP {s}",
                    conn.provider, conn.id
                ),
                other => format!(
                    "upstream `{}` (connection `{}`) failed: {}",
                    conn.provider,
                    conn.id,
                    other.label()
                ),
            };
            last = Some((failed, message));
        }
        if let Some(response) = held {
            return Ok(response);
        }
        // SPEC R9: a combo whose every target is held back by something short — after
        // nothing could be attempted, or after the targets answered 429 — waits for the
        // earliest to end and goes round again, within bounds, instead of failing.
        let rate_limited = last
            .as_ref()
            .is_some_and(|(f, _)| f.failure == AttemptFailure::Status(429));
        let only_cooling = last.is_none() && blocked.is_empty() && refused.is_none();
        if plan.combo.is_some() && !quota_share && (only_cooling || rate_limited) {
            if let Some(exclusions) = exclusions_now(state, &snap, &plan.candidates) {
                let holds: Vec<Hold> = exclusions.iter().map(|e| e.hold()).collect();
                let now = state.clock.now_ms();
                match combo_wait::decide(
                    &snap.settings.resilience.combo_wait,
                    &holds,
                    waited,
                    now.saturating_sub(arrived),
                ) {
                    combo_wait::Decision::Wait { ms } => {
                        tracing::info!(
                            request_id = finisher.request_id(),
                            model = %request.model,
                            wait_ms = ms,
                            "Every target of the combo is held back briefly; waiting it out."
                        );
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        waited += 1;
                        continue;
                    }
                    combo_wait::Decision::RateLimited { retry_after_ms } => {
                        return Err(ApiError::CombosRateLimited {
                            model: request.model.clone(),
                            retry_after_ms,
                            reset_at_ms: now.saturating_add(retry_after_ms),
                        });
                    }
                    combo_wait::Decision::NoTransientHold if only_cooling => {
                        return Err(ApiError::AllTargetsSkipped {
                            model: request.model.clone(),
                            excluded: cooling,
                        });
                    }
                    combo_wait::Decision::NoTransientHold => {}
                }
            }
        }
        let Some((failed, message)) = last else {
            if let Some(block) = quota::most_hopeful(blocked) {
                return Err(ApiError::QuotaExceeded(block));
            }
            if let Some((refusal, connection)) = refused {
                return Err(ApiError::Queue {
                    refusal,
                    connection,
                });
            }
            return Err(nothing_attempted(
                &request.model,
                plan.combo.is_some(),
                cooling,
                plan.excluded,
            ));
        };
        // Without the upstream's own word, say when the soonest candidate is usable
        // again, so SDKs do not retry at once into a cooling connection.
        let retry_after = failed.retry_after.or_else(|| {
            soonest_usable_ms(state, &snap, &plan.candidates)
                .map(|ms| HeaderValue::from(ms.div_ceil(1000).max(1)))
        });
        return Err(ApiError::Upstream {
            failure: failed.failure,
            message,
            retry_after,
        });
    }
}

/// Gives a half-open probe slot back unless an answer settled it.
struct ProbeGuard<'a> {
    resilience: &'a resilience::Resilience,
    provider: &'a str,
    armed: bool,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.resilience.release_probe(self.provider);
        }
    }
}

/// What holds each candidate back right now (SPEC R9), or `None` when one of them could
/// be tried at once (nothing to wait for).
fn exclusions_now(
    state: &AppState,
    snap: &crate::snapshot::Snapshot,
    candidates: &[routing::Candidate],
) -> Option<Vec<resilience::Exclusion>> {
    let now = state.clock.now_ms();
    let mut holds = Vec::with_capacity(candidates.len());
    for c in candidates {
        let attempt = resilience::Attempt {
            conn: &c.connection,
            model: &c.upstream_model,
            may_defer: false,
            budget_ms: snap.settings.first_byte_timeout_ms,
        };
        match state
            .resilience
            .check(attempt, &snap.settings.resilience, now)
        {
            Ok(admitted) => {
                if admitted.probe {
                    state.resilience.release_probe(&c.connection.provider);
                }
                return None;
            }
            Err(e) => holds.push(e),
        }
    }
    Some(holds)
}

/// How long until the soonest of `candidates` may be tried again: 0 when one may be
/// now, `None` when none will come back on its own.
fn soonest_usable_ms(
    state: &AppState,
    snap: &crate::snapshot::Snapshot,
    candidates: &[routing::Candidate],
) -> Option<u64> {
    match exclusions_now(state, snap, candidates) {
        None => Some(0),
        Some(exclusions) => exclusions.iter().filter_map(|e| e.retry_after_ms()).min(),
    }
}

/// A candidate skipped by a resilience state machine.
#[derive(Debug, Clone)]
pub struct CoolingExcluded {
    pub target: String,
    pub connection: String,
    pub exclusion: resilience::Exclusion,
}

/// The error when no candidate could be attempted (SPEC R1, R18): one provider's open
/// breaker on a direct request → `503 provider_circuit_open`; targets that will come
/// back → `503 all_targets_cooling_down` with the soonest `Retry-After`; nothing that
/// will come back on its own (terminal accounts) → `404 no_executable_targets`.
fn nothing_attempted(
    model: &str,
    combo: bool,
    cooling: Vec<CoolingExcluded>,
    excluded: Vec<switchyard_core::routing::Excluded>,
) -> ApiError {
    let soonest = cooling
        .iter()
        .filter_map(|c| c.exclusion.retry_after_ms())
        .min();
    let Some(retry_after_ms) = soonest else {
        return ApiError::NoExecutableTargets {
            model: model.to_owned(),
            excluded,
            unavailable: cooling,
        };
    };
    let all_breakers = cooling
        .iter()
        .all(|c| matches!(c.exclusion, resilience::Exclusion::CircuitOpen { .. }));
    if !combo && all_breakers {
        let provider = model.split('/').next().unwrap_or(model).to_owned();
        return ApiError::ProviderCircuitOpen {
            provider,
            retry_after_ms,
        };
    }
    ApiError::AllTargetsCoolingDown {
        model: model.to_owned(),
        excluded: cooling,
        retry_after_ms,
    }
}

/// A failed attempt.
struct Failed {
    failure: AttemptFailure,
    /// The upstream's `Retry-After`, relayed if this is the last failure.
    retry_after: Option<HeaderValue>,
    /// A non-retryable upstream answer, returned to the client as it is.
    passthrough: Option<Response>,
    /// The start of the upstream's error body (reset text, credit errors).
    body_hint: String,
    /// When the upstream said the account is usable again.
    reset_at: Option<u64>,
}

impl From<AttemptFailure> for Failed {
    fn from(failure: AttemptFailure) -> Self {
        Self {
            failure,
            retry_after: None,
            passthrough: None,
            body_hint: String::new(),
            reset_at: None,
        }
    }
}

/// Bytes of an upstream error body read for reset text and credit errors.
const BODY_HINT_BYTES: usize = 4096;

/// The announced reset of an upstream error answer (SPEC R3).
fn announced_reset(headers: &HeaderMap, body: &str, now: u64) -> Option<u64> {
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(n, _)| {
            let n = n.as_str();
            n == "retry-after" || n.starts_with("x-ratelimit-reset")
        })
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)))
        .collect();
    cooldown::announced_reset(&pairs, body, now)
}

/// What an attempt expects of the upstream's answer, and the bounds it reads it in.
struct Expect<'a> {
    stream: bool,
    /// The first-byte deadline (and, when not streaming, the whole answer's).
    deadline: tokio::time::Instant,
    execution_deadline: tokio::time::Instant,
    idle_timeout: Duration,
    /// The connection, whose credentials are redacted from relayed error bodies.
    upstream: &'a crate::snapshot::Upstream,
}

/// Whether a non-streamed answer is shaped like a JSON object (a chat completion always
/// is): an HTML error page, plain text or an empty body is not. Checked by its first and
/// last non-blank bytes, so a valid answer costs no second parse.
fn is_json_object(body: &[u8]) -> bool {
    let trimmed = body.trim_ascii();
    trimmed.first() == Some(&b'{') && trimmed.last() == Some(&b'}')
}

/// Whether a `Content-Type` is an event stream.
fn is_event_stream(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// Turns an upstream response into the client response, or a failure.
async fn handle_response(
    response: axum::http::Response<Incoming>,
    expect: Expect<'_>,
    finisher: &mut Finisher,
    now: u64,
) -> Result<Response, Failed> {
    let Expect {
        stream,
        deadline,
        execution_deadline,
        idle_timeout,
        upstream: target,
    } = expect;
    let (parts, body) = response.into_parts();
    let status = parts.status;
    let content_type = parts.headers.get(header::CONTENT_TYPE).cloned();
    if status.is_success() {
        if stream && !is_event_stream(content_type.as_ref()) {
            // Nothing has reached the client: another candidate may answer properly.
            return Err(AttemptFailure::InvalidResponse.into());
        }
        if stream {
            let mut out = Response::new(Body::new(stream::ObservedStream::new(
                body,
                finisher.detach(),
                idle_timeout,
                execution_deadline,
            )));
            let h = out.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            h.insert("x-accel-buffering", HeaderValue::from_static("no"));
            return Ok(out);
        }
        let limited = Limited::new(body, MAX_UPSTREAM_BODY_BYTES);
        let bytes = match tokio::time::timeout_at(deadline, limited.collect()).await {
            Err(_) => return Err(AttemptFailure::FirstByteTimeout.into()),
            Ok(Err(_)) => return Err(AttemptFailure::Reset.into()),
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        if !is_json_object(&bytes) {
            return Err(AttemptFailure::InvalidResponse.into());
        }
        finisher.first_byte();
        let usage = Usage::from_json_bytes(&bytes);
        if usage.is_none() {
            // No usage block: the quota settles on the text the answer carries.
            let text = std::str::from_utf8(&bytes).unwrap_or_default();
            finisher.observe_output(switchyard_core::usage::generated_chars(text));
        }
        finisher.finish(StatusCode::OK.as_u16(), None, usage);
        let mut out = Response::new(Body::from(bytes));
        out.headers_mut().insert(
            header::CONTENT_TYPE,
            content_type.unwrap_or(HeaderValue::from_static("application/json")),
        );
        return Ok(out);
    }
    let failure = AttemptFailure::Status(status.as_u16());
    if failure.is_retryable() {
        // A 429's body may say when the window resets, or that credits are gone.
        let body_hint = if status == StatusCode::TOO_MANY_REQUESTS {
            String::from_utf8_lossy(&read_limited(body, BODY_HINT_BYTES, deadline).await)
                .into_owned()
        } else {
            String::new()
        };
        return Err(Failed {
            failure,
            retry_after: parts.headers.get(header::RETRY_AFTER).cloned(),
            passthrough: None,
            reset_at: announced_reset(&parts.headers, &body_hint, now),
            body_hint,
        });
    }
    let body = Bytes::from(switchyard_core::redact::redact(
        &read_limited(body, MAX_ERROR_BODY_BYTES, deadline).await,
        &upstream::credentials(target),
    ));
    let body_hint = String::from_utf8_lossy(&body[..body.len().min(BODY_HINT_BYTES)]).into_owned();
    let mut out = Response::new(Body::from(body));
    *out.status_mut() = status;
    if let Some(ct) = content_type {
        out.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    out.extensions_mut()
        .insert(crate::error::ErrorCode("upstream_client_error"));
    Err(Failed {
        failure,
        retry_after: None,
        passthrough: Some(out),
        reset_at: announced_reset(&parts.headers, &body_hint, now),
        body_hint,
    })
}

/// Reads at most `limit` bytes of a body until `deadline`; what does not fit is dropped.
async fn read_limited(mut body: Incoming, limit: usize, deadline: tokio::time::Instant) -> Bytes {
    let mut buf = Vec::new();
    let read = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(chunk) = frame.into_data() {
                let room = limit.saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if buf.len() >= limit {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, read).await;
    Bytes::from(buf)
}

fn count_attempt(state: &AppState, provider: &str, outcome: &'static str) {
    state
        .metrics
        .upstream_attempts
        .get_or_create(&AttemptLabels {
            provider: provider.to_owned(),
            outcome,
        })
        .inc();
}
