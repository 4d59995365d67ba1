//! Deadlines on a streaming upstream body: the idle timeout (no data frame for that long)
//! and the execution bound (a deadline for the whole stream, SPEC R10, checked before
//! every read so an upstream that never pauses is cut too). A transport error becomes a
//! typed cut as well. This wrapper only measures time and passes frames on; what the
//! client sees of a cut is the metering layer's business.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Why a stream stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// No data for longer than the idle timeout (`timeout_ms`).
    Idle { timeout_ms: u64 },
    /// The execution bound passed.
    Execution,
    /// The upstream connection failed; the transport's message.
    Broken(String),
}

/// See the module docs.
#[derive(Debug)]
pub struct DeadlineBody<B> {
    inner: B,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    execution: Pin<Box<Sleep>>,
}

impl<B> DeadlineBody<B> {
    /// `inner` with `idle_timeout` between data frames, ending at `execution_deadline`.
    pub fn new(inner: B, idle_timeout: Duration, execution_deadline: Instant) -> Self {
        Self {
            inner,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            idle_timeout,
            execution: Box::pin(tokio::time::sleep_until(execution_deadline)),
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
        if this.execution.is_elapsed() {
            return Poll::Ready(Some(Err(Cut::Execution)));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                if this.execution.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Cut::Execution)));
                }
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
        let mut b = DeadlineBody::new(
            rx,
            Duration::from_secs(5),
            Instant::now() + Duration::from_secs(60),
        );
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
        let mut b = DeadlineBody::new(rx, Duration::from_secs(5), start + Duration::from_secs(60));
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
        let mut b = DeadlineBody::new(rx, Duration::from_secs(5), start + Duration::from_secs(60));
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
    async fn the_execution_bound_cuts_a_stream_that_never_pauses() {
        let (tx, rx) = fed();
        let start = Instant::now();
        let mut b = DeadlineBody::new(rx, Duration::from_secs(5), start + Duration::from_secs(10));
        let feeder = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if tx.send(data("x")).is_err() {
                    return;
                }
            }
        });
        let mut frames = 0;
        let cut = loop {
            match next(&mut b).await {
                Some(Ok(_)) => frames += 1,
                other => break other,
            }
        };
        assert_eq!(cut, Some(Err(Cut::Execution)));
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert_eq!(frames, 9);
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_transport_error_is_a_broken_cut() {
        let (tx, rx) = fed();
        let mut b = DeadlineBody::new(
            rx,
            Duration::from_secs(5),
            Instant::now() + Duration::from_secs(60),
        );
        tx.send(Err("connection reset".into())).unwrap();
        assert_eq!(
            next(&mut b).await,
            Some(Err(Cut::Broken("connection reset".into())))
        );
    }
}
