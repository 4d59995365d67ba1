//! The judge step of an attempt (SPEC R11): the upstream's answer becomes the client
//! response or a failure, and nothing reaches the client before it is judged. A whole
//! answer is read, checked, redacted and translated; a stream goes through the body
//! stack (byte backstop → scrub → translate → watch) and commits on its first output,
//! handing the attempt's guards to the finisher; a refusal is read (bounded, redacted)
//! for what it announces, or passed on when it is the client's error.

use super::attempt::Guards;
use super::finish::Finisher;
use crate::body::deadline::DeadlineBody;
use crate::body::metered::MeteredBody;
use crate::body::scrub::ScrubBody;
use crate::body::translate::TranslateBody;
use crate::body::watch::{self, Judged, Watched};
use crate::body::whole;
use crate::client::{self, UpstreamBody};
use crate::heads::Read;
use crate::upstream::{self, Upstream};
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::BodyExt;
use std::time::Duration;
use switchyard_core::format::{translate, Format};
use switchyard_core::http1;
use switchyard_core::outcome::{is_retryable_status, AttemptFailure};
use switchyard_core::quota::signals::{self, Signal};
use switchyard_core::redact::{self, Secrets, StreamScrubber};
use switchyard_core::resilience::rules::Rules;
use switchyard_core::resilience::verdict::{self, Answer, Subject, Verdict};
use switchyard_core::stream::watchdog::Limits;
use switchyard_core::usage::Usage;

/// Largest upstream error body relayed to the client; error bodies are short, and a
/// misbehaving upstream must not make the gateway buffer without bound.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Largest non-streaming upstream answer the gateway buffers. Chat completions are a few
/// KiB, long ones a few hundred; 64 MiB bounds memory per request against a misbehaving
/// upstream while leaving room for large tool-call payloads.
const MAX_UPSTREAM_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A failed attempt, as read: what the verdict judges ([`Failed::judge`]).
pub(super) struct Failed {
    pub failure: AttemptFailure,
    /// The upstream's `Retry-After`, relayed if this is the last failure.
    pub retry_after: Option<HeaderValue>,
    /// The upstream's error answer, read and redacted.
    pub refusal: Option<Refusal>,
    /// A stream's own error event (already redacted by the stream's scrubber).
    pub event: Option<String>,
}

impl From<AttemptFailure> for Failed {
    fn from(failure: AttemptFailure) -> Self {
        Self {
            failure,
            retry_after: None,
            refusal: None,
            event: None,
        }
    }
}

/// The fields of a successful upstream answer the pipeline reads when it records the
/// provider's saturation headers (SPEC Q6): those, kept where they are in the head under
/// their place among the names read (they are read as text), and its content type. Any other answer is read whole: provider
/// error rules may match any field.
pub(super) fn success_read_name(name: &[u8]) -> Read {
    match signals::place(name) {
        Some(place) => Read::Keep(place),
        None => content_type_name(name),
    }
}

/// The field of a successful upstream answer the pipeline reads when it does not record
/// the saturation headers: its content type. A provider sends its rate-limit headers
/// on every answer (OpenAI six `x-ratelimit-*`, Anthropic a dozen), and converting a
/// field into http's types costs about 550 instructions.
pub(super) fn content_type_name(name: &[u8]) -> Read {
    if http1::name_is(name, b"content-type") {
        Read::Map(header::CONTENT_TYPE)
    } else {
        Read::Skip
    }
}

/// The provider's saturation readings of an answer (SPEC Q6), from the fields its head
/// kept, numbered as they were read ([`success_read_name`]), and those in its header
/// map (an answer over HTTP/2). As bytes: numbers are parsed without text.
pub(super) fn saturation(response: &Response<UpstreamBody>, now: u64) -> Vec<Signal> {
    let mapped = response.headers().iter().filter_map(|(name, value)| {
        Some((signals::place(name.as_str().as_bytes())?, value.as_bytes()))
    });
    signals::parse_placed(client::kept_fields(response).chain(mapped), now)
}

/// An upstream error answer: its headers and its redacted body (at most
/// [`MAX_ERROR_BODY_BYTES`]).
pub(super) struct Refusal {
    headers: HeaderMap,
    body: Bytes,
}

/// Bytes of an upstream error body the verdict reads (rules, reset text, credits).
const BODY_HINT_BYTES: usize = 4096;

impl Failed {
    /// What the failure means for `subject` at `now` (SPEC R13): the one classifier.
    pub fn judge(&self, rules: &Rules, subject: Subject<'_>, now: u64) -> Verdict {
        if let (Some(event), AttemptFailure::Stream(_)) = (&self.event, self.failure) {
            return verdict::judge(rules, subject, Answer::StreamError { event }, now);
        }
        let (Some(r), AttemptFailure::Status(status)) = (&self.refusal, self.failure) else {
            return verdict::judge(rules, subject, Answer::Failed(self.failure), now);
        };
        let head = &r.body[..r.body.len().min(BODY_HINT_BYTES)];
        let body = String::from_utf8_lossy(head);
        let headers = upstream::header_pairs(&r.headers, |_| true);
        let answer = Answer::Status {
            status,
            headers: &headers,
            body: &body,
        };
        verdict::judge(rules, subject, answer, now)
    }

