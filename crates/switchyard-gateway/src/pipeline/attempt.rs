//! One attempt on one candidate: take its concurrency slots, pass the resilience check,
//! reserve quota, send upstream, and turn the answer into the client response or a
//! [`Report`] for the dispatch machine. The attempt owns what it holds — slot permit and
//! quota reservation in [`Guards`], the half-open probe slot in the resilience
//! admission — and each is released when dropped; only an answer that goes to the
//! client hands the permit and the reservation to the request's finisher, and only a
//! recorded outcome settles the probe. What to try next is not decided here
//! ([`switchyard_core::dispatch`]).

use super::finish::Finisher;
use super::{concurrency, quota};
use crate::body::deadline::DeadlineBody;
use crate::body::metered::MeteredBody;
use crate::body::scrub::ScrubBody;
use crate::body::translate::TranslateBody;
use crate::body::watch::{self, Judged, Watched};
use crate::clock::{RequestClock, Stopwatch};
use crate::runtime::gate::Permit;
use crate::runtime::quota::{QuotaBlock, QuotaGuard};
use crate::runtime::resilience;
use crate::runtime::Runtime;
use crate::snapshot::Snapshot;
use crate::telemetry::metrics::model_label;
use crate::upstream::ProtocolHeaders;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use std::time::Duration;
use switchyard_core::catalog::ApiKey;
use switchyard_core::dispatch::{self, Slot, Try};
use switchyard_core::format::{translate, Format};
use switchyard_core::llm;
use switchyard_core::outcome::{AttemptFailure, StreamCut};
use switchyard_core::quota::cost::Estimate;
use switchyard_core::redact::{self, Secrets, StreamScrubber};
use switchyard_core::resilience::admission;
use switchyard_core::resilience::cooldown;
use switchyard_core::routing::{strategy, Candidate, Exclusion, Reason};
use switchyard_core::stream::budget::Facts;
use switchyard_core::stream::watchdog::Limits;
use switchyard_core::usage::Usage;

/// Largest upstream error body relayed to the client; error bodies are short, and a
/// misbehaving upstream must not make the gateway buffer without bound.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Largest non-streaming upstream answer the gateway buffers. Chat completions are a few
/// KiB, long ones a few hundred; 64 MiB bounds memory per request against a misbehaving
/// upstream while leaving room for large tool-call payloads.
const MAX_UPSTREAM_BODY_BYTES: usize = 64 * 1024 * 1024;

/// An upstream failure as the client may see it, if it is the last one.
#[derive(Debug)]
pub struct UpstreamFailure {
    /// Says which upstream failed and how.
    pub message: String,
    /// The upstream's `Retry-After`, relayed.
    pub retry_after: Option<HeaderValue>,
}

/// What the dispatch machine is told of an attempt that did not answer.
pub type Report = dispatch::Report<Box<QuotaBlock>, Response, UpstreamFailure>;

/// What one request's attempts share: the runtime parts they use, the snapshot, the
/// request and its plan.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub runtime: &'a Runtime,
    pub clock: RequestClock,
    pub snap: &'a Snapshot,
    pub key: &'a ApiKey,
    pub request: &'a llm::Request,
    /// The client's protocol headers, for upstreams of its format.
    pub protocol: &'a ProtocolHeaders,
    /// Why the first candidate that could not take the request in its format could not.
    pub untranslatable: std::sync::OnceLock<String>,
    /// Why the first candidate whose pool meters `usd` could not price the model.
    pub unpriced: std::sync::OnceLock<String>,
    pub candidates: &'a [Candidate],
    pub strategy: strategy::Kind,
    pub estimate: Estimate,
    /// The request's facts for the first-output budget, read once when first needed.
    pub facts: std::sync::OnceLock<Facts>,
}

/// An attempt's result, and how long it waited for its slots.
#[derive(Debug)]
pub struct Tried {
    pub slot_wait_ms: u64,
    pub result: Result<Response, Report>,
}

impl From<Report> for Tried {
    fn from(report: Report) -> Self {
        Self {
            slot_wait_ms: 0,
            result: Err(report),
        }
    }
}

