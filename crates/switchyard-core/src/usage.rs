//! Token usage as reported by upstreams, in OpenAI (`prompt_tokens`,
//! `completion_tokens`) or Anthropic (`input_tokens`, `output_tokens`) shape.
//!
//! Parsing and arithmetic only: it reads the bytes it is given, settles no quota and
//! records nothing.

use serde::Deserialize;

/// Tokens of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The members of a response or stream chunk that carry usage; everything else in the
/// document is skipped without being built into a value tree.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    usage: Option<RawUsage>,
    /// Anthropic's `message_start` carries usage under `message.usage`.
    #[serde(default)]
    message: Option<MessageEnvelope>,
}

#[derive(Deserialize)]
struct MessageEnvelope {
    #[serde(default)]
    usage: Option<RawUsage>,
}

#[derive(Deserialize, Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct RawUsage {
    prompt_tokens: Option<u64>,
    input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl RawUsage {
    /// OpenAI's `prompt_tokens` count cached tokens; Anthropic's `input_tokens` do not,
    /// so its cache reads and writes are added: a prompt served from the cache is still
    /// a prompt the account processed.
    fn into_usage(self) -> Option<Usage> {
        let anthropic = || {
            let cached = [
                self.cache_read_input_tokens,
                self.cache_creation_input_tokens,
            ];
            let parts = [self.input_tokens, cached[0], cached[1]];
            parts.iter().flatten().copied().reduce(u64::saturating_add)
        };
        let prompt = self.prompt_tokens.or_else(anthropic);
        let completion = self.completion_tokens.or(self.output_tokens);
        // All zeros is what a translation writes where a format needs a usage block the
        // upstream did not give (an Anthropic `message_delta`): no report, so the quota
        // settles on the text instead of on nothing.
        if prompt.unwrap_or(0) == 0 && completion.unwrap_or(0) == 0 {
            return None;
        }
        Some(Usage {
            prompt_tokens: prompt.unwrap_or(0),
            completion_tokens: completion.unwrap_or(0),
        })
    }
}

/// Reads `: {usage object}` at the start of `rest`: quickly when it can
/// ([`quick_usage`]), else by `serde_json`.
fn usage_at(rest: &[u8]) -> Option<Usage> {
    let rest = rest.trim_ascii_start().strip_prefix(b":")?;
    if let Some(read) = quick_usage(rest) {
        return read.into_usage();
    }
    let mut de = serde_json::Deserializer::from_slice(rest);
    RawUsage::deserialize(&mut de).ok()?.into_usage()
}

