//! The stream as the watchdogs see it (SPEC R11, R12): each relayed chunk read once by
//! the client format's [`StreamReader`] into a typed [`Progress`], fed to the attempt's
//! [`Watchdog`] with the time, and a trip turned into a [`Cut`]. Below it are the
//! byte-level deadline, the scrubber and the translator; above it, before the attempt
//! commits, [`judge`], and after, the metering layer.
//!
//! Time is milliseconds since the attempt was sent, on tokio's clock. The watchdog is
//! asked when the upstream has nothing to give, never for a chunk already here (the
//! upstream is read only as fast as the client takes the stream, so a late chunk may be
//! the client's doing); only the total bound is checked with every chunk, so an upstream
//! that never pauses is bounded too. One timer, moved only when the next deadline comes
//! earlier than the one it is set for: when it fires early, the deadline is asked again.

use super::deadline::Cut;
use bytes::Bytes;
use http_body::Body;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use switchyard_core::format::StreamReader;
use switchyard_core::outcome::StreamCut;
use switchyard_core::stream::watchdog::{Limits, Watchdog};
use switchyard_core::stream::Progress;
use tokio::time::{Instant, Sleep};

/// Most bytes held back before an attempt commits: the events before the first output
/// (a message start, a created response echoing long instructions, pings). Past this
/// the attempt commits anyway, as nothing more can be held.
pub const MAX_HELD_BYTES: usize = 1024 * 1024;

/// What the stream gave.
#[derive(Debug)]
pub enum Event {
    /// A chunk, and what it carried.
    Chunk(Bytes, Progress),
    /// The stream was cut: by the upstream, the byte-level deadline or the watchdog.
    Cut(Cut),
    /// The upstream ended the stream.
    End,
}

/// See the module docs.
#[derive(Debug)]
pub struct Watched<B> {
    /// `None` once cancelled: dropping it cancels the upstream request.
    inner: Option<B>,
    reader: StreamReader,
    watchdog: Watchdog,
    /// When the attempt was sent: the watchdog's time 0.
    origin: Instant,
    timer: Pin<Box<Sleep>>,
    /// The watchdog time the timer is set for.
    timer_at: Option<u64>,
}

impl<B> Watched<B> {
    /// `inner` read by `reader`, watched with `limits` from `origin`.
    pub fn new(inner: B, reader: StreamReader, limits: Limits, origin: Instant) -> Self {
        Self {
            inner: Some(inner),
            reader,
            watchdog: Watchdog::new(limits, 0),
            origin,
            timer: Box::pin(tokio::time::sleep_until(origin)),
            timer_at: None,
        }
    }

    /// Drops the upstream body, cancelling the upstream request; the stream ends.
    pub fn cancel(&mut self) {
        self.inner = None;
    }

    /// The reader, which has read every chunk given so far.
    pub fn reader(&mut self) -> &mut StreamReader {
        &mut self.reader
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Sets the timer for `at` if it is set for nothing or for later.
    fn arm(&mut self, at: u64) {
        if self.timer_at.is_some_and(|t| t <= at) {
            return;
        }
        self.timer_at = Some(at);
        let at = self.origin + std::time::Duration::from_millis(at);
        self.timer.as_mut().reset(at);
    }
}

impl<B> Watched<B>
where
    B: Body<Data = Bytes, Error = Cut> + Unpin,
{
    /// The next event of the stream.
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        loop {
            let Some(inner) = self.inner.as_mut() else {
                return Poll::Ready(Event::End);
            };
            match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers carry nothing a client needs; skip them.
                    let Ok(chunk) = frame.into_data() else {
                        continue;
                    };
                    let now = self.now();
                    let progress = self.reader.feed(&chunk);
                    self.watchdog.observe(&progress, now);
                    if let Some(trip) = self.watchdog.check_total(now) {
                        return Poll::Ready(Event::Cut(Cut::Trip(trip)));
                    }
                    return Poll::Ready(Event::Chunk(chunk, progress));
                }
                Poll::Ready(Some(Err(cut))) => return Poll::Ready(Event::Cut(cut)),
                Poll::Ready(None) => return Poll::Ready(Event::End),
                Poll::Pending => {}
            }
            let now = self.now();
            if let Some(trip) = self.watchdog.check(now) {
                return Poll::Ready(Event::Cut(Cut::Trip(trip)));
            }
            let Some(next) = self.watchdog.next_check(now) else {
                return Poll::Pending;
            };
            self.arm(next);
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The timer fired: ask the watchdog again (and the upstream first).
            self.timer_at = None;
        }
    }
}

