//! The streaming response body: upstream SSE bytes go to the client unchanged and in
//! order, chunk by chunk as they arrive — nothing is buffered beyond the chunk in hand.
//! Beside the passthrough, an incremental SSE parser watches the events for usage.
//!
//! A stream that falls silent for longer than `upstream.stream_idle_timeout_ms` is cut
//! with a typed error frame, so no client ever waits on a dead upstream forever; so is a
//! stream still running at the execution bound (`requestQueue.executionMaxWaitMs`,
//! SPEC R10), which the request log records as 504 `RATE_LIMIT_EXECUTION_TIMEOUT`.
//!
//! The body owns the request's `Finisher`, so the request is finished when the stream
//! ends, fails, or is dropped because the client disconnected. Dropping the body also
//! drops the upstream response, which closes the upstream connection and so cancels the
//! upstream request.

use crate::error::ApiError;
use crate::pipeline::finish::Finisher;
use crate::quota::engine::Growth;
use crate::quota::QuotaBlock;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use serde::Deserialize;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use switchyard_core::sse::SseParser;
use switchyard_core::usage::{generated_chars, Usage};
use tokio::time::Sleep;

/// Frame sent to the client when the upstream breaks mid-stream, so the client sees a
/// typed error rather than a silently truncated answer.
const RESET_FRAME: &str = "data: {\"error\":{\"message\":\"upstream connection broke during the stream\",\"type\":\"upstream_error\",\"code\":\"upstream_connection_reset\",\"param\":null}}\n\n";

/// Frame sent when the upstream stream fell silent for longer than
/// `upstream.stream_idle_timeout_ms`.
const IDLE_FRAME: &str = "data: {\"error\":{\"message\":\"upstream stream stalled\",\"type\":\"upstream_error\",\"code\":\"upstream_stream_idle_timeout\",\"param\":null}}\n\n";

/// Frame sent when the stream ran past the execution bound.
const EXECUTION_FRAME: &str = "data: {\"error\":{\"message\":\"the upstream exchange ran past requestQueue.executionMaxWaitMs\",\"type\":\"timeout_error\",\"code\":\"RATE_LIMIT_EXECUTION_TIMEOUT\",\"param\":null}}\n\n";

/// Frame sent when the upstream ended the stream without `[DONE]` or a `finish_reason`:
/// the answer was cut short, and the client must not take it for a whole one.
const TRUNCATED_FRAME: &str = "data: {\"error\":{\"message\":\"the upstream ended the stream before the answer was complete\",\"type\":\"upstream_error\",\"code\":\"upstream_stream_truncated\",\"param\":null}}\n\n";

/// The request-log code of a stream the quota pool cut.
const QUOTA_CUT_CODE: &str = "quota_exceeded";

/// The request-log code of [`EXECUTION_FRAME`].
const EXECUTION_CODE: &str = "RATE_LIMIT_EXECUTION_TIMEOUT";

/// A stream's pending quota increment (see [`crate::quota::guard::GrowthRequest`]).
type PendingGrowth = Pin<Box<dyn Future<Output = (Growth, u64)> + Send>>;

/// What the final chunk of a stream cut by the quota repeats of the upstream's chunks.
#[derive(Debug, Default, Deserialize)]
struct ChunkIdent {
    #[serde(default)]
    id: String,
    #[serde(default)]
    created: u64,
    #[serde(default)]
    model: String,
}

/// See the module docs.
pub struct ObservedStream {
    /// `None` once the stream was cut: dropping it cancels the upstream request.
    upstream: Option<Incoming>,
    /// The decision on the next quota increment; nothing more is relayed until it is in.
    growing: Option<PendingGrowth>,
    ident: Option<ChunkIdent>,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    execution: Pin<Box<Sleep>>,
    parser: SseParser,
    usage: Option<Usage>,
    finisher: Finisher,
    /// `[DONE]` or a `finish_reason` was seen: the answer is whole.
    complete: bool,
    done: bool,
}

impl ObservedStream {
    pub fn new(
        upstream: Incoming,
        finisher: Finisher,
        idle_timeout: Duration,
        execution_deadline: tokio::time::Instant,
    ) -> Self {
        Self {
            upstream: Some(upstream),
            growing: None,
            ident: None,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            idle_timeout,
            execution: Box::pin(tokio::time::sleep_until(execution_deadline)),
            parser: SseParser::new(),
            usage: None,
            finisher,
            complete: false,
            done: false,
        }
    }

    /// Ends the stream at the execution bound (SPEC R10) with a typed error frame.
    fn cut_at_execution_bound(&mut self) -> Frame<Bytes> {
        tracing::warn!(
            request_id = self.finisher.request_id(),
            "Upstream stream ran past the execution bound; ending the client stream with an error frame."
        );
        self.done = true;
        self.finisher.finish(504, Some(EXECUTION_CODE), self.usage);
        Frame::data(Bytes::from_static(EXECUTION_FRAME.as_bytes()))
    }

