//! Mappings the translation modules share: stop reasons and Responses statuses, usage
//! blocks, error types and error messages.

use serde_json::{json, Value};

/// Longest upstream error message relayed, in bytes: an HTML error page is cut, not
/// relayed whole.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// What an error means, whichever format says it: the kinds Anthropic's error `type`s
/// name, which chat and Responses errors say with their `type` or `code`. Translation
/// keeps the kind both ways, in error bodies and in stream error events (a stream's
/// error has no status to go by).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    Authentication,
    Billing,
    Permission,
    NotFound,
    RequestTooLarge,
    RateLimit,
    Api,
    Overloaded,
    Timeout,
}

impl ErrorKind {
    /// The kind of an HTTP status (as Anthropic's SDKs choose their exception by it).
    pub fn of_status(status: u16) -> Self {
        match status {
            401 => Self::Authentication,
            402 => Self::Billing,
            403 => Self::Permission,
            404 => Self::NotFound,
            413 => Self::RequestTooLarge,
            429 => Self::RateLimit,
            503 | 529 => Self::Overloaded,
            504 => Self::Timeout,
            500.. => Self::Api,
            _ => Self::InvalidRequest,
        }
    }

    /// The kind an error `type` or `code` names, in any of the three formats: Anthropic's
    /// types, OpenAI's types and codes (`invalid_api_key`, `insufficient_quota`,
    /// `rate_limit_exceeded`, `model_not_found`, `server_error`, …) and the names some
    /// OpenAI-compatible providers use. `None` for a name that says nothing of the kind.
    pub fn of_name(name: &str) -> Option<Self> {
        Some(match name {
            "invalid_request_error" | "invalid_prompt" | "context_length_exceeded" => {
                Self::InvalidRequest
            }
            "authentication_error" | "invalid_api_key" | "unauthorized" => Self::Authentication,
            "billing_error" | "insufficient_quota" => Self::Billing,
            "permission_error" | "permission_denied" | "unsupported_country_region_territory" => {
                Self::Permission
            }
            "not_found_error" | "not_found" | "model_not_found" => Self::NotFound,
            "request_too_large" | "payload_too_large" => Self::RequestTooLarge,
            "rate_limit_error" | "rate_limit_exceeded" | "requests" | "tokens" => Self::RateLimit,
            "api_error" | "server_error" | "internal_error" => Self::Api,
            "overloaded_error" | "overloaded" | "server_overloaded" => Self::Overloaded,
            "timeout_error" | "timeout" => Self::Timeout,
            _ => return None,
        })
    }

    /// The kind of an error object in chat or Responses form: by its `code` first (more
    /// specific: `invalid_request_error` with `invalid_api_key` is an authentication
    /// failure), then its `type`.
    pub fn of_error(error: &Value) -> Option<Self> {
        let name = |key: &str| {
            error
                .get(key)
                .and_then(Value::as_str)
                .and_then(Self::of_name)
        };
        name("code").or_else(|| name("type"))
    }

    /// Anthropic's error `type`.
    pub fn anthropic_type(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request_error",
            Self::Authentication => "authentication_error",
            Self::Billing => "billing_error",
            Self::Permission => "permission_error",
            Self::NotFound => "not_found_error",
            Self::RequestTooLarge => "request_too_large",
            Self::RateLimit => "rate_limit_error",
            Self::Api => "api_error",
            Self::Overloaded => "overloaded_error",
            Self::Timeout => "timeout_error",
        }
    }
}

/// Anthropic's error `type` for an HTTP status (its SDKs choose the exception by the
/// status; the type says the same in the body).
pub fn anthropic_error_type(status: u16) -> &'static str {
    ErrorKind::of_status(status).anthropic_type()
}