/// What an attempt holds; see the module docs. (The probe slot is held by the
/// resilience check's [`resilience::Admitted`], until the outcome is recorded.)
struct Guards {
    permit: Option<Permit>,
    quota: Option<QuotaGuard>,
}

impl Guards {
    /// The answer goes to the client: the finisher holds the slot and settles the quota.
    fn hand_over(&mut self, finisher: &mut Finisher) {
        finisher.hold(self.permit.take(), self.quota.take());
    }
}

/// `candidate` left out for `reason`.
fn excluded(candidate: &Candidate, reason: Reason) -> Exclusion {
    let conn = &candidate.connection;
    Exclusion {
        target: format!("{}/{}", conn.provider, candidate.upstream_model),
        connection: conn.id.clone(),
        reason,
    }
}

/// Makes the attempt `t` asks for.
pub async fn run(ctx: &Ctx<'_>, t: Try, finisher: &mut Finisher) -> Tried {
    let Some(candidate) = ctx.candidates.get(t.candidate) else {
        return Report::Gone.into();
    };
    // Slots first, so a half-open probe is never held while waiting for them and the
    // resilience check below sees the state after any wait.
    let mut slot_wait_ms = 0;
    let permit = match t.slot {
        Slot::IfFree => match concurrency::try_take(ctx, candidate) {
            Some(permit) => permit,
            None => return Report::Busy.into(),
        },
        Slot::Wait { waited_ms } => {
            let watch = Stopwatch::start();
            let admitted =
                concurrency::admit(ctx, candidate, waited_ms, finisher.request_id()).await;
            slot_wait_ms = watch.elapsed_ms();
            match admitted {
                Ok(permit) => permit,
                Err(refusal) => {
                    return Tried {
                        slot_wait_ms,
                        result: Err(Report::Excluded(excluded(
                            candidate,
                            Reason::SlotRefused(refusal),
                        ))),
                    }
                }
            }
        }
    };
    let result = attempt(ctx, t, candidate, permit, finisher).await;
    Tried {
        slot_wait_ms,
        result,
    }
}

