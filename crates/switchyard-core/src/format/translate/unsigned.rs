//! Thinking blocks the gateway made, and taking them out of a later Anthropic request.
//!
//! A chat upstream's reasoning reaches an Anthropic client as a `thinking` block
//! ([`super::messages_over_chat`]), which Anthropic wants signed; the gateway cannot
//! sign it, so it carries the sentinel signature [`UNSIGNED`]. A client (Claude Code)
//! sends that assistant turn back with the conversation; should a later turn go to a
//! real Anthropic upstream (pass-through, e.g. a combo that falls back to Claude),
//! Anthropic would refuse the foreign signature with a 400. [`strip_unsigned_thinking`]
//! takes those blocks out of the request's `messages` first.

use serde_json::Value;

/// The signature of every `thinking` block the gateway made.
pub const UNSIGNED: &str = "switchyard-unsigned";

/// The Anthropic request's `messages` (`messages`, the member's raw JSON text) without
/// the gateway's unsigned thinking blocks, as compact JSON text; `None` when nothing is
/// to be taken out, the text to be sent as it is.
///
/// The text is parsed only when it contains [`UNSIGNED`] verbatim (this runs on every
/// pass-through request; a client echoes the signature back as it got it, unescaped).
/// Then every content block of type `thinking` whose `signature` is [`UNSIGNED`] is
/// removed, wherever it stands, and an assistant message that had only such blocks is
/// removed with them; everything else is kept, in order. Text that holds the sentinel
/// elsewhere (inside a text block, say) comes back as `Some` of the same messages
/// re-serialized. Text that is not a JSON array is `None`: Anthropic refuses it either
/// way.
pub fn strip_unsigned_thinking(messages: &str) -> Option<String> {
    if !messages.contains(UNSIGNED) {
        return None;
    }
    let Ok(Value::Array(mut items)) = serde_json::from_str::<Value>(messages) else {
        return None;
    };
    items.retain_mut(|message| {
        let Some(Value::Array(blocks)) = message.get_mut("content") else {
            return true;
        };
        let before = blocks.len();
        blocks.retain(|block| !is_unsigned_thinking(block));
        let emptied = before > 0 && blocks.is_empty();
        !(emptied && message.get("role").and_then(Value::as_str) == Some("assistant"))
    });
    Some(Value::Array(items).to_string())
}

fn is_unsigned_thinking(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("thinking")
        && block.get("signature").and_then(Value::as_str) == Some(UNSIGNED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_thinking_blocks_are_taken_out() {
        let cases = [
            (
                r#"[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"EqQBCkYIBxgCKkD"}]}]"#,
                None,
            ),
            ("", None),
            (
                r#"[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"mine","signature":"switchyard-unsigned"},{"type":"thinking","thinking":"real","signature":"EqQBCkYIBxgCKkD"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"now","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"noon"}]}]"#,
                Some(
                    r#"[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"real","signature":"EqQBCkYIBxgCKkD"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"now","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"noon"}]}]"#,
                ),
            ),
            (
                r#"[ {"role":"user","content":"hi"},
                    {"role":"assistant","content":[{"type":"thinking","thinking":"cut","signature":"switchyard-unsigned"}]},
                    {"role":"user","content":"again"} ]"#,
                Some(r#"[{"role":"user","content":"hi"},{"role":"user","content":"again"}]"#),
            ),
            (
                r#"[{"role":"user","content":[{"type":"text","text":"what is switchyard-unsigned?"}]},{"role":"assistant","content":[]},{"role":"assistant","content":[{"type":"redacted_thinking","data":"switchyard-unsigned"},{"type":"thinking","thinking":"t","signature":"switchyard-unsigned-not"}]}]"#,
                Some(
                    r#"[{"role":"user","content":[{"type":"text","text":"what is switchyard-unsigned?"}]},{"role":"assistant","content":[]},{"role":"assistant","content":[{"type":"redacted_thinking","data":"switchyard-unsigned"},{"type":"thinking","thinking":"t","signature":"switchyard-unsigned-not"}]}]"#,
                ),
            ),
            (
                r#"[{"role":"user","content":[{"type":"thinking","thinking":"odd","signature":"switchyard-unsigned"}]}]"#,
                Some(r#"[{"role":"user","content":[]}]"#),
            ),
            (r#"{"signature":"switchyard-unsigned"}"#, None),
            (r#"[{"signature":"switchyard-unsigned""#, None),
        ];
        for (messages, want) in cases {
            assert_eq!(
                strip_unsigned_thinking(messages).as_deref(),
                want,
                "{messages}"
            );
        }
    }
}
