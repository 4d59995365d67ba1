//! The outer layer of the streaming body, once the attempt committed: what the judge
//! held back goes first, then frames go to the client unchanged and in order, as they
//! arrive. The watched layer below ([`super::watch`]) has read each for its
//! [`Progress`]; generated text past the quota reservation asks the pool for the next
//! increment before more is relayed (SPEC Q6). A stream that ends early — cut by the
//! watchdog or the byte-level deadline, broken, truncated, or refused by the quota —
//! ends with its format's terminal frames, and a failure of the upstream's is reported
//! to resilience (SPEC R11). The request's bookkeeping (a [`Meter`]: the pipeline's
//! finisher) lives here, so the request is finished exactly once: when the stream ends,
//! fails, or is dropped because the client went away (which is never the upstream's
//! failure).
//!
//! It knows the finisher only through the `Meter` trait and does not import the pipeline;
//! a stream cut after it committed ends here and is never replayed on another upstream.

use super::deadline::Cut;
use super::watch::{Event, Watched};
use crate::error::{render, ApiError, StreamError};
use crate::runtime::quota::engine::Growth;
use crate::runtime::quota::guard::GrowthRequest;
use crate::runtime::quota::QuotaBlock;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use switchyard_core::format::Format;
use switchyard_core::outcome::StreamCut;
use switchyard_core::stream::watchdog::Trip;
use switchyard_core::stream::Progress;
use switchyard_core::usage::Usage;

/// The request-log code of a stream the quota pool cut.
const QUOTA_CUT_CODE: &str = "quota_exceeded";

/// The request-log code of a stream the upstream ended with its own error event.
const UPSTREAM_ERROR_CODE: &str = "upstream_stream_error";

/// A stream's pending quota increment (see [`crate::runtime::quota::guard::GrowthRequest`]).
type PendingGrowth = Pin<Box<dyn Future<Output = (Growth, u64)> + Send>>;

/// The request's bookkeeping as the stream drives it.
pub trait Meter {
    fn request_id(&self) -> &str;
    /// The first byte reached the client.
    fn first_byte(&mut self);
    /// Generated text relayed, in characters.
    fn observe_output(&mut self, chars: usize);
    /// The next quota increment to decide, when the text has passed the reservation.
    fn quota_growth(&self) -> Option<GrowthRequest>;
    /// Applies a decided increment; a refusal ends the stream.
    fn apply_quota_growth(&mut self, decided: (Growth, u64)) -> Option<Box<QuotaBlock>>;
    /// The upstream's stream ended, after it committed: whole, or failed with `cut` (and
    /// the upstream's own error `event`, when it sent one).
    fn stream_ended(&mut self, cut: Option<StreamCut>, event: Option<&str>);
    /// The request ended.
    fn finish(&mut self, status: u16, error_code: Option<&str>, usage: Option<Usage>);
}

/// See the module docs.
pub struct MeteredBody<B, M> {
    upstream: Watched<B>,
    /// What the judge held back, sent first.
    held: Option<(Bytes, Progress)>,
    /// The decision on the next quota increment; nothing more is relayed until it is in.
    growing: Option<PendingGrowth>,
    /// The client's format, for error frames.
    client: Format,
    finisher: M,
    done: bool,
}

