//! The translating layer of the streaming body, between the deadlines and the metering:
//! upstream frames in the upstream's format go in, frames in the client's format come
//! out, as soon as each is complete ([`switchyard_core::format::translate::Stream`]).
//! Cuts from the deadlines pass through untouched, so the metering layer ends the stream
//! with an error frame in the client's format; at the upstream's end the translator adds
//! what closes a complete answer, and nothing for a truncated one. Once the translator
//! has ended the answer with an error frame, the upstream is read no further.

use super::rewrite::{Rewrite, RewriteBody};
use bytes::Bytes;
use switchyard_core::format::translate::Stream;

/// See the module docs.
pub type TranslateBody<B> = RewriteBody<B, Stream>;

impl Rewrite for Stream {
    fn feed(&mut self, chunk: Bytes) -> Bytes {
        let mut out = Vec::new();
        Stream::feed(self, &chunk, &mut out);
        Bytes::from(out)
    }

    fn finish(&mut self) -> Bytes {
        let mut out = Vec::new();
        Stream::finish(self, &mut out);
        Bytes::from(out)
    }

    fn ended(&self) -> bool {
        self.ended_by_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::deadline::{tests::Fed, Cut};
    use http_body::{Body, Frame};
    use http_body_util::BodyExt;
    use switchyard_core::format::Format;
    use tokio::sync::mpsc;

    /// Runs `frames` through a chat-to-Anthropic translator: the client's frames, as
    /// strings, and the cut that ended the stream, if any.
    async fn run(frames: Vec<Result<&'static str, Cut>>) -> (Vec<String>, Option<Cut>) {
        let (tx, rx) = mpsc::unbounded_channel();
        for f in frames {
            tx.send(f.map(|s| Frame::data(Bytes::from_static(s.as_bytes()))))
                .unwrap();
        }
        drop(tx);
        let translator = Stream::new(Format::AnthropicMessages, Format::OpenAiChat, 0).unwrap();
        let mut body = TranslateBody::new(Fed(rx), translator);
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

    const FIRST: &str = "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";

    #[tokio::test]
    async fn frames_come_out_translated_as_each_completes_and_half_frames_wait() {
        let (out, cut) = run(vec![
            Ok("data: {\"id\":\"c\",\"model\":\"m\",\"choi"),
            Ok("ces\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"),
            Ok("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"),
        ])
        .await;
        assert_eq!(cut, None);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].starts_with("event: message_start\n"));
        assert!(out[0].ends_with(
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
        ));
        assert!(out[1].starts_with("event: content_block_stop\n"));
        assert!(out[1].ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    }

    #[tokio::test]
    async fn after_an_upstream_error_the_upstream_is_read_no_further() {
        let (out, cut) = run(vec![
            Ok(FIRST),
            Ok("data: {\"error\":{\"message\":\"overloaded\"}}\n\n"),
            Err(Cut::Idle { timeout_ms: 7 }),
        ])
        .await;
        assert_eq!(cut, None);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[1],
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"overloaded\"}}\n\n"
        );
    }

    #[tokio::test]
    async fn a_cut_passes_through_and_a_truncated_stream_gets_no_closing_events() {
        let (out, cut) = run(vec![Ok(FIRST), Err(Cut::Idle { timeout_ms: 7 })]).await;
        assert_eq!(out.len(), 1);
        assert_eq!(cut, Some(Cut::Idle { timeout_ms: 7 }));
        let (out, cut) = run(vec![Ok(FIRST)]).await;
        assert_eq!(cut, None);
        assert_eq!(out.len(), 1);
        assert!(!out[0].contains("message_stop"));
    }
}
