//! Stub replaced by the translation work in progress (issue 12).

use super::TranslateError;
use crate::llm::RawObject;

pub fn request(
    _body: &RawObject,
    _model: &str,
    _max_tokens: u64,
    _stream: bool,
) -> Result<Vec<u8>, TranslateError> {
    Err(TranslateError::Request("not translated yet".into()))
}

pub fn response_at(_body: &[u8], _now_s: u64) -> Result<Vec<u8>, TranslateError> {
    Err(TranslateError::Response("not translated yet".into()))
}

pub fn error(_status: u16, body: &[u8]) -> Vec<u8> {
    body.to_vec()
}

#[derive(Debug, Default)]
pub struct Stream;

impl Stream {
    pub fn at(_now_s: u64) -> Self {
        Self
    }

    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(chunk);
    }

    pub fn finish(&mut self, _out: &mut Vec<u8>) {}
}