    /// The upstream's error answer as the client sees it, with `status` (the restated
    /// one): redacted, and translated into the client's format.
    pub fn client_answer(
        &mut self,
        status: u16,
        upstream: &Upstream,
        client: Format,
    ) -> Option<Response> {
        let r = self.refusal.take()?;
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        let upstream_format = upstream.adapter.format();
        let (body, content_type) = if client == upstream_format {
            (r.body, r.headers.get(header::CONTENT_TYPE).cloned())
        } else {
            let translated = translate::error(client, upstream_format, status.as_u16(), &r.body);
            (
                Bytes::from(translated),
                Some(HeaderValue::from_static("application/json")),
            )
        };
        let mut out = Response::new(Body::from(body));
        *out.status_mut() = status;
        if let Some(ct) = content_type {
            out.headers_mut().insert(header::CONTENT_TYPE, ct);
        }
        out.extensions_mut()
            .insert(crate::error::ErrorCode("upstream_client_error"));
        Some(out)
    }
}

/// What an attempt expects of the upstream's answer, and the bounds it reads it in.
pub(super) struct Expect<'a> {
    /// A stream is expected: its watchdog's limits, from the time the attempt was sent.
    pub watch: Option<(Limits, tokio::time::Instant)>,
    /// The first-byte deadline (and, when not streaming, the whole answer's).
    pub deadline: tokio::time::Instant,
    /// The byte-level backstop between a stream's frames.
    pub idle_timeout: Duration,
    /// The connection, whose secrets are redacted from relayed error text.
    pub upstream: &'a Upstream,
    /// The client's format, for stream error frames and translation.
    pub client: Format,
    /// The answer's time in unix seconds, for translated answers' `created`.
    pub now_s: u64,
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

/// Judges an upstream answer: a success becomes the client response (a stream once it
/// commits on its first output), anything else a [`Failed`] for the verdict.
pub(super) async fn judge(
    response: axum::http::Response<UpstreamBody>,
    expect: Expect<'_>,
    guards: &mut Guards,
    finisher: &mut Finisher,
) -> Result<Response, Failed> {
    let (parts, body) = response.into_parts();
    if !parts.status.is_success() {
        return Err(refused(parts, body, &expect).await);
    }
    match expect.watch {
        Some((limits, origin)) => {
            let content_type = parts.headers.get(header::CONTENT_TYPE);
            // A Codex subscription backend streams without a Content-Type: only one
            // that says something else is refused. Nothing has reached the client:
            // another candidate may answer properly.
            if content_type.is_some() && !is_event_stream(content_type) {
                return Err(AttemptFailure::InvalidResponse.into());
            }
            let committed = Committed {
                guards,
                finisher,
                client: expect.client,
                headers: parts.headers,
            };
            // Boxed: a stream's future is most of an attempt's, and every attempt's
            // future (copied into its box per attempt) would otherwise carry it. In a
            // statement of its own, so the unboxed future keeps no slot here.
            let streaming = Box::pin(stream(body, &expect, limits, origin, committed));
            streaming.await
        }
        None => whole(body, parts.headers, &expect, guards, finisher).await,
    }
}

/// A stream, watched from the time it was sent (`origin`) and committed on its first
/// output.
async fn stream(
    body: UpstreamBody,
    expect: &Expect<'_>,
    limits: Limits,
    origin: tokio::time::Instant,
    committed: Committed<'_>,
) -> Result<Response, Failed> {
    let target = expect.upstream;
    let client = expect.client;
    let upstream = ScrubBody::new(
        DeadlineBody::new(body, expect.idle_timeout),
        StreamScrubber::new(target.secrets.clone()),
    );
    match translate::Stream::new(client, target.adapter.format(), expect.now_s) {
        None => {
            let watched = Watched::new(upstream, client.stream_reader(), limits, origin);
            streamed(watched, committed).await
        }
        Some(translator) => {
            let inner = TranslateBody::new(upstream, translator);
            let watched = Watched::new(inner, client.stream_reader(), limits, origin);
            streamed(watched, committed).await
        }
    }
}