/// The attempt once its slots are held.
async fn attempt(
    ctx: &Ctx<'_>,
    t: Try,
    candidate: &Candidate,
    permit: Option<Permit>,
    finisher: &mut Finisher,
) -> Result<Response, Report> {
    let (runtime, clock, snap) = (ctx.runtime, ctx.clock, ctx.snap);
    let conn = &candidate.connection;
    let target = snap.upstreams.get(conn.index).ok_or(Report::Gone)?;
    let request = ctx.request;
    let upstream_format = target.adapter.format();
    let output_limit = snap.output_limit(&conn.provider, &candidate.upstream_model);
    let body = request
        .upstream_body(upstream_format, &candidate.upstream_model, output_limit)
        .map_err(|e| {
            let message = format!(
                "the request cannot be sent to `{}/{}`: {e}",
                conn.provider, candidate.upstream_model
            );
            tracing::info!(request_id = finisher.request_id(), %message, "Candidate skipped.");
            // The first one is the client's error if no candidate can take the request.
            let _ = ctx.untranslatable.set(message);
            Report::Excluded(excluded(candidate, Reason::Untranslatable))
        })?;
    let body = if target.codex_backend {
        switchyard_core::format::responses::for_codex_backend(body, request.stream)
    } else {
        body
    };
    let attempt = resilience::Attempt {
        conn,
        model: &candidate.upstream_model,
        may_defer: t.may_defer,
        budget_ms: snap.settings.first_byte_timeout_ms,
    };
    let res_settings = &snap.settings.resilience;
    let admitted = runtime
        .resilience
        .check(attempt, res_settings, clock.now_ms())
        .map_err(|reason| Report::Excluded(excluded(candidate, reason)))?;
    let mut guards = Guards {
        permit,
        quota: None,
    };
    let pooled = snap.quota.pool_of(conn.index);
    let (quota, quota_headers) = quota::admit(ctx, candidate, output_limit, finisher.request_id())
        .await
        .map_err(|refusal| match refusal {
            quota::Refusal::Blocked(block) => Report::QuotaBlocked {
                exclusion: excluded(
                    candidate,
                    Reason::QuotaBlocked {
                        retry_after_ms: block.retry_after_ms,
                    },
                ),
                block,
            },
            quota::Refusal::Unpriced(message) => {
                let _ = ctx.unpriced.set(message);
                Report::Excluded(excluded(candidate, Reason::Unpriced))
            }
        })?;
    guards.quota = quota;
    finisher.attempt(
        candidate,
        model_label(&snap.catalog, &conn.provider, &candidate.upstream_model),
    );
    let watch = Stopwatch::start();
    // One budget per attempt for the headers and, when not streaming, the whole body; a
    // stream is bounded by the execution limit (SPEC R10), never shorter than that, and
    // watched (R11, R12): its headers are due within its first-output budget too.
    let dispatched = tokio::time::Instant::now();
    let mut deadline = dispatched + Duration::from_millis(snap.settings.first_byte_timeout_ms);
    let limits = request.stream.then(|| {
        let total_ms = admission::execution_bound_ms(
            &snap.settings.concurrency.queue.with(&conn.queue),
            snap.settings.first_byte_timeout_ms,
        );
        // Read only when the first-output budget adapts to them.
        let facts = || {
            let third_party_claude = upstream_format
                == switchyard_core::format::Format::AnthropicMessages
                && !conn.base_url.contains("api.anthropic.com");
            ctx.facts
                .get_or_init(|| Facts::of(request))
                .on_third_party_claude(third_party_claude)
        };
        switchyard_core::stream::limits(&snap.settings.stream, facts, t.last, total_ms)
    });
    let first_output_deadline = limits
        .and_then(|l| l.first_output_ms)
        .map(|ms| dispatched + Duration::from_millis(ms))
        .filter(|d| *d < deadline);
    if let Some(d) = first_output_deadline {
        deadline = d;
    }
    let sent = super::wall::send(
        ctx,
        target,
        &conn.id,
        Bytes::from(body),
        deadline,
        finisher.request_id(),
    )
    .await;
    // The upstream's answer (or failure) is judged at the time it came; the outcome is
    // recorded once it is read.
    let answered = clock.now_ms();
    let outcome = match sent {
        Ok(response) => {
            if pooled.is_some() {
                runtime
                    .quota
                    .record_signals(&conn.id, response.headers(), answered);
            }
            target
                .metrics
                .latency
                .observe(watch.elapsed().as_secs_f64());
            let expect = Expect {
                watch: limits.map(|l| (l, dispatched)),
                deadline,
                idle_timeout: Duration::from_millis(snap.settings.stream_idle_timeout_ms),
                upstream: target,
                client: request.format,
                now_s: answered / 1000,
            };
            handle_response(response, expect, &mut guards, finisher, answered).await
        }
        // Headers past the first-output budget: the stream did not start in time.
        Err(AttemptFailure::FirstByteTimeout) if first_output_deadline.is_some() => {
            Err(Failed::from(AttemptFailure::Stream(StreamCut::FirstOutput)))
        }
        Err(failure) => Err(Failed::from(failure)),
    };
    let read = clock.now_ms();
    let failed = match outcome {
        Ok(mut response) => {
            // A stream's outcome is known when it ends (the finisher records it).
            let outcome = if request.stream {
                resilience::Outcome::Answered
            } else {
                resilience::Outcome::Success
            };
            runtime
                .resilience
                .record(attempt, &outcome, res_settings, admitted, read);
            target.metrics.success.inc();
            quota::add_headers(&mut response, quota_headers);
            return Ok(response);
        }
        Err(failed) => failed,
    };
    runtime.resilience.record(
        attempt,
        &resilience::Outcome::Failure {
            failure: failed.failure,
            body: &failed.body_hint,
            reset_at: failed.reset_at,
        },
        res_settings,
        admitted,
        read,
    );
    target.metrics.count_attempt(failed.failure.label());
    if let Some(response) = failed.passthrough {
        return Err(Report::Rejected(response));
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
    let detail = UpstreamFailure {
        message,
        retry_after: failed.retry_after,
    };
    // A crawl before anything reached the client may be the account's bad moment: the
    // same account is tried once more (SPEC R12).
    if failed.failure == AttemptFailure::Stream(StreamCut::Throughput) {
        return Err(Report::RetrySame {
            failure: failed.failure,
            detail,
        });
    }
    Err(Report::Failed {
        failure: failed.failure,
        announced: detail.retry_after.is_some(),
        detail,
    })
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
            n == "retry-after"
                || n.starts_with("x-ratelimit-reset")
                || n == "anthropic-ratelimit-unified-status"
                || n == "anthropic-ratelimit-unified-reset"
                || n.starts_with("x-codex-")
        })
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)))
        .collect();
    cooldown::announced_reset(&pairs, body, now)
}

