//! The redacting layer of the streaming body, right above the deadlines: every upstream
//! stream passes through a [`StreamScrubber`] before the relay or a translator reads it,
//! so the error events they pass on or translate carry no credential (SPEC G5). Chunks
//! that end at an event boundary and hold no error event go through untouched (the same
//! `Bytes`); an event still arriving is held until its end. Cuts pass through; what was
//! held of an unfinished event is dropped with the stream.

use super::rewrite::{Rewrite, RewriteBody};
use bytes::Bytes;
use switchyard_core::redact::{Scrubbed, StreamScrubber};

/// See the module docs.
pub type ScrubBody<B> = RewriteBody<B, StreamScrubber>;

impl Rewrite for StreamScrubber {
    fn feed(&mut self, chunk: Bytes) -> Bytes {
        match StreamScrubber::feed(self, &chunk) {
            Scrubbed::AsIs => chunk,
            Scrubbed::Bytes(bytes) => Bytes::from(bytes),
        }
    }

    fn finish(&mut self) -> Bytes {
        Bytes::from(StreamScrubber::finish(self))
    }

    fn ended(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::deadline::{tests::Fed, Cut};
    use http_body::{Body, Frame};
    use http_body_util::BodyExt;
    use switchyard_core::redact::Secrets;
    use tokio::sync::mpsc;

    const CRED: &str = "cred-alpha-1-secret-value";

    /// Runs `frames` through the layer: what comes out, as strings, and the cut, if any.
    async fn run(frames: Vec<Result<String, Cut>>) -> (Vec<String>, Option<Cut>) {
        let (tx, rx) = mpsc::unbounded_channel();
        for f in frames {
            tx.send(f.map(|s| Frame::data(Bytes::from(s)))).unwrap();
        }
        drop(tx);
        let scrubber = StreamScrubber::new(Secrets::new([CRED.as_bytes()]));
        let mut body = ScrubBody::new(Fed(rx), scrubber);
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => out.push(String::from_utf8(f.into_data().unwrap().to_vec()).unwrap()),
                Err(cut) => return (out, Some(cut)),
            }
        }
        assert!(body.is_end_stream());
        (out, None)
    }

    #[tokio::test]
    async fn error_frames_come_out_redacted_and_the_rest_unchanged() {
        let delta = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n".to_owned();
        let (out, cut) = run(vec![
            Ok(delta.clone()),
            Ok(format!("data: {{\"error\":{{\"message\":\"bad {CRED}")),
            Ok("\"}}\n\n".to_owned()),
        ])
        .await;
        assert_eq!(cut, None);
        assert_eq!(
            out,
            vec![
                delta,
                "data: {\"error\":{\"message\":\"bad [REDACTED]\"}}\n\n".to_owned()
            ]
        );
    }

    #[tokio::test]
    async fn a_cut_passes_through_and_an_unfinished_event_ends_with_the_stream() {
        let (out, cut) = run(vec![
            Ok("data: {\"a\"".to_owned()),
            Err(Cut::Idle { timeout_ms: 7 }),
        ])
        .await;
        assert_eq!((out, cut), (Vec::new(), Some(Cut::Idle { timeout_ms: 7 })));
        let (out, cut) = run(vec![Ok(format!("event: error\ndata: {CRED}"))]).await;
        assert_eq!(cut, None);
        assert_eq!(out, vec!["event: error\ndata: [REDACTED]".to_owned()]);
    }
}
