//! Scripted behaviour: rules, their matching, and request quotas.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use tokio::time::Instant;

/// Which requests a rule applies to. Absent fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// The credential the caller presented (`Authorization: Bearer` or `x-api-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// The `model` field of the request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The request path, e.g. `/v1/messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Where a scripted connection reset happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResetPoint {
    /// The TCP connection is reset before any response byte.
    BeforeHeaders,
    /// The completion's status line and headers are sent, then the TCP connection is
    /// reset before any body byte.
    AfterHeaders,
}

/// Where a scripted stall happens: from there on nothing is sent and the connection is
/// held open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StallPoint {
    /// After the completion's status line and headers, before any body byte.
    AfterHeaders,
}

/// A request quota: the first `limit` matching requests in each window pass, the rest
/// get 429 with `Retry-After` and OpenAI-style `x-ratelimit-*` headers until the window
/// (which starts at the first request) ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSpec {
    pub limit: u64,
    pub window_ms: u64,
}

/// An error event a stream ends with: the API's error `type` (Responses: `code`) and
/// message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamErrorSpec {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub message: String,
}

/// One scripted behaviour.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default, rename = "match")]
    pub matches: Match,
    /// Apply to this many matching requests, then expire. Absent = forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    /// Delay before the response headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Answer with this status instead of a completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Body for `status`: a JSON value, or a string sent as is. Default: an
    /// OpenAI-style error object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// Extra response headers, on errors and successes alike (rate-limit signals).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<ResetPoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall: Option<StallPoint>,
    /// Send the completion's body (the whole answer when not streamed, each stream frame
    /// when streamed) this many bytes at a time, each write `trickle_interval_ms` after
    /// the one before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trickle_bytes: Option<NonZeroU32>,
    /// The gap before each write of `trickle_bytes` (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trickle_interval_ms: Option<u64>,
    /// Number of words of the canned answer (one token and one stream delta each).
    /// Setting it also keeps the answer whole whatever the request's `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<u32>,
    /// Delay between stream chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_interval_ms: Option<u64>,
    /// Stop sending after this many content chunks and hold the connection open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_after_chunks: Option<u32>,
    /// While stalled (`stall_after_chunks`), send a heartbeat this often: Anthropic
    /// `ping` events, SSE comments on the other APIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_ms: Option<u64>,
    /// Reset the connection after this many content chunks. Combine with
    /// `chunk_interval_ms` so the chunks before the reset are flushed to the client
    /// (the reset happens after the interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_after_chunks: Option<u32>,
    /// End the stream cleanly after this many content chunks, without the final chunk
    /// (no `finish_reason`, no usage) and without `[DONE]` (Messages: `message_stop`;
    /// Responses: `response.completed`): an answer cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_after_chunks: Option<u32>,
    /// End the stream with the API's own error event carrying this error, instead of
    /// the stream's tail (after `end_after_chunks` frames, when it is set too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_error: Option<StreamErrorSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaSpec>,
    /// Anthropic `usage.cache_read_input_tokens` of successful answers (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    /// Anthropic `usage.cache_creation_input_tokens` of successful answers (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
}

impl Match {
    fn accepts(&self, credential: &str, model: &str, path: &str) -> bool {
        self.credential.as_deref().is_none_or(|c| c == credential)
            && self.model.as_deref().is_none_or(|m| m == model)
            && self.path.as_deref().is_none_or(|p| p == path)
    }
}

/// A rule with its runtime counters.
#[derive(Debug)]
pub(crate) struct StoredRule {
    pub id: u64,
    pub rule: Rule,
    pub window_start: Option<Instant>,
    pub window_count: u64,
}

/// The quota verdict for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuotaState {
    pub limit: u64,
    pub remaining: u64,
    pub reset_ms: u64,
    pub exceeded: bool,
}

/// Finds the rule for a request and updates its counters. Returns the rule and the quota
/// verdict when the rule has a quota.
pub(crate) fn select(
    rules: &mut Vec<StoredRule>,
    credential: &str,
    model: &str,
    path: &str,
    now: Instant,
) -> Option<(Rule, Option<QuotaState>)> {
    let idx = rules.iter().position(|r| {
        r.rule.times.is_none_or(|t| t > 0) && r.rule.matches.accepts(credential, model, path)
    })?;
    let stored = &mut rules[idx];
    if let Some(t) = stored.rule.times.as_mut() {
        *t -= 1;
    }
    let quota = stored.rule.quota.map(|q| {
        let start = match stored.window_start {
            Some(s) if now.duration_since(s).as_millis() < u128::from(q.window_ms) => s,
            _ => {
                stored.window_count = 0;
                stored.window_start = Some(now);
                now
            }
        };
        let elapsed = u64::try_from(now.duration_since(start).as_millis()).unwrap_or(u64::MAX);
        let reset_ms = q.window_ms.saturating_sub(elapsed);
        let exceeded = stored.window_count >= q.limit;
        if !exceeded {
            stored.window_count += 1;
        }
        QuotaState {
            limit: q.limit,
            remaining: q.limit.saturating_sub(stored.window_count),
            reset_ms,
            exceeded,
        }
    });
    let rule = stored.rule.clone();
    if rule.times == Some(0) {
        rules.remove(idx);
    }
    Some((rule, quota))
}
