//! The byte-level backstop on a streaming upstream body: the idle timeout (no data frame
//! at all for that long, heartbeats included). What the stream says is judged above, by
//! the watchdog ([`super::watch`]), whose trips share this layer's [`Cut`]. A transport
//! error becomes a typed cut as well. This wrapper only measures time and passes frames
//! on; what the client sees of a cut is the metering layer's business.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use switchyard_core::stream::watchdog::Trip;
use tokio::time::{Instant, Sleep};

/// Why a stream stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// No data for longer than the idle timeout (`timeout_ms`).
    Idle { timeout_ms: u64 },
    /// The upstream connection failed; the transport's message.
    Broken(String),
    /// The stream watchdog abandoned it (SPEC R11, R12; the total bound of R10).
    Trip(Trip),
}

/// See the module docs.
#[derive(Debug)]
pub struct DeadlineBody<B> {
    inner: B,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
}

impl<B> DeadlineBody<B> {
    /// `inner` with `idle_timeout` between data frames.
    pub fn new(inner: B, idle_timeout: Duration) -> Self {
        Self {
            inner,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            idle_timeout,
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                if this.idle.as_mut().poll(cx).is_ready() {
                    let timeout_ms =
                        u64::try_from(this.idle_timeout.as_millis()).unwrap_or(u64::MAX);
                    return Poll::Ready(Some(Err(Cut::Idle { timeout_ms })));
                }
                Poll::Pending
            }
            Poll::Ready(Some(Ok(frame))) => {
                if frame.is_data() {
                    this.idle.as_mut().reset(Instant::now() + this.idle_timeout);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Cut::Broken(e.to_string())))),
            Poll::Ready(None) => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::sync::mpsc;

    /// A body fed by the test: data frames, errors, or the end (the sender dropped).
    pub(crate) struct Fed<E>(pub mpsc::UnboundedReceiver<Result<Frame<Bytes>, E>>);

    impl<E> Body for Fed<E> {
        type Data = Bytes;
        type Error = E;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, E>>> {
            self.0.poll_recv(cx)
        }
    }

    type Feeder = mpsc::UnboundedSender<Result<Frame<Bytes>, String>>;

    fn fed() -> (Feeder, Fed<String>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, Fed(rx))
    }

    fn data(s: &'static str) -> Result<Frame<Bytes>, String> {
        Ok(Frame::data(Bytes::from_static(s.as_bytes())))
    }

    async fn next(b: &mut DeadlineBody<Fed<String>>) -> Option<Result<Bytes, Cut>> {
        b.frame()
            .await
            .map(|r| r.map(|f| f.into_data().unwrap_or_default()))
    }

    #[tokio::test(start_paused = true)]
    async fn frames_pass_through_until_the_end() {
        let (tx, rx) = fed();
        let mut b = DeadlineBody::new(rx, Duration::from_secs(5));
        tx.send(data("a")).unwrap();
        tx.send(data("b")).unwrap();
        drop(tx);
        assert_eq!(next(&mut b).await, Some(Ok(Bytes::from_static(b"a"))));
        assert_eq!(next(&mut b).await, Some(Ok(Bytes::from_static(b"b"))));
        assert_eq!(next(&mut b).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn silence_longer_than_the_idle_timeout_cuts_at_exactly_that_time() {
        let (tx, rx) = fed();
        let start = Instant::now();
        let mut b = DeadlineBody::new(rx, Duration::from_secs(5));
        tx.send(data("a")).unwrap();
        assert_eq!(next(&mut b).await, Some(Ok(Bytes::from_static(b"a"))));
        assert_eq!(
            next(&mut b).await,
            Some(Err(Cut::Idle { timeout_ms: 5_000 }))
        );
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn each_data_frame_restarts_the_idle_timer() {
        let (tx, rx) = fed();
        let start = Instant::now();
        let mut b = DeadlineBody::new(rx, Duration::from_secs(5));
        let feeder = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                tx.send(data("x")).unwrap();
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(tx);
        });
        for _ in 0..3 {
            assert_eq!(next(&mut b).await, Some(Ok(Bytes::from_static(b"x"))));
        }
        assert_eq!(
            next(&mut b).await,
            Some(Err(Cut::Idle { timeout_ms: 5_000 }))
        );
        assert_eq!(start.elapsed(), Duration::from_secs(17));
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_transport_error_is_a_broken_cut() {
        let (tx, rx) = fed();
        let mut b = DeadlineBody::new(rx, Duration::from_secs(5));
        tx.send(Err("connection reset".into())).unwrap();
        assert_eq!(
            next(&mut b).await,
            Some(Err(Cut::Broken("connection reset".into())))
        );
    }
}
