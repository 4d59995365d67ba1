//! Invariants over JSON texts the gateway sends.

use serde_json::Value;

/// Whether any string (key or value) in `v` contains `needle` once decoded.
pub fn strings_contain(v: &Value, needle: &str) -> bool {
    match v {
        Value::String(s) => s.contains(needle),
        Value::Array(items) => items.iter().any(|i| strings_contain(i, needle)),
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| k.contains(needle) || strings_contain(v, needle)),
        _ => false,
    }
}

/// Panics when a `usage` object anywhere in `v` holds a negative or fractional count.
pub fn assert_usage_counts(v: &Value, context: &str) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| assert_usage_counts(i, context)),
        Value::Object(map) => {
            for (k, v) in map {
                if k == "usage" {
                    assert_counts(v, context);
                }
                assert_usage_counts(v, context);
            }
        }
        _ => {}
    }
}

fn assert_counts(v: &Value, context: &str) {
    match v {
        Value::Number(n) => assert!(
            n.is_u64(),
            "{context}: usage count {n} is not a non-negative integer"
        ),
        Value::Array(items) => items.iter().for_each(|i| assert_counts(i, context)),
        Value::Object(map) => map.values().for_each(|v| assert_counts(v, context)),
        _ => {}
    }
}

/// Panics when `text` shows `secret` to a client: in any string of it read as JSON (a
/// whole JSON text, or the `data` of each server-sent event), or in the bytes of what is
/// not JSON. (The bytes of JSON are not searched: a writer's escape of a control
/// character next to a lookalike, `\f` + `uzz…`, is not the secret to a reader.)
pub fn assert_hidden(text: &[u8], secret: &str, context: &str) {
    let shows = |bytes: &[u8]| match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => strings_contain(&v, secret),
        Err(_) => memmem(bytes, secret.as_bytes()).is_some(),
    };
    let mut events = Vec::new();
    if serde_json::from_slice::<Value>(text).is_err() {
        let mut parser = switchyard_core::sse::SseParser::new();
        parser.feed(text, |e| events.push(e.data.into_bytes()));
        parser.feed(b"\n\n", |e| events.push(e.data.into_bytes()));
    }
    let leaked = if events.is_empty() {
        shows(text)
    } else {
        events.iter().any(|data| shows(data))
    };
    assert!(
        !leaked,
        "{context}: the credential is in the output: {}",
        String::from_utf8_lossy(text)
    );
}

fn memmem(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