    /// Ends the stream because the quota pool refused its next increment (SPEC Q6): a
    /// final chunk with `finish_reason: "length"`, the typed `quota_exceeded` error
    /// frame naming the pool and dimension, and `[DONE]`; the upstream request is
    /// cancelled.
    fn cut_by_quota(&mut self, block: Box<QuotaBlock>) -> Frame<Bytes> {
        tracing::info!(
            request_id = self.finisher.request_id(),
            pool = %block.pool_id,
            dimension = %block.dimension.key(),
            reason = block.reason().as_str(),
            "Quota pool refused a stream's next increment; ending the stream."
        );
        self.done = true;
        self.upstream = None;
        let ident = self.ident.take().unwrap_or_default();
        let last = serde_json::json!({
            "id": ident.id,
            "object": "chat.completion.chunk",
            "created": ident.created,
            "model": ident.model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        });
        let error = ApiError::QuotaExceeded(block).body();
        let text = format!("data: {last}\n\ndata: {error}\n\ndata: [DONE]\n\n");
        self.finisher.finish(200, Some(QUOTA_CUT_CODE), self.usage);
        Frame::data(Bytes::from(text))
    }

    fn observe(&mut self, chunk: &[u8]) {
        let usage = &mut self.usage;
        let complete = &mut self.complete;
        let ident = &mut self.ident;
        let mut generated = 0;
        self.parser.feed(chunk, |event| {
            *complete |= event.ends_answer();
            if ident.is_none() && !event.is_done() {
                *ident = serde_json::from_str(&event.data).ok();
            }
            if let Some(u) = Usage::from_json_bytes(event.data.as_bytes()) {
                usage.get_or_insert_with(Usage::default).merge(u);
            }
            generated += generated_chars(&event.data);
        });
        if generated > 0 {
            self.finisher.observe_output(generated);
            if let Some(request) = self.finisher.quota_growth() {
                self.growing = Some(Box::pin(request.run()));
            }
        }
    }
}

impl Body for ObservedStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(growing) = this.growing.as_mut() {
                let Poll::Ready(decided) = growing.as_mut().poll(cx) else {
                    return Poll::Pending;
                };
                this.growing = None;
                if let Some(block) = this.finisher.apply_quota_growth(decided) {
                    return Poll::Ready(Some(Ok(this.cut_by_quota(block))));
                }
            }
            let Some(upstream) = this.upstream.as_mut() else {
                return Poll::Ready(None);
            };
            // Checked before every read, so an upstream that never pauses is cut too.
            if this.execution.is_elapsed() {
                return Poll::Ready(Some(Ok(this.cut_at_execution_bound())));
            }
            match Pin::new(upstream).poll_frame(cx) {
                Poll::Pending => {
                    if this.execution.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Some(Ok(this.cut_at_execution_bound())));
                    }
                    if this.idle.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    tracing::warn!(
                        request_id = this.finisher.request_id(),
                        idle_timeout_ms = u64::try_from(this.idle_timeout.as_millis()).unwrap_or(u64::MAX),
                        "Upstream stream fell silent; ending the client stream with an error frame."
                    );
                    this.done = true;
                    this.finisher.stream_stalled();
                    this.finisher
                        .finish(200, Some("upstream_stream_idle_timeout"), this.usage);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                        IDLE_FRAME.as_bytes(),
                    )))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers carry nothing a chat client needs; skip them.
                    let Ok(chunk) = frame.into_data() else {
                        continue;
                    };
                    this.finisher.first_byte();
                    this.idle
                        .as_mut()
                        .reset(tokio::time::Instant::now() + this.idle_timeout);
                    this.observe(&chunk);
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                Poll::Ready(Some(Err(e))) => {
                    tracing::warn!(
                        request_id = this.finisher.request_id(),
                        error = %e,
                        "Upstream stream broke after the response started; ending the client stream with an error frame."
                    );
                    this.done = true;
                    this.finisher
                        .finish(200, Some("upstream_connection_reset"), this.usage);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                        RESET_FRAME.as_bytes(),
                    )))));
                }
                Poll::Ready(None) if !this.complete => {
                    tracing::warn!(
                        request_id = this.finisher.request_id(),
                        "Upstream ended the stream before the answer was complete; ending the client stream with an error frame."
                    );
                    this.done = true;
                    this.finisher
                        .finish(200, Some("upstream_stream_truncated"), this.usage);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                        TRUNCATED_FRAME.as_bytes(),
                    )))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.finisher.finish(200, None, this.usage);
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
