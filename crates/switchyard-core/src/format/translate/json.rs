//! Reading the JSON the translation modules take apart: a request body's members, with
//! refusals that name the member's path, and an upstream answer.

use super::TranslateError;
use crate::llm::RawObject;
use serde_json::Value;

/// The refusal of the request, for `message`.
pub fn refuse(message: String) -> TranslateError {
    TranslateError::Request(message)
}

/// The refusal of the request member at `path`: `` `path` what ``.
pub fn invalid(path: &str, what: &str) -> TranslateError {
    TranslateError::Request(format!("`{path}` {what}"))
}

/// Top-level member `name` of a request body, parsed; `None` when absent or `null`. A
/// member that does not parse is refused with `` `name` cannot be read: <why> ``.
pub fn member(body: &RawObject, name: &str) -> Result<Option<Value>, TranslateError> {
    read_member(body, name, "cannot be read")
}

/// [`member`], a member that does not parse refused with `` `name` <unreadable>: <why> ``.
pub fn read_member(
    body: &RawObject,
    name: &str,
    unreadable: &str,
) -> Result<Option<Value>, TranslateError> {
    let Some(raw) = body.member(name) else {
        return Ok(None);
    };
    match serde_json::from_str(raw) {
        Ok(Value::Null) => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(e) => Err(invalid(name, &format!("{unreadable}: {e}"))),
    }
}

/// Member `key` of `v`; `None` when absent or `null`.
pub fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|m| !m.is_null())
}

/// The string member `key` of the object at `path`.
pub fn string<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a str, TranslateError> {
    get(v, key)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(&format!("{path}.{key}"), "must be a string"))
}

/// The optional string member `key` of the object at `path`.
pub fn optional_string<'a>(
    v: &'a Value,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, TranslateError> {
    get(v, key)
        .map(|m| {
            m.as_str()
                .ok_or_else(|| invalid(&format!("{path}.{key}"), "must be a string"))
        })
        .transpose()
}

/// The non-empty string member `key` of `v`.
pub fn text_member<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The string at `pointer` in `v`, empty when there is none.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// An upstream answer's body, parsed.
pub fn answer(body: &[u8]) -> Result<Value, TranslateError> {
    serde_json::from_slice(body).map_err(|e| TranslateError::Response(format!("not JSON: {e}")))
}

/// The upstream answer cannot be translated: `what` is wrong with it.
pub fn untranslatable(what: &str) -> TranslateError {
    TranslateError::Response(what.to_owned())
}
