//! A body read whole into one buffer, at most a limit. Most request bodies and whole
//! answers come as one frame (their bytes arrived with the head); that frame is handed
//! on as it is, with no list of buffers to collect it in and no copy.

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;

/// Why a body could not be read whole.
#[derive(Debug)]
pub enum WholeError<E> {
    /// It is longer than the limit.
    TooLarge,
    /// Reading it failed.
    Body(E),
}

/// The data of `body` (trailers are dropped), or [`WholeError::TooLarge`] once it
/// passes `limit` bytes.
pub async fn read<B>(mut body: B, limit: usize) -> Result<Bytes, WholeError<B::Error>>
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(WholeError::Body)?.into_data() else {
            continue;
        };
        let held = joined.as_ref().map_or(first.len(), BytesMut::len);
        if data.len() > limit.saturating_sub(held) {
            return Err(WholeError::TooLarge);
        }
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut both = BytesMut::with_capacity(first.len() + data.len());
                both.extend_from_slice(&first);
                both.extend_from_slice(&data);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;
    use std::convert::Infallible;

    fn body(parts: &[&'static str]) -> impl Body<Data = Bytes, Error = Infallible> + Unpin {
        let frames: Vec<Result<http_body::Frame<Bytes>, Infallible>> = parts
            .iter()
            .map(|p| Ok(http_body::Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    async fn whole(parts: &[&'static str], limit: usize) -> Option<String> {
        match read(body(parts), limit).await {
            Ok(b) => Some(String::from_utf8(b.to_vec()).unwrap()),
            Err(WholeError::TooLarge) => None,
            Err(WholeError::Body(never)) => match never {},
        }
    }

    #[tokio::test]
    async fn frames_are_joined_up_to_the_limit() {
        assert_eq!(whole(&[], 4).await.as_deref(), Some(""));
        assert_eq!(whole(&["abcd"], 4).await.as_deref(), Some("abcd"));
        assert_eq!(
            whole(&["", "ab", "", "cd"], 4).await.as_deref(),
            Some("abcd")
        );
        assert_eq!(whole(&["a", "b", "c"], 3).await.as_deref(), Some("abc"));
        assert_eq!(whole(&["abcde"], 4).await, None);
        assert_eq!(whole(&["ab", "cde"], 4).await, None);
        assert_eq!(whole(&["a", "b", "c", "de"], 4).await, None);
    }

    #[tokio::test]
    async fn one_frame_is_handed_on_without_a_copy() {
        let data = Bytes::from_static(b"{\"a\":1}");
        let frames = vec![Ok::<_, Infallible>(http_body::Frame::data(data.clone()))];
        let got = read(StreamBody::new(futures_util::stream::iter(frames)), 64)
            .await
            .unwrap();
        assert_eq!(got.as_ptr(), data.as_ptr());
    }
}