/// The message of an error body in either format — `error.message`, `error` as a
/// string, or a top-level `message`, else the body's text — trimmed and cut to
/// [`MAX_ERROR_MESSAGE`] bytes at a character boundary; `None` when it is empty.
pub fn error_message(body: &[u8]) -> Option<String> {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let named = parsed.as_ref().and_then(|v| match v.get("error") {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(e) if !e.is_null() => e.get("message").and_then(Value::as_str),
        _ => v.get("message").and_then(Value::as_str),
    });
    let text = String::from_utf8_lossy(body);
    let message = named.unwrap_or(&text).trim();
    (!message.is_empty())
        .then(|| message[..message.floor_char_boundary(MAX_ERROR_MESSAGE)].to_owned())
}

/// The `error` member of an error body, when the body is JSON with one.
pub fn error_object(body: &[u8]) -> Option<Value> {
    let mut parsed = serde_json::from_slice::<Value>(body).ok()?;
    parsed.get_mut("error").map(Value::take)
}

/// The message of an upstream error body with `status`: its [`error_message`], else
/// `the upstream answered HTTP <status>`.
pub fn upstream_message(status: u16, body: &[u8]) -> String {
    error_message(body).unwrap_or_else(|| format!("the upstream answered HTTP {status}"))
}

/// An Anthropic `stop_reason` as a chat `finish_reason`.
pub fn finish_reason_of(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        // end_turn, stop_sequence, pause_turn and anything newer end the turn normally.
        _ => "stop",
    }
}

/// A chat `finish_reason` as an Anthropic `stop_reason`; `matched_stop` says whether a
/// client stop sequence ended the answer (chat does not say which one).
pub fn stop_reason_of(finish_reason: &str, matched_stop: bool) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ if matched_stop => "stop_sequence",
        _ => "end_turn",
    }
}

/// A chat `finish_reason` as a Responses `status` and `incomplete_details.reason`.
pub fn responses_status_of(finish_reason: &str) -> (&'static str, Option<&'static str>) {
    match finish_reason {
        "length" => ("incomplete", Some("max_output_tokens")),
        "content_filter" => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

/// A Responses `status` (with its `incomplete_details.reason`) as a chat
/// `finish_reason`; `called` says whether the output holds function calls.
pub fn finish_reason_of_responses(
    status: &str,
    incomplete_reason: Option<&str>,
    called: bool,
) -> &'static str {
    match (status, incomplete_reason) {
        ("incomplete", Some("content_filter")) => "content_filter",
        ("incomplete", _) => "length",
        _ if called => "tool_calls",
        _ => "stop",
    }
}

/// Token counts of one answer, in the union of both formats' terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Prompt tokens neither read from nor written to the cache.
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// Output tokens spent on reasoning (chat only reports them).
    pub reasoning: u64,
}