/// What an attempt expects of the upstream's answer, and the bounds it reads it in.
struct Expect<'a> {
    /// A stream is expected: its watchdog's limits, from the time the attempt was sent.
    watch: Option<(Limits, tokio::time::Instant)>,
    /// The first-byte deadline (and, when not streaming, the whole answer's).
    deadline: tokio::time::Instant,
    /// The byte-level backstop between a stream's frames.
    idle_timeout: Duration,
    /// The connection, whose secrets are redacted from relayed error text.
    upstream: &'a crate::upstream::Upstream,
    /// The client's format, for stream error frames and translation.
    client: Format,
    /// The answer's time in unix seconds, for translated answers' `created`.
    now_s: u64,
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
    guards: &mut Guards,
    finisher: &mut Finisher,
    now: u64,
) -> Result<Response, Failed> {
    let Expect {
        watch,
        deadline,
        idle_timeout,
        upstream: target,
        client,
        now_s,
    } = expect;
    let stream = watch.is_some();
    let upstream_format = target.adapter.format();
    let (parts, body) = response.into_parts();
    let status = parts.status;
    let content_type = parts.headers.get(header::CONTENT_TYPE).cloned();
    if status.is_success() {
        // A Codex subscription backend streams without a Content-Type: only one that says
        // something else is refused.
        if stream && content_type.is_some() && !is_event_stream(content_type.as_ref()) {
            // Nothing has reached the client: another candidate may answer properly.
            return Err(AttemptFailure::InvalidResponse.into());
        }
        if let Some((limits, origin)) = watch {
            let upstream = ScrubBody::new(
                DeadlineBody::new(body, idle_timeout),
                StreamScrubber::new(target.secrets.clone()),
            );
            let committed = Committed {
                guards,
                finisher,
                client,
            };
            return match translate::Stream::new(client, upstream_format, now_s) {
                None => {
                    let watched = Watched::new(upstream, client.stream_reader(), limits, origin);
                    streamed(watched, committed).await
                }
                Some(translator) => {
                    let inner = TranslateBody::new(upstream, translator);
                    let watched = Watched::new(inner, client.stream_reader(), limits, origin);
                    streamed(watched, committed).await
                }
            };
        }
        let limited = Limited::new(body, MAX_UPSTREAM_BODY_BYTES);
        let bytes = match tokio::time::timeout_at(deadline, limited.collect()).await {
            Err(_) => return Err(AttemptFailure::FirstByteTimeout.into()),
            Ok(Err(_)) => return Err(AttemptFailure::Reset.into()),
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        // A Codex subscription backend streamed what the client asked for whole.
        let bytes = if target.codex_backend {
            let stream = redact::scrub_stream(&bytes, &target.secrets);
            match switchyard_core::format::responses::final_response(&stream) {
                Some(response) => Bytes::from(response),
                None => return Err(AttemptFailure::InvalidResponse.into()),
            }
        } else {
            bytes
        };
        if !is_json_object(&bytes) {
            return Err(AttemptFailure::InvalidResponse.into());
        }
        // An answer that is an error (a failed Responses object) is relayed redacted.
        let bytes = match redact::scrub_body(&bytes, &target.secrets) {
            Some(scrubbed) => Bytes::from(scrubbed),
            None => bytes,
        };
        let bytes = if client == upstream_format {
            bytes
        } else {
            match translate::response(client, upstream_format, &bytes, now_s) {
                Ok(translated) => Bytes::from(translated),
                Err(e) => {
                    tracing::warn!(
                        request_id = finisher.request_id(),
                        error = %e,
                        "Upstream answer could not be translated; trying the next candidate."
                    );
                    return Err(AttemptFailure::InvalidResponse.into());
                }
            }
        };
        guards.hand_over(finisher);
        finisher.first_byte();
        let usage = Usage::from_json_bytes(&bytes);
        if usage.is_none() {
            // No usage block: the quota settles on the text the answer carries.
            let text = std::str::from_utf8(&bytes).unwrap_or_default();
            finisher.observe_output(switchyard_core::usage::generated_chars(text));
        }
        finisher.finish(StatusCode::OK.as_u16(), None, usage);
        let content_type = match content_type {
            Some(ct) if client == upstream_format => ct,
            _ => HeaderValue::from_static("application/json"),
        };
        let mut out = Response::new(Body::from(bytes));
        out.headers_mut().insert(header::CONTENT_TYPE, content_type);
        return Ok(out);
    }
    let failure = AttemptFailure::Status(status.as_u16());
    if failure.is_retryable() {
        // A 429's body may say when the window resets, or that credits are gone.
        let body_hint = if status == StatusCode::TOO_MANY_REQUESTS {
            let text = read_error_text(body, BODY_HINT_BYTES, deadline, &target.secrets).await;
            String::from_utf8_lossy(&text).into_owned()
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
    let redacted = read_error_text(body, MAX_ERROR_BODY_BYTES, deadline, &target.secrets).await;
    let (body, content_type) = if client == upstream_format {
        (Bytes::from(redacted), content_type)
    } else {
        let translated = translate::error(client, upstream_format, status.as_u16(), &redacted);
        (
            Bytes::from(translated),
            Some(HeaderValue::from_static("application/json")),
        )
    };
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

/// What a streamed attempt hands over once it commits.
struct Committed<'a> {
    guards: &'a mut Guards,
    finisher: &'a mut Finisher,
    client: Format,
}

/// Judges a stream before anything of it reaches the client (SPEC R11): on its first
/// output it commits — the guards go to the finisher, which goes into the body — and
/// the client gets what was held back and then the rest; a stream that fails before is
/// a failed attempt, with nothing sent.
async fn streamed<B>(mut watched: Watched<B>, c: Committed<'_>) -> Result<Response, Failed>
where
    B: http_body::Body<Data = Bytes, Error = crate::body::deadline::Cut> + Unpin + Send + 'static,
{
    let held = match watch::judge(&mut watched).await {
        Judged::Commit { held, progress } => (held, progress),
        Judged::Failed(cut) => return Err(AttemptFailure::Stream(cut).into()),
    };
    c.guards.hand_over(c.finisher);
    let body = MeteredBody::new(watched, held, c.client, c.finisher.detach());
    let mut out = Response::new(Body::new(body));
    let h = out.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(out)
}

/// An upstream error body as the gateway may use it: at most `limit` bytes, read until
/// `deadline`, with `secrets` and token-shaped text redacted. The only reader of error
/// bodies, so no unredacted upstream error text reaches a client, a log or a decision.
async fn read_error_text(
    body: Incoming,
    limit: usize,
    deadline: tokio::time::Instant,
    secrets: &Secrets,
) -> Vec<u8> {
    match read_limited(body, limit, deadline).await {
        (text, false) => redact::redact(&text, secrets),
        // Cut at the limit, perhaps inside a secret.
        (text, true) => redact::redact_truncated(&text, secrets),
    }
}

/// Reads at most `limit` bytes of a body until `deadline`; what does not fit is dropped.
/// Says whether the limit was reached (the body may go on).
async fn read_limited(
    mut body: Incoming,
    limit: usize,
    deadline: tokio::time::Instant,
) -> (Bytes, bool) {
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
    let full = buf.len() >= limit;
    (Bytes::from(buf), full)
}