/// How an attempt's stream was judged before anything of it reached the client.
#[derive(Debug)]
pub enum Judged {
    /// It answers: what was held back goes first, then the rest as it comes.
    Commit { held: Bytes, progress: Progress },
    /// It failed before its first output: another attempt may be made.
    Failed(StreamCut),
}

/// Reads `watched` until the attempt can be judged: the first chunk that carries output
/// or reasoning commits it (and goes out with whatever came before it), as does a whole
/// answer, or more held back than [`MAX_HELD_BYTES`]. An upstream error event, a break,
/// an end before the answer completed, a stall or a trip fails it; nothing was sent.
pub async fn judge<B>(watched: &mut Watched<B>) -> Judged
where
    B: Body<Data = Bytes, Error = Cut> + Unpin,
{
    let mut held: Vec<u8> = Vec::new();
    let mut first: Option<Bytes> = None;
    let mut progress = Progress::default();
    loop {
        let event = std::future::poll_fn(|cx| watched.poll_event(cx)).await;
        let reader = &watched.reader;
        match event {
            Event::Chunk(chunk, p) => {
                progress.merge(&p);
                if reader.errored() {
                    return Judged::Failed(StreamCut::Error);
                }
                // The common case, a first chunk that already answers, is not copied.
                match first.take() {
                    None if held.is_empty() => first = Some(chunk),
                    earlier => {
                        if let Some(earlier) = earlier {
                            held.extend_from_slice(&earlier);
                        }
                        held.extend_from_slice(&chunk);
                    }
                }
                let size = held.len() + first.as_ref().map_or(0, Bytes::len);
                if p.commits() || reader.complete() || size > MAX_HELD_BYTES {
                    let held = first.unwrap_or_else(|| Bytes::from(held));
                    return Judged::Commit { held, progress };
                }
            }
            Event::End if reader.complete() => {
                let held = first.unwrap_or_else(|| Bytes::from(held));
                return Judged::Commit { held, progress };
            }
            Event::End if reader.errored() => return Judged::Failed(StreamCut::Error),
            Event::End => return Judged::Failed(StreamCut::Broken),
            Event::Cut(cut) => return Judged::Failed(cut.into()),
        }
    }
}