fn count(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

impl Tokens {
    /// Reads an Anthropic `usage` block.
    pub fn from_anthropic(usage: &Value) -> Self {
        Self {
            input: count(usage, "/input_tokens"),
            output: count(usage, "/output_tokens"),
            cache_read: count(usage, "/cache_read_input_tokens"),
            cache_write: count(usage, "/cache_creation_input_tokens"),
            reasoning: 0,
        }
    }

    /// Reads a chat `usage` block, whose `prompt_tokens` include the cached ones.
    pub fn from_chat(usage: &Value) -> Self {
        let cache_read = count(usage, "/prompt_tokens_details/cached_tokens");
        Self {
            input: count(usage, "/prompt_tokens").saturating_sub(cache_read),
            output: count(usage, "/completion_tokens"),
            cache_read,
            cache_write: 0,
            reasoning: count(usage, "/completion_tokens_details/reasoning_tokens"),
        }
    }

    /// Reads a Responses `usage` block, whose `input_tokens` include the cached ones
    /// (read from and written to the cache).
    pub fn from_responses(usage: &Value) -> Self {
        let cache_read = count(usage, "/input_tokens_details/cached_tokens");
        let cache_write = count(usage, "/input_tokens_details/cache_write_tokens");
        Self {
            input: count(usage, "/input_tokens")
                .saturating_sub(cache_read)
                .saturating_sub(cache_write),
            output: count(usage, "/output_tokens"),
            cache_read,
            cache_write,
            reasoning: count(usage, "/output_tokens_details/reasoning_tokens"),
        }
    }

    /// Every prompt token: fresh, read from the cache or written to it.
    fn prompt(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// A Responses `usage` block: the input counts every prompt token, cached or not.
    pub fn responses(&self) -> Value {
        let input = self.prompt();
        json!({
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": self.cache_read, "cache_write_tokens": self.cache_write},
            "output_tokens": self.output,
            "output_tokens_details": {"reasoning_tokens": self.reasoning},
            "total_tokens": input.saturating_add(self.output),
        })
    }

    /// An Anthropic `usage` block.
    pub fn anthropic(&self) -> Value {
        json!({
            "input_tokens": self.input,
            "cache_creation_input_tokens": self.cache_write,
            "cache_read_input_tokens": self.cache_read,
            "output_tokens": self.output,
        })
    }

    /// A chat `usage` block: the prompt counts every prompt token, cached or not.
    pub fn chat(&self) -> Value {
        let prompt = self.prompt();
        json!({
            "prompt_tokens": prompt,
            "completion_tokens": self.output,
            "total_tokens": prompt.saturating_add(self.output),
            "prompt_tokens_details": {"cached_tokens": self.cache_read},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_map_both_ways_between_the_formats() {
        use ErrorKind::*;
        // kind, Anthropic type, the status Anthropic answers it with (529 for
        // overloaded), and the chat / Responses names that mean it (a `code` or a
        // `type`).
        let table: [(ErrorKind, &str, u16, &[&str]); 10] = [
            (
                InvalidRequest,
                "invalid_request_error",
                400,
                &[
                    "invalid_request_error",
                    "invalid_prompt",
                    "context_length_exceeded",
                ],
            ),
            (
                Authentication,
                "authentication_error",
                401,
                &["authentication_error", "invalid_api_key", "unauthorized"],
            ),
            (
                Billing,
                "billing_error",
                402,
                &["billing_error", "insufficient_quota"],
            ),
            (
                Permission,
                "permission_error",
                403,
                &[
                    "permission_error",
                    "permission_denied",
                    "unsupported_country_region_territory",
                ],
            ),
            (
                NotFound,
                "not_found_error",
                404,
                &["not_found_error", "not_found", "model_not_found"],
            ),
            (
                RequestTooLarge,
                "request_too_large",
                413,
                &["request_too_large", "payload_too_large"],
            ),
            (
                RateLimit,
                "rate_limit_error",
                429,
                &[
                    "rate_limit_error",
                    "rate_limit_exceeded",
                    "requests",
                    "tokens",
                ],
            ),
            (
                Api,
                "api_error",
                500,
                &["api_error", "server_error", "internal_error"],
            ),
            (
                Overloaded,
                "overloaded_error",
                529,
                &["overloaded_error", "overloaded", "server_overloaded"],
            ),
            (Timeout, "timeout_error", 504, &["timeout_error", "timeout"]),
        ];
        for (kind, anthropic, status, names) in table {
            assert_eq!(kind.anthropic_type(), anthropic);
            assert_eq!(ErrorKind::of_status(status), kind, "{status}");
            // Anthropic's type read back, as a chat client's error carries it.
            assert_eq!(ErrorKind::of_name(anthropic), Some(kind));
            for name in names {
                assert_eq!(ErrorKind::of_name(name), Some(kind), "{name}");
                assert_eq!(
                    ErrorKind::of_error(&json!({"type": name})),
                    Some(kind),
                    "{name}"
                );
                assert_eq!(
                    ErrorKind::of_error(&json!({"code": name})),
                    Some(kind),
                    "{name}"
                );
            }
        }
        // The code decides over the type; unknown names say nothing.
        assert_eq!(
            ErrorKind::of_error(
                &json!({"type": "invalid_request_error", "code": "invalid_api_key"})
            ),
            Some(Authentication)
        );
        assert_eq!(
            ErrorKind::of_error(&json!({"type": "server_error", "code": "unknown_code"})),
            Some(Api)
        );
        assert_eq!(
            ErrorKind::of_error(&json!({"type": "new_kind", "code": 7})),
            None
        );
        assert_eq!(ErrorKind::of_status(503), Overloaded);
        assert_eq!(ErrorKind::of_status(418), InvalidRequest);
        assert_eq!(ErrorKind::of_status(502), Api);
    }

    #[test]
    fn stop_reasons_map_both_ways() {
        let cases = [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("pause_turn", "stop"),
            ("max_tokens", "length"),
            ("model_context_window_exceeded", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
        ];
        for (stop, finish) in cases {
            assert_eq!(finish_reason_of(stop), finish, "{stop}");
        }
        let back = [
            ("stop", false, "end_turn"),
            ("stop", true, "stop_sequence"),
            ("length", false, "max_tokens"),
            ("length", true, "max_tokens"),
            ("tool_calls", false, "tool_use"),
            ("function_call", false, "tool_use"),
            ("content_filter", false, "refusal"),
        ];
        for (finish, matched, stop) in back {
            assert_eq!(stop_reason_of(finish, matched), stop, "{finish}");
        }
    }

    #[test]
    fn responses_statuses_map_both_ways() {
        assert_eq!(responses_status_of("stop"), ("completed", None));
        assert_eq!(responses_status_of("tool_calls"), ("completed", None));
        assert_eq!(
            responses_status_of("length"),
            ("incomplete", Some("max_output_tokens"))
        );
        assert_eq!(
            responses_status_of("content_filter"),
            ("incomplete", Some("content_filter"))
        );
        let back = [
            ("completed", None, false, "stop"),
            ("completed", None, true, "tool_calls"),
            ("incomplete", Some("max_output_tokens"), true, "length"),
            (
                "incomplete",
                Some("content_filter"),
                false,
                "content_filter",
            ),
            ("incomplete", None, false, "length"),
        ];
        for (status, reason, called, finish) in back {
            assert_eq!(finish_reason_of_responses(status, reason, called), finish);
        }
    }

    #[test]
    fn responses_usage_counts_cached_input_within_the_input() {
        let usage = json!({"input_tokens": 130, "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 0},
            "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 134});
        let t = Tokens::from_responses(&usage);
        assert_eq!(
            t,
            Tokens {
                input: 30,
                output: 4,
                cache_read: 100,
                cache_write: 0,
                reasoning: 3
            }
        );
        assert_eq!(t.responses(), usage);
        assert_eq!(
            t.chat(),
            json!({"prompt_tokens": 130, "completion_tokens": 4, "total_tokens": 134,
                   "prompt_tokens_details": {"cached_tokens": 100},
                   "completion_tokens_details": {"reasoning_tokens": 3}})
        );
    }

    #[test]
    fn usage_keeps_cache_tokens_apart_from_fresh_input() {
        let anthropic = json!({"input_tokens": 10, "output_tokens": 4,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20});
        let t = Tokens::from_anthropic(&anthropic);
        assert_eq!(
            t.chat(),
            json!({"prompt_tokens": 130, "completion_tokens": 4, "total_tokens": 134,
                   "prompt_tokens_details": {"cached_tokens": 100},
                   "completion_tokens_details": {"reasoning_tokens": 0}})
        );
        let chat = json!({"prompt_tokens": 130, "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 100},
            "completion_tokens_details": {"reasoning_tokens": 3}});
        let back = Tokens::from_chat(&chat);
        assert_eq!(
            back,
            Tokens {
                input: 30,
                output: 4,
                cache_read: 100,
                cache_write: 0,
                reasoning: 3
            }
        );
        assert_eq!(
            back.anthropic(),
            json!({"input_tokens": 30, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 100, "output_tokens": 4})
        );
        assert_eq!(Tokens::from_chat(&json!({})), Tokens::default());
    }
}