/// A whole answer, read within the attempt's deadline, checked, redacted and translated
/// before it goes to the client. The client's answer carries the upstream's
/// `Content-Type` only (its map, cleared, is reused: no allocation).
async fn whole(
    body: UpstreamBody,
    mut headers: HeaderMap,
    expect: &Expect<'_>,
    guards: &mut Guards,
    finisher: &mut Finisher,
) -> Result<Response, Failed> {
    let (target, client) = (expect.upstream, expect.client);
    let upstream_format = target.adapter.format();
    let read = whole::read(body, MAX_UPSTREAM_BODY_BYTES);
    let bytes = match tokio::time::timeout_at(expect.deadline, read).await {
        Err(_) => return Err(AttemptFailure::FirstByteTimeout.into()),
        Ok(Err(_)) => return Err(AttemptFailure::Reset.into()),
        Ok(Ok(bytes)) => bytes,
    };
    let Some(bytes) = target.whole_answer(bytes) else {
        return Err(AttemptFailure::InvalidResponse.into());
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
        match translate::response(client, upstream_format, &bytes, expect.now_s) {
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
    // Most often the map holds the upstream's one content type alone, which the client's
    // answer carries as it is: walked, not looked up (a lookup hashes the name).
    let only_type = headers.len() == 1 && headers.keys().all(|n| n == header::CONTENT_TYPE);
    if client != upstream_format || !only_type {
        let content_type = match headers.get(header::CONTENT_TYPE) {
            Some(ct) if client == upstream_format => ct.clone(),
            _ => HeaderValue::from_static("application/json"),
        };
        headers.clear();
        headers.insert(header::CONTENT_TYPE, content_type);
    }
    let mut out = Response::new(Body::from(bytes));
    *out.headers_mut() = headers;
    Ok(out)
}

/// How long a retryable refusal's body is waited for: it comes with the headers, and
/// failing over must not wait for a body that trickles.
const RETRYABLE_BODY_WAIT: Duration = Duration::from_secs(1);

/// An upstream refusal, read (bounded, redacted) for the verdict and, if it may be the
/// client's to see, for the client: a retryable one's first [`BODY_HINT_BYTES`] within
/// [`RETRYABLE_BODY_WAIT`], any other's up to [`MAX_ERROR_BODY_BYTES`] within the
/// attempt's deadline.
async fn refused(
    parts: axum::http::response::Parts,
    body: UpstreamBody,
    expect: &Expect<'_>,
) -> Failed {
    let (limit, deadline) = if is_retryable_status(parts.status.as_u16()) {
        let soon = tokio::time::Instant::now() + RETRYABLE_BODY_WAIT;
        (BODY_HINT_BYTES, expect.deadline.min(soon))
    } else {
        (MAX_ERROR_BODY_BYTES, expect.deadline)
    };
    let body = read_error_text(body, limit, deadline, &expect.upstream.secrets).await;
    Failed {
        failure: AttemptFailure::Status(parts.status.as_u16()),
        retry_after: parts.headers.get(header::RETRY_AFTER).cloned(),
        refusal: Some(Refusal {
            headers: parts.headers,
            body: Bytes::from(body),
        }),
        event: None,
    }
}

/// What a streamed attempt hands over once it commits.
struct Committed<'a> {
    guards: &'a mut Guards,
    finisher: &'a mut Finisher,
    client: Format,
    /// The upstream answer's header map: cleared, it carries the client's answer's.
    headers: HeaderMap,
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
        Judged::Failed(cut) => {
            return Err(Failed {
                event: watched.reader().error_event().map(str::to_owned),
                ..AttemptFailure::Stream(cut).into()
            })
        }
    };
    c.guards.hand_over(c.finisher);
    let body = MeteredBody::new(watched, held, c.client, c.finisher.detach());
    let mut h = c.headers;
    h.clear();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    let mut out = Response::new(Body::new(body));
    *out.headers_mut() = h;
    Ok(out)
}

/// An upstream error body as the gateway may use it: at most `limit` bytes, read until
/// `deadline`, with `secrets` and token-shaped text redacted. The only reader of error
/// bodies, so no unredacted upstream error text reaches a client, a log or a decision.
async fn read_error_text(
    body: UpstreamBody,
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
    mut body: UpstreamBody,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_successful_answer_is_read_for_its_content_type_and_saturation_headers_only() {
        for sent in ["Content-Type", "content-type", "CONTENT-TYPE"] {
            let mapped = Read::Map(header::CONTENT_TYPE);
            assert_eq!(success_read_name(sent.as_bytes()), mapped, "{sent}");
            assert_eq!(content_type_name(sent.as_bytes()), mapped, "{sent}");
        }
        for (sent, place) in [
            ("X-RateLimit-Remaining-Tokens", 16),
            ("anthropic-ratelimit-unified-5h-utilization", 10),
            ("Anthropic-RateLimit-Unified-Status", 8),
            ("x-codex-primary-used-percent", 0),
            ("X-CODEX-SECONDARY-RESET-AT", 7),
        ] {
            assert_eq!(
                success_read_name(sent.as_bytes()),
                Read::Keep(place),
                "{sent}"
            );
            assert_eq!(content_type_name(sent.as_bytes()), Read::Skip, "{sent}");
        }
        for skipped in [
            "date",
            "content-length",
            "cf-ray",
            "x-ratelimit",
            "x-codex",
            "y-ratelimit-limit-tokens",
            "x-ratelimit-limit-tokens-usage-based",
            "anthropic-ratelimit-unified",
            "anthropic-ratelimit-tokens-limit",
            "retry-after",
            "",
        ] {
            assert_eq!(
                success_read_name(skipped.as_bytes()),
                Read::Skip,
                "{skipped}"
            );
        }
    }
}
