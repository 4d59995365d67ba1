//! What the rewriting layers of the streaming body share ([`super::scrub`],
//! [`super::translate`]): each upstream chunk goes to a [`Rewrite`] and what it answers
//! is relayed (nothing, while it holds an incomplete event); at the upstream's end its
//! [`Rewrite::finish`] is relayed. Cuts from the deadlines pass through untouched and end
//! the layer, so the metering layer ends the stream with an error frame in the client's
//! format. Once the rewrite says it ended the stream, the upstream is read no further.

use super::deadline::Cut;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A stateful rewrite of an upstream stream, chunk by chunk.
pub trait Rewrite {
    /// What to relay for `chunk` (empty: nothing yet).
    fn feed(&mut self, chunk: Bytes) -> Bytes;
    /// The upstream ended: what is left to relay.
    fn finish(&mut self) -> Bytes;
    /// Whether the rewrite ended the stream (an error frame went out).
    fn ended(&self) -> bool;
}

/// See the module docs.
#[derive(Debug)]
pub struct RewriteBody<B, R> {
    inner: B,
    rewrite: R,
    ended: bool,
}

impl<B, R> RewriteBody<B, R> {
    pub fn new(inner: B, rewrite: R) -> Self {
        Self {
            inner,
            rewrite,
            ended: false,
        }
    }
}

impl<B, R> Body for RewriteBody<B, R>
where
    B: Body<Data = Bytes, Error = Cut> + Unpin,
    R: Rewrite + Unpin,
{
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            let out = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(cut))) => {
                    // What the rewrite held of an unfinished event goes with the stream.
                    this.ended = true;
                    return Poll::Ready(Some(Err(cut)));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers carry nothing a client needs; skip them.
                    let Ok(chunk) = frame.into_data() else {
                        continue;
                    };
                    let out = this.rewrite.feed(chunk);
                    this.ended = this.rewrite.ended();
                    out
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    this.rewrite.finish()
                }
            };
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
