//! The streaming response body: upstream SSE bytes go to the client unchanged and in
//! order, chunk by chunk as they arrive — nothing is buffered beyond the chunk in hand.
//! Beside the passthrough, an incremental SSE parser watches the events for usage.
//!
//! The body owns the request's `Finisher`, so the request is finished when the stream
//! ends, fails, or is dropped because the client disconnected. Dropping the body also
//! drops the upstream response, which closes the upstream connection and so cancels the
//! upstream request.

use crate::pipeline::finish::Finisher;
use bytes::Bytes;
use futures_util::Stream;
use std::pin::Pin;
use std::task::{Context, Poll};
use switchyard_core::sse::SseParser;
use switchyard_core::usage::Usage;

type Upstream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// Frame sent to the client when the upstream breaks mid-stream, so the client sees a
/// typed error rather than a silently truncated answer.
const STREAM_ERROR_FRAME: &str = "data: {\"error\":{\"message\":\"upstream connection broke during the stream\",\"type\":\"upstream_error\",\"code\":\"upstream_connection_reset\",\"param\":null}}\n\n";

/// See the module docs.
pub struct ObservedStream {
    upstream: Upstream,
    parser: SseParser,
    usage: Option<Usage>,
    finisher: Finisher,
    done: bool,
}

impl ObservedStream {
    pub fn new(response: reqwest::Response, finisher: Finisher) -> Self {
        Self {
            upstream: Box::pin(response.bytes_stream()),
            parser: SseParser::new(),
            usage: None,
            finisher,
            done: false,
        }
    }

    fn observe(&mut self, chunk: &[u8]) {
        let usage = &mut self.usage;
        self.parser.feed(chunk, |event| {
            if event.data.contains("\"usage\"") {
                if let Some(u) = Usage::from_json_bytes(event.data.as_bytes()) {
                    usage.get_or_insert_with(Usage::default).merge(u);
                }
            }
        });
    }
}

impl Stream for ObservedStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match this.upstream.as_mut().poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(chunk))) => {
                this.finisher.first_byte();
                this.observe(&chunk);
                Poll::Ready(Some(Ok(chunk)))
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
                Poll::Ready(Some(Ok(Bytes::from_static(STREAM_ERROR_FRAME.as_bytes()))))
            }
            Poll::Ready(None) => {
                this.done = true;
                this.finisher.finish(200, None, this.usage);
                Poll::Ready(None)
            }
        }
    }
}