impl<B, M: Meter> std::fmt::Debug for MeteredBody<B, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredBody")
            .field("request_id", &self.finisher.request_id())
            .field("client", &self.client)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<B, M: Meter> MeteredBody<B, M> {
    /// Relays `upstream` to a client speaking `client`, starting with `held` (what the
    /// judge held back, and its progress).
    pub fn new(upstream: Watched<B>, held: (Bytes, Progress), client: Format, finisher: M) -> Self {
        Self {
            upstream,
            held: Some(held),
            growing: None,
            client,
            finisher,
            done: false,
        }
    }

    /// Ends the stream with `error`'s frames, finishing the request with `status`.
    fn end(&mut self, error: StreamError, status: u16) -> Frame<Bytes> {
        self.done = true;
        self.upstream.cancel();
        let reader = self.upstream.reader();
        self.finisher
            .finish(status, Some(error.code()), reader.usage());
        Frame::data(render::stream_frame(error, self.client, reader))
    }

    /// Ends the stream at a cut from the watchdog, the deadline or the transport.
    fn cut(&mut self, cut: Cut) -> Frame<Bytes> {
        let request_id = self.finisher.request_id();
        let kind = StreamCut::from(cut.clone());
        match &cut {
            Cut::Idle { timeout_ms } => tracing::warn!(
                request_id,
                idle_timeout_ms = timeout_ms,
                "Upstream stream fell silent; ending the client stream with an error frame."
            ),
            Cut::Trip(trip) => tracing::warn!(
                request_id,
                trip = kind.label(),
                detail = ?trip,
                "Stream watchdog ended the upstream stream; ending the client stream with an error frame."
            ),
            Cut::Broken(error) => tracing::warn!(
                request_id,
                error = %error,
                "Upstream stream broke after the response started; ending the client stream with an error frame."
            ),
        }
        self.finisher.stream_ended(Some(kind), None);
        let status = if matches!(cut, Cut::Trip(Trip::Total { .. })) {
            504
        } else {
            200
        };
        self.end(StreamError::from(kind), status)
    }

    /// Ends the stream because the quota pool refused its next increment (SPEC Q6): the
    /// format's final event for a length cut, the typed `quota_exceeded` error naming
    /// the pool and dimension, and the end marker; the upstream request is cancelled.
    fn cut_by_quota(&mut self, block: Box<QuotaBlock>) -> Frame<Bytes> {
        tracing::info!(
            request_id = self.finisher.request_id(),
            pool = %block.pool_id,
            dimension = %block.dimension.key(),
            reason = block.reason().as_str(),
            "Quota pool refused a stream's next increment; ending the stream."
        );
        self.done = true;
        self.upstream.cancel();
        let error = render::body(&ApiError::QuotaExceeded(block), self.client);
        let reader = self.upstream.reader();
        let text = reader.cut_frames(&error);
        self.finisher
            .finish(200, Some(QUOTA_CUT_CODE), reader.usage());
        Frame::data(Bytes::from(text))
    }

    /// A chunk goes to the client: notes its text for the quota.
    fn relayed(&mut self, progress: &Progress) {
        self.finisher.first_byte();
        // A whole answer grows no further: its last frames need no more quota.
        if progress.chars > 0 && !self.upstream.reader().complete() {
            self.finisher.observe_output(progress.chars);
            if let Some(request) = self.finisher.quota_growth() {
                self.growing = Some(Box::pin(request.run()));
            }
        }
    }

    /// The upstream ended the stream.
    fn ended(&mut self) -> Option<Frame<Bytes>> {
        let reader = self.upstream.reader();
        let (complete, errored, usage) = (reader.complete(), reader.errored(), reader.usage());
        if errored && !complete {
            // The upstream's own error frame already told the client.
            tracing::warn!(
                request_id = self.finisher.request_id(),
                "Upstream ended the stream with an error event."
            );
            self.done = true;
            let reader = self.upstream.reader();
            self.finisher
                .stream_ended(Some(StreamCut::Error), reader.error_event());
            self.finisher.finish(200, Some(UPSTREAM_ERROR_CODE), usage);
            return None;
        }
        if !complete {
            tracing::warn!(
                request_id = self.finisher.request_id(),
                "Upstream ended the stream before the answer was complete; ending the client stream with an error frame."
            );
            self.finisher.stream_ended(Some(StreamCut::Broken), None);
            return Some(self.end(StreamError::Truncated, 200));
        }
        self.done = true;
        self.finisher.stream_ended(None, None);
        self.finisher.finish(200, None, usage);
        None
    }
}

