//! The translating layer of the streaming body, between the deadlines and the metering:
//! upstream frames in the upstream's format go in, frames in the client's format come
//! out, as soon as each is complete ([`switchyard_core::format::translate::Stream`]).
//! Cuts from the deadlines pass through untouched, so the metering layer ends the stream
//! with an error frame in the client's format; at the upstream's end the translator adds
//! what closes a complete answer, and nothing for a truncated one.

use super::deadline::Cut;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use switchyard_core::format::translate::Stream;

/// See the module docs.
#[derive(Debug)]
pub struct TranslateBody<B> {
    inner: B,
    translator: Stream,
    ended: bool,
}

impl<B> TranslateBody<B> {
    pub fn new(inner: B, translator: Stream) -> Self {
        Self {
            inner,
            translator,
            ended: false,
        }
    }
}

impl<B> Body for TranslateBody<B>
where
    B: Body<Data = Bytes, Error = Cut> + Unpin,
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
            let mut out = Vec::new();
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(cut))) => return Poll::Ready(Some(Err(cut))),
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(chunk) = frame.into_data() else {
                        continue;
                    };
                    this.translator.feed(&chunk, &mut out);
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    this.translator.finish(&mut out);
                }
            }
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
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