impl From<Cut> for StreamCut {
    fn from(cut: Cut) -> Self {
        match cut {
            Cut::Idle { .. } => Self::Silent,
            Cut::Broken(_) => Self::Broken,
            Cut::Trip(trip) => trip.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::deadline::tests::Fed;
    use http_body::Frame;
    use std::time::Duration;
    use switchyard_core::format::Format;
    use switchyard_core::stream::watchdog::Trip;
    use tokio::sync::mpsc;

    type Feeder = mpsc::UnboundedSender<Result<Frame<Bytes>, Cut>>;

    const LIMITS: Limits = Limits {
        first_output_ms: Some(10_000),
        idle_ms: Some(5_000),
        total_ms: Some(60_000),
        throughput: None,
    };

    fn watched(limits: Limits) -> (Feeder, Watched<Fed<Cut>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let w = Watched::new(
            Fed(rx),
            Format::AnthropicMessages.stream_reader(),
            limits,
            Instant::now(),
        );
        (tx, w)
    }

    fn send(tx: &Feeder, s: &str) {
        tx.send(Ok(Frame::data(Bytes::from(s.to_owned())))).unwrap();
    }

    const START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n";
    const PING: &str = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
    const TEXT: &str = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
    const THINK: &str = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Hm\"}}\n\n";
    const THINK_START: &str = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n";
    const STOP: &str = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    const ERROR: &str = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\n";

    fn committed(j: Judged) -> (String, Progress) {
        match j {
            Judged::Commit { held, progress } => {
                (String::from_utf8(held.to_vec()).unwrap(), progress)
            }
            Judged::Failed(cut) => panic!("failed: {cut:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_chunk_with_output_commits_at_once_and_unchanged() {
        let (tx, mut w) = watched(LIMITS);
        let start = Instant::now();
        send(&tx, &format!("{START}{TEXT}"));
        let (held, progress) = committed(judge(&mut w).await);
        assert_eq!(held, format!("{START}{TEXT}"));
        assert_eq!(progress.output, 1);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn what_comes_before_the_first_output_is_held_and_goes_with_it() {
        let (tx, mut w) = watched(LIMITS);
        send(&tx, START);
        send(&tx, PING);
        send(&tx, TEXT);
        let (held, progress) = committed(judge(&mut w).await);
        assert_eq!(held, format!("{START}{PING}{TEXT}"));
        assert_eq!((progress.output, progress.heartbeats), (1, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn reasoning_commits_too() {
        let (tx, mut w) = watched(LIMITS);
        send(&tx, START);
        send(&tx, THINK_START);
        send(&tx, THINK);
        let (held, progress) = committed(judge(&mut w).await);
        assert_eq!(held, format!("{START}{THINK_START}{THINK}"));
        assert_eq!((progress.output, progress.reasoning), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_opened_thinking_block_alone_fails_at_the_first_output_budget() {
        let (tx, mut w) = watched(LIMITS);
        let start = Instant::now();
        send(&tx, START);
        send(&tx, THINK_START);
        assert!(matches!(
            judge(&mut w).await,
            Judged::Failed(StreamCut::FirstOutput)
        ));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn pings_alone_fail_at_the_first_output_budget() {
        let (tx, mut w) = watched(LIMITS);
        let start = Instant::now();
        let feeder = tokio::spawn(async move {
            send(&tx, START);
            loop {
                tokio::time::sleep(Duration::from_secs(3)).await;
                if tx
                    .send(Ok(Frame::data(Bytes::from_static(PING.as_bytes()))))
                    .is_err()
                {
                    return;
                }
            }
        });
        assert!(matches!(
            judge(&mut w).await,
            Judged::Failed(StreamCut::FirstOutput)
        ));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_event_or_an_early_end_before_output_fails() {
        let (tx, mut w) = watched(LIMITS);
        send(&tx, START);
        send(&tx, ERROR);
        assert!(matches!(
            judge(&mut w).await,
            Judged::Failed(StreamCut::Error)
        ));
        let (tx, mut w) = watched(LIMITS);
        send(&tx, START);
        drop(tx);
        assert!(matches!(
            judge(&mut w).await,
            Judged::Failed(StreamCut::Broken)
        ));
        let (tx, mut w) = watched(LIMITS);
        tx.send(Err(Cut::Idle { timeout_ms: 5 })).unwrap();
        assert!(matches!(
            judge(&mut w).await,
            Judged::Failed(StreamCut::Silent)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_whole_answer_without_output_commits() {
        let (tx, mut w) = watched(LIMITS);
        send(&tx, START);
        send(&tx, STOP);
        let (held, _) = committed(judge(&mut w).await);
        assert_eq!(held, format!("{START}{STOP}"));
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_first_output_the_idle_budget_cuts() {
        let (tx, mut w) = watched(LIMITS);
        let start = Instant::now();
        send(&tx, START);
        send(&tx, TEXT);
        committed(judge(&mut w).await);
        send(&tx, PING);
        let next = std::future::poll_fn(|cx| w.poll_event(cx)).await;
        assert!(matches!(next, Event::Chunk(_, p) if p.heartbeats == 1));
        let next = std::future::poll_fn(|cx| w.poll_event(cx)).await;
        assert!(matches!(
            next,
            Event::Cut(Cut::Trip(Trip::Idle { idle_ms: 5_000 }))
        ));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn the_total_bound_cuts_a_stream_that_never_pauses() {
        let (tx, mut w) = watched(Limits {
            total_ms: Some(2_000),
            ..LIMITS
        });
        send(&tx, START);
        send(&tx, TEXT);
        committed(judge(&mut w).await);
        tokio::time::advance(Duration::from_secs(2)).await;
        send(&tx, TEXT);
        let next = std::future::poll_fn(|cx| w.poll_event(cx)).await;
        assert!(matches!(
            next,
            Event::Cut(Cut::Trip(Trip::Total { total_ms: 2_000 }))
        ));
    }
}