/// The usage object at the start of `rest`, read as `serde_json` reads it into a
/// [`RawUsage`] but without its per-field set-up, when it is the usual kind: each count
/// at most once, as a whole number that fits, the other members any JSON, the object
/// valid UTF-8. `None` for any other, which `serde_json` then reads (and may refuse).
fn quick_usage(rest: &[u8]) -> Option<RawUsage> {
    let mut raw = RawUsage::default();
    let end = crate::rawscan::object_at(rest, |name, value| {
        let slot = match rest.get(name)? {
            b"prompt_tokens" => &mut raw.prompt_tokens,
            b"input_tokens" => &mut raw.input_tokens,
            b"cache_read_input_tokens" => &mut raw.cache_read_input_tokens,
            b"cache_creation_input_tokens" => &mut raw.cache_creation_input_tokens,
            b"completion_tokens" => &mut raw.completion_tokens,
            b"output_tokens" => &mut raw.output_tokens,
            _ => return Some(()),
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(whole_number(rest.get(value)?)?);
        Some(())
    })?;
    std::str::from_utf8(rest.get(..end)?).ok()?;
    Some(raw)
}

/// A JSON number (known to be one) that is a whole number of at most `u64::MAX`, as
/// digits; `None` for a sign, a fraction, an exponent, or one too large.
fn whole_number(raw: &[u8]) -> Option<u64> {
    raw.iter().try_fold(0u64, |n, &c| {
        let digit = c.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// The quoted member name searched for, last first.
const USAGE_MEMBER: &[u8] = b"\"usage\"";

/// Its searcher, built once (building one costs more than searching an answer).
static LAST_USAGE: std::sync::LazyLock<memchr::memmem::FinderRev<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::FinderRev::new(USAGE_MEMBER));

impl Usage {
    pub fn total(self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// Reads the usage of a response or stream chunk (OpenAI `usage`, Anthropic `usage`
    /// or `message.usage`) from raw JSON; cheap when there is none.
    pub fn from_json_bytes(bytes: &[u8]) -> Option<Self> {
        let at = LAST_USAGE.rfind(bytes)?;
        // Fast path: OpenAI and Anthropic put the top-level `usage` object last, so the
        // last `"usage":` is read on its own, without parsing the whole document.
        if let Some(u) = usage_at(&bytes[at + USAGE_MEMBER.len()..]) {
            return Some(u);
        }
        let envelope: Envelope = serde_json::from_slice(bytes).ok()?;
        envelope
            .usage
            .or_else(|| envelope.message?.usage)?
            .into_usage()
    }

    /// Folds a later report into this one. Streams may report usage in pieces (Anthropic
    /// sends input tokens first and output tokens at the end); the larger count wins.
    pub fn merge(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.max(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.max(other.completion_tokens);
    }
}

/// Characters of generated text in a stream chunk: the lengths of every `content`
/// string (`delta.content`, `reasoning_content`, Anthropic `text` deltas are read
/// through their `"text"` member). Escapes count as one character. Used to estimate
/// output while a stream runs, before the final usage arrives.
pub fn generated_chars(data: &str) -> usize {
    let mut total = 0;
    for needle in ["content\":\"", "\"text\":\""] {
        let mut rest = data;
        while let Some(at) = rest.find(needle) {
            rest = &rest[at + needle.len()..];
            let mut chars = 0;
            let mut escaped = false;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                    continue;
                } else if c == '"' {
                    end = i;
                    break;
                }
                chars += 1;
            }
            total += chars;
            rest = &rest[end..];
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn by_serde_json(text: &str) -> Option<RawUsage> {
        let mut de = serde_json::Deserializer::from_slice(text.as_bytes());
        RawUsage::deserialize(&mut de).ok()
    }

    #[test]
    fn the_usual_usage_objects_are_read_quickly() {
        let openai = r#"{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0}} ,"x":1}"#;
        let quick = quick_usage(openai.as_bytes()).unwrap();
        assert_eq!(quick.prompt_tokens, Some(12));
        assert_eq!(quick.completion_tokens, Some(3));
        assert_eq!(Some(quick), by_serde_json(openai));
        let anthropic = r#" { "input_tokens" : 18446744073709551615, "cache_read_input_tokens": 0,
            "output_tokens": 7, "service_tier": "standard" }"#;
        let quick = quick_usage(anthropic.as_bytes()).unwrap();
        assert_eq!(quick.input_tokens, Some(u64::MAX));
        assert_eq!(Some(quick), by_serde_json(anthropic));
        // What serde_json must judge: null, a fraction, a sign, too large, a string,
        // a field twice, an escaped name, not an object.
        for text in [
            r#"{"prompt_tokens":null}"#,
            r#"{"prompt_tokens":1.0}"#,
            r#"{"prompt_tokens":-1}"#,
            r#"{"prompt_tokens":1e2}"#,
            r#"{"prompt_tokens":18446744073709551616}"#,
            r#"{"prompt_tokens":"1"}"#,
            r#"{"prompt_tokens":1,"prompt_tokens":2}"#,
            r#"{"prompt\u005ftokens":1}"#,
            "[1]",
        ] {
            assert_eq!(quick_usage(text.as_bytes()), None, "{text}");
        }
        assert_eq!(quick_usage(b"{\"x\":\"\xff\"}"), None);
    }

    fn member_name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("prompt_tokens".to_owned()),
            Just("input_tokens".to_owned()),
            Just("cache_read_input_tokens".to_owned()),
            Just("cache_creation_input_tokens".to_owned()),
            Just("completion_tokens".to_owned()),
            Just("output_tokens".to_owned()),
            Just("prompt\\u005ftokens".to_owned()),
            "[a-z_]{1,12}",
        ]
    }

    fn member_value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            (0u64..1000).prop_map(|n| n.to_string()),
            Just("null".to_owned()),
            Just("-1".to_owned()),
            Just("0.5".to_owned()),
            Just("2E3".to_owned()),
            Just("18446744073709551616".to_owned()),
            Just("\"9\"".to_owned()),
            Just("{\"a\":[1,{\"b\":null}]}".to_owned()),
            Just("[]".to_owned()),
            Just("true".to_owned()),
        ]
    }

    proptest! {
        /// What the quick reading reads, serde_json reads the same.
        #[test]
        fn the_quick_reading_agrees_with_serde_json(
            members in prop::collection::vec((member_name(), member_value()), 0..7),
            ws in "[ \t\n\r]{0,2}",
            tail in prop_oneof![Just(""), Just(",\"more\":1}"), Just("]")],
        ) {
            let inner: Vec<String> = members
                .iter()
                .map(|(n, v)| format!("{ws}\"{n}\"{ws}:{ws}{v}{ws}"))
                .collect();
            let text = format!("{ws}{{{}}}{tail}", inner.join(","));
            if let Some(quick) = quick_usage(text.as_bytes()) {
                prop_assert_eq!(Some(quick), by_serde_json(&text), "{}", text);
            }
        }
    }

    #[test]
    fn generated_chars_counts_content_strings() {
        assert_eq!(
            generated_chars(r#"{"choices":[{"delta":{"content":"Hello"}}]}"#),
            5
        );
        assert_eq!(
            generated_chars(
                r#"{"choices":[{"delta":{"reasoning_content":"a\"b","content":"xy"}}]}"#
            ),
            5
        );
        assert_eq!(
            generated_chars(
                r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"abc"}}"#
            ),
            3
        );
        assert_eq!(
            generated_chars(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#),
            0
        );
        assert_eq!(generated_chars(r#"{"delta":{"content":null}}"#), 0);
    }

    #[test]
    fn reads_openai_and_anthropic_shapes() {
        let o = br#"{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}"#;
        assert_eq!(
            Usage::from_json_bytes(o),
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 5
            })
        );
        let a =
            br#"{"type":"message_start","message":{"usage":{"input_tokens":9,"output_tokens":1}}}"#;
        assert_eq!(
            Usage::from_json_bytes(a),
            Some(Usage {
                prompt_tokens: 9,
                completion_tokens: 1
            })
        );
        let cached = br#"{"usage":{"input_tokens":3,"cache_read_input_tokens":50000,"cache_creation_input_tokens":200,"output_tokens":7}}"#;
        assert_eq!(
            Usage::from_json_bytes(cached),
            Some(Usage {
                prompt_tokens: 50_203,
                completion_tokens: 7
            })
        );
        let only_cache = br#"{"usage":{"cache_read_input_tokens":18446744073709551615,"cache_creation_input_tokens":5}}"#;
        assert_eq!(
            Usage::from_json_bytes(only_cache),
            Some(Usage {
                prompt_tokens: u64::MAX,
                completion_tokens: 0
            })
        );
        assert_eq!(Usage::from_json_bytes(br#"{"choices":[]}"#), None);
        // A later nested "usage" that is not a usage object falls back to a full parse.
        assert_eq!(
            Usage::from_json_bytes(br#"{"usage":{"prompt_tokens":3},"x":{"usage":"n/a"}}"#),
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 0
            })
        );
        // A "usage" inside content does not hide the real one.
        let tricky = br#"{"usage":{"prompt_tokens":1,"completion_tokens":2},"choices":[{"message":{"content":"the \"usage\" field"}}]}"#;
        assert_eq!(
            Usage::from_json_bytes(tricky),
            Some(Usage {
                prompt_tokens: 1,
                completion_tokens: 2
            })
        );
        assert_eq!(Usage::from_json_bytes(br#"{"usage":null}"#), None);
        assert_eq!(
            Usage::from_json_bytes(br#"{"usage":{"input_tokens":0,"output_tokens":0}}"#),
            None
        );
    }

    #[test]
    fn merge_keeps_largest_counts() {
        let mut u = Usage {
            prompt_tokens: 9,
            completion_tokens: 1,
        };
        u.merge(Usage {
            prompt_tokens: 0,
            completion_tokens: 12,
        });
        assert_eq!(u.total(), 21);
    }
}
