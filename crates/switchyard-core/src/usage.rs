//! Token usage as reported by upstreams, in OpenAI (`prompt_tokens`,
//! `completion_tokens`) or Anthropic (`input_tokens`, `output_tokens`) shape.

use serde_json::Value;

/// Tokens of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Usage {
    pub fn total(self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// Reads a `usage` object of either shape.
    pub fn from_usage_object(v: &Value) -> Option<Self> {
        let field = |names: [&str; 2]| names.iter().find_map(|n| v.get(*n)?.as_u64());
        let prompt = field(["prompt_tokens", "input_tokens"]);
        let completion = field(["completion_tokens", "output_tokens"]);
        if prompt.is_none() && completion.is_none() {
            return None;
        }
        Some(Self {
            prompt_tokens: prompt.unwrap_or(0),
            completion_tokens: completion.unwrap_or(0),
        })
    }

    /// Reads the `usage` member of a response or stream chunk. Anthropic's
    /// `message_start` carries it under `message.usage`.
    pub fn from_response(v: &Value) -> Option<Self> {
        v.get("usage")
            .or_else(|| v.get("message")?.get("usage"))
            .and_then(Self::from_usage_object)
    }

    /// Reads usage from raw JSON bytes; cheap when there is none.
    pub fn from_json_bytes(bytes: &[u8]) -> Option<Self> {
        if !contains(bytes, b"\"usage\"") {
            return None;
        }
        let v: Value = serde_json::from_slice(bytes).ok()?;
        Self::from_response(&v)
    }

    /// Folds a later report into this one. Streams may report usage in pieces (Anthropic
    /// sends input tokens first and output tokens at the end); the larger count wins.
    pub fn merge(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.max(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.max(other.completion_tokens);
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(Usage::from_json_bytes(br#"{"choices":[]}"#), None);
        assert_eq!(Usage::from_json_bytes(br#"{"usage":null}"#), None);
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