impl<B, M> Body for MeteredBody<B, M>
where
    B: Body<Data = Bytes, Error = Cut> + Unpin,
    M: Meter + Unpin,
{
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some((held, progress)) = this.held.take() {
            if !held.is_empty() {
                this.relayed(&progress);
                return Poll::Ready(Some(Ok(Frame::data(held))));
            }
        }
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
        match this.upstream.poll_event(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Event::Chunk(chunk, progress)) => {
                this.relayed(&progress);
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Poll::Ready(Event::Cut(_)) if this.upstream.reader().complete() => {
                // The answer was whole before the upstream broke or stalled (an
                // upstream that never sends its end marker): nothing more to say.
                this.done = true;
                this.upstream.cancel();
                let usage = this.upstream.reader().usage();
                this.finisher.stream_ended(None, None);
                this.finisher.finish(200, None, usage);
                Poll::Ready(None)
            }
            Poll::Ready(Event::Cut(cut)) => Poll::Ready(Some(Ok(this.cut(cut)))),
            Poll::Ready(Event::End) => Poll::Ready(this.ended().map(Ok)),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::deadline::tests::Fed;
    use http_body_util::BodyExt;
    use std::sync::{Arc, Mutex};
    use switchyard_core::stream::watchdog::Limits;
    use tokio::sync::mpsc;

    type Finished = Arc<Mutex<Vec<(u16, Option<String>, Option<Usage>)>>>;

    /// Records what the stream reports.
    #[derive(Default)]
    struct Recorded {
        finished: Finished,
        first_bytes: usize,
        output: usize,
        ended: Arc<Mutex<Vec<Option<StreamCut>>>>,
    }

    impl Meter for Recorded {
        fn request_id(&self) -> &str {
            "req_test"
        }
        fn first_byte(&mut self) {
            self.first_bytes += 1;
        }
        fn observe_output(&mut self, chars: usize) {
            self.output += chars;
        }
        fn quota_growth(&self) -> Option<GrowthRequest> {
            None
        }
        fn apply_quota_growth(&mut self, _: (Growth, u64)) -> Option<Box<QuotaBlock>> {
            None
        }
        fn stream_ended(&mut self, cut: Option<StreamCut>, _event: Option<&str>) {
            self.ended.lock().unwrap().push(cut);
        }
        fn finish(&mut self, status: u16, error_code: Option<&str>, usage: Option<Usage>) {
            self.finished
                .lock()
                .unwrap()
                .push((status, error_code.map(str::to_owned), usage));
        }
    }

    const CHUNK: &str = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";
    const LAST: &str = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";

    /// Runs a stream of `frames` to its end, the first one as held by the judge: what
    /// the client received, and the meter.
    async fn run(frames: Vec<Result<Frame<Bytes>, Cut>>) -> (String, Recorded, Finished) {
        let (tx, rx) = mpsc::unbounded_channel();
        for f in frames {
            tx.send(f).unwrap();
        }
        drop(tx);
        let meter = Recorded::default();
        let finished = Arc::clone(&meter.finished);
        let mut watched = Watched::new(
            Fed(rx),
            Format::OpenAiChat.stream_reader(),
            Limits::default(),
            tokio::time::Instant::now(),
        );
        let held = match std::future::poll_fn(|cx| watched.poll_event(cx)).await {
            Event::Chunk(chunk, progress) => (chunk, progress),
            other => panic!("{other:?}"),
        };
        let mut body = MeteredBody::new(watched, held, Format::OpenAiChat, meter);
        let mut out = String::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            out.push_str(std::str::from_utf8(&data).unwrap());
        }
        assert!(body.is_end_stream());
        (out, body.finisher, finished)
    }

    fn data(s: &'static str) -> Result<Frame<Bytes>, Cut> {
        Ok(Frame::data(Bytes::from_static(s.as_bytes())))
    }

    /// The terminal frames of `e` after [`CHUNK`].
    fn frame(e: StreamError) -> String {
        let mut reader = Format::OpenAiChat.stream_reader();
        reader.feed(CHUNK.as_bytes());
        String::from_utf8(render::stream_frame(e, Format::OpenAiChat, &mut reader).to_vec())
            .unwrap()
    }

    #[tokio::test]
    async fn a_whole_stream_is_relayed_unchanged_and_finished_once_with_its_usage() {
        let (out, meter, finished) = run(vec![data(CHUNK), data(LAST)]).await;
        assert_eq!(out, format!("{CHUNK}{LAST}"));
        assert_eq!(meter.first_bytes, 2);
        assert_eq!(meter.output, 2);
        let usage = Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 1,
        });
        assert_eq!(*finished.lock().unwrap(), vec![(200, None, usage)]);
        assert_eq!(*meter.ended.lock().unwrap(), vec![None]);
    }

    #[tokio::test]
    async fn a_stream_the_upstream_ended_with_its_error_gets_no_second_error_frame() {
        const ERROR: &str = "data: {\"error\":{\"message\":\"overloaded\"}}\n\n";
        let (out, meter, finished) = run(vec![data(CHUNK), data(ERROR)]).await;
        assert_eq!(out, format!("{CHUNK}{ERROR}"));
        assert_eq!(
            *finished.lock().unwrap(),
            vec![(200, Some("upstream_stream_error".to_owned()), None)]
        );
        assert_eq!(*meter.ended.lock().unwrap(), vec![Some(StreamCut::Error)]);
    }

    #[tokio::test]
    async fn a_break_after_the_answer_was_whole_ends_the_stream_quietly() {
        let finished_chunk = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
        let (out, meter, finished) = run(vec![
            data(CHUNK),
            data(finished_chunk),
            Err(Cut::Idle { timeout_ms: 5 }),
        ])
        .await;
        assert_eq!(out, format!("{CHUNK}{finished_chunk}"));
        assert_eq!(*finished.lock().unwrap(), vec![(200, None, None)]);
        assert_eq!(*meter.ended.lock().unwrap(), vec![None]);
    }

    #[tokio::test]
    async fn trailers_are_skipped() {
        let trailers = Ok(Frame::trailers(http::HeaderMap::new()));
        let (out, _, finished) = run(vec![data(CHUNK), trailers, data(LAST)]).await;
        assert_eq!(out, format!("{CHUNK}{LAST}"));
        assert_eq!(finished.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_stream_without_its_end_marker_ends_with_the_truncated_frames() {
        let (out, meter, finished) = run(vec![data(CHUNK)]).await;
        assert_eq!(out, format!("{CHUNK}{}", frame(StreamError::Truncated)));
        assert_eq!(
            *finished.lock().unwrap(),
            vec![(200, Some("upstream_stream_truncated".to_owned()), None)]
        );
        assert_eq!(*meter.ended.lock().unwrap(), vec![Some(StreamCut::Broken)]);
    }

    #[tokio::test]
    async fn cuts_end_with_their_frames_and_code_and_nothing_after() {
        let cases = [
            (
                Cut::Idle { timeout_ms: 5 },
                StreamError::Idle,
                200,
                StreamCut::Silent,
            ),
            (
                Cut::Trip(Trip::Total { total_ms: 5 }),
                StreamError::Execution,
                504,
                StreamCut::Total,
            ),
            (
                Cut::Trip(Trip::Idle { idle_ms: 5 }),
                StreamError::OutputIdle,
                200,
                StreamCut::OutputIdle,
            ),
            (
                Cut::Trip(Trip::Throughput {
                    bytes: 0,
                    window_ms: 5,
                }),
                StreamError::Throughput,
                200,
                StreamCut::Throughput,
            ),
            (
                Cut::Broken("reset".into()),
                StreamError::Reset,
                200,
                StreamCut::Broken,
            ),
        ];
        for (cut, error, status, kind) in cases {
            let (out, meter, finished) = run(vec![data(CHUNK), Err(cut), data(LAST)]).await;
            assert_eq!(out, format!("{CHUNK}{}", frame(error)));
            assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
            assert_eq!(
                *finished.lock().unwrap(),
                vec![(status, Some(error.code().to_owned()), None)]
            );
            assert_eq!(*meter.ended.lock().unwrap(), vec![Some(kind)]);
        }
    }
}
