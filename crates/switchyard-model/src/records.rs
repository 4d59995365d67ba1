//! Rows as the rest of Switchyard sees them. These are also the management API's
//! response shapes, so none of them carries a credential or a key secret.

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use switchyard_core::domain::{AuthClass, UpstreamFormat};
use switchyard_core::quota::pool::DimensionInput;
use utoipa::ToSchema;

/// How a save treats an existing row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveMode {
    /// Fail with `Conflict` when the row exists.
    Create,
    /// Fail with `NotFound` when the row does not exist.
    Update,
    /// Insert or replace (used when applying the config file).
    Upsert,
}

/// A provider: a family of interchangeable upstream accounts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderRecord {
    /// Identifier used in `provider/model` names.
    pub id: String,
    /// Wire format of the upstream: `openai` or `anthropic`.
    #[schema(value_type = String, example = "openai")]
    pub format: UpstreamFormat,
    /// Base URL, e.g. `https://api.openai.com` (the gateway appends `/v1/...`).
    pub base_url: String,
    /// Models offered; empty = any model name is passed through.
    #[serde(default)]
    pub models: Vec<String>,
    /// USD prices per model (the upstream's model name), for quota dimensions metered
    /// in `usd`. A model without a price costs 0 there.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, ModelPrice>,
    /// Requests in flight across all the provider's connections; omit for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// The most tokens each model (the upstream's model name) may generate in one
    /// answer; a request asking for more is clamped to it (Claude Code asks 128 000).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_output_tokens: BTreeMap<String, u64>,
    /// Each model's context window in tokens (the upstream's model name), for routing:
    /// a target whose window cannot hold the request is left out, and
    /// `context-optimized` puts the largest first (SPEC R19).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context_windows: BTreeMap<String, u64>,
    /// The provider's own stream deadlines, replacing the `streamContentStall.*`
    /// settings for its streams; omit a field to follow the setting.
    #[serde(default, skip_serializing_if = "StreamTimeouts::is_empty")]
    pub stream_timeouts: StreamTimeouts,
}

/// A provider's stream deadlines (SPEC R11), each in milliseconds, 0 = off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamTimeouts {
    /// `streamContentStall.firstOutputMs`: the first-output budget's base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_output_ms: Option<u64>,
    /// `streamContentStall.firstOutputMaxMs`: the adaptive budget's cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_output_max_ms: Option<u64>,
    /// `streamContentStall.idleMs`: the longest gap between output events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
}

impl StreamTimeouts {
    /// Nothing is overridden.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl From<StreamTimeouts> for switchyard_core::stream::Overrides {
    fn from(t: StreamTimeouts) -> Self {
        Self {
            first_output_ms: t.first_output_ms,
            first_output_max_ms: t.first_output_max_ms,
            idle_ms: t.idle_ms,
        }
    }
}

/// A model's price in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

/// An upstream account. The credential is write-only and never part of this record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConnectionRecord {
    pub id: String,
    pub provider: String,
    /// `oauth`, `apikey` or `local`.
    #[schema(value_type = String, example = "apikey")]
    pub auth_class: AuthClass,
    /// Overrides the provider's format.
    #[schema(value_type = Option<String>)]
    pub format: Option<UpstreamFormat>,
    /// Overrides the provider's base URL.
    pub base_url: Option<String>,
    pub enabled: bool,
    pub max_concurrent: Option<u32>,
    pub rate_limit_overrides: Option<Value>,
    pub provider_specific_data: Option<Value>,
    pub disable_cooling: bool,
    /// Whether a credential is stored (its value is never returned).
    pub has_credential: bool,
}

/// An OAuth subscription connection's tokens as the operator sees them: when the
/// access token expires, when it was last refreshed, and the refreshes that failed.
/// Never a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OauthRecord {
    pub connection_id: String,
    /// Whose CLI the tokens came from: `codex` or `claude`.
    #[schema(example = "claude")]
    pub issuer: String,
    /// When the access token expires (Unix milliseconds), when known.
    pub expires_at: Option<u64>,
    /// When the tokens were last refreshed or imported (Unix milliseconds).
    pub last_refresh_at: Option<u64>,
    /// Failed refreshes in a row; the third makes the connection `expired`.
    pub failures: u32,
    /// No refresh is tried before this, after a failure (Unix milliseconds).
    pub retry_at: Option<u64>,
    /// The token endpoint's last refusal, redacted.
    pub last_error: Option<String>,
}

impl OauthRecord {
    /// The refresh machine's state.
    pub fn refreshes(&self) -> switchyard_core::oauth::Refreshes {
        switchyard_core::oauth::Refreshes {
            last_refresh_at: self.last_refresh_at,
            failures: self.failures,
            retry_at: self.retry_at,
            last_error: self.last_error.clone(),
        }
    }

    /// `ok`, `cooling` (a failed refresh waits for its retry) or `expired`.
    pub fn state(&self, now: u64) -> &'static str {
        let r = self.refreshes();
        if r.expired() {
            "expired"
        } else if r.retry_at.is_some_and(|t| now < t) {
            "cooling"
        } else {
            "ok"
        }
    }
}

/// One target of a combo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetRecord {
    /// `provider/model`.
    pub model: String,
    /// Pin this target to one connection.
    #[serde(default)]
    pub connection: Option<String>,
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default)]
    pub cost: Option<f64>,
}

fn default_weight() -> u32 {
    1
}

/// A named routing group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ComboRecord {
    pub name: String,
    /// A registered strategy name (SPEC R19); an unknown one is refused, naming the
    /// known ones.
    #[schema(example = "priority")]
    pub strategy: String,
    pub targets: Vec<TargetRecord>,
}

/// A model alias (SPEC G3): requests for a name matching `pattern` (exact, or a glob
/// with `*`) go to `target`. The list is kept in order; the first match wins, the
/// aliases limited to the asking key first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AliasRecord {
    #[schema(example = "claude-*")]
    pub pattern: String,
    /// `provider/model`, a combo name or `qtSd/<pool>[/<model>]`.
    #[schema(example = "demo")]
    pub target: String,
    /// Key ids the alias applies to; empty or absent = every key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

/// The model aliases as the API reads and replaces them: the whole list, in the order
/// the aliases are tried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AliasList {
    pub aliases: Vec<AliasRecord>,
}

/// A client API key, without its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KeyRecord {
    pub id: String,
    pub name: String,
    /// The first characters of the key, for recognising it in lists.
    pub prefix: String,
    pub scopes: Vec<String>,
    pub allowed_connections: Option<Vec<String>>,
    pub allowed_models: Option<Vec<String>>,
    /// Unix milliseconds.
    pub created_at: u64,
    /// Unix milliseconds; set once the key is revoked.
    pub revoked_at: Option<u64>,
    /// Hex SHA-256 of the secret; internal, never serialised.
    #[serde(skip)]
    #[schema(ignore)]
    pub key_hash: String,
}

/// One stored setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SettingRecord {
    pub key: String,
    pub value: Value,
}

/// A connection's manual plan override (SPEC Q5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanRecord {
    #[serde(alias = "connection_id")]
    pub connection_id: String,
    #[schema(value_type = Vec<Object>)]
    pub dimensions: Vec<DimensionInput>,
}

/// One row of the request log (SPEC G9). Never bodies, never credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogRow {
    pub ts: u64,
    pub request_id: String,
    pub key_id: Option<String>,
    pub requested_model: String,
    pub provider: Option<String>,
    pub connection_id: Option<String>,
    pub model: Option<String>,
    pub status: u16,
    pub error_code: Option<String>,
    pub stream: bool,
    /// The API the client spoke: `openai` or `anthropic`.
    pub client_format: String,
    pub attempts: u32,
    pub latency_ms: u64,
    pub ttfb_ms: Option<u64>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub egress_ip: Option<String>,
    /// The attempts that failed (to be retried or failed over), in order, and why each
    /// ended (a stream cut names its deadline: `first_output_timeout`, `throughput_low`
    /// …). An upstream refusal passed on to the client is the answer, not listed.
    #[serde(default)]
    pub failed_attempts: Vec<FailedAttempt>,
    /// How the request was routed (SPEC R19's decision trace); none for a request
    /// refused before routing, and for rows written before traces were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteTrace>,
}

/// A request's routing decision: the strategy, the facts it read, the order it
/// produced (each candidate with the values the strategy saw), and what moved a
/// connection first after it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RouteTrace {
    pub strategy: String,
    /// The facts the strategy read (`stats`, `cost`, `quota` …), in a fixed order.
    #[serde(default)]
    pub facts: Vec<String>,
    /// The request's random draw, when the strategy read one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<u64>,
    /// The combo's requests before this one, when the strategy read its turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// The candidates in the order they were to be tried.
    #[serde(default)]
    pub order: Vec<RouteStep>,
    /// `session-pin` or `lease`: what put a connection first after the strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
}

/// One candidate of a [`RouteTrace`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RouteStep {
    pub provider: String,
    pub model: String,
    pub connection_id: String,
    /// The values the strategy read, by fact (`success`, `header_ms`, `cost` …);
    /// `null` when unknown.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub facts: serde_json::Map<String, serde_json::Value>,
}

/// An attempt of a logged request that did not answer, or answered with an error the
/// client was given, with its verdict (SPEC R13):
/// why it ended and what the gateway made of it. Rows written before the verdict was
/// logged carry only the first four fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FailedAttempt {
    pub provider: String,
    pub connection_id: String,
    pub model: String,
    /// What ended it, as the `outcome` label of `switchyard_upstream_attempts_total`.
    pub outcome: String,
    /// The verdict's cause (`rate_limit_exceeded`, `quota_exhausted`, `bad_request` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The status the upstream sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    /// The status after a restatement, when one applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restated_status: Option<u16>,
    /// The restatement and classification rules that applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restated_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The scope the rule set and the gateway acted on (`model`, `connection`,
    /// `provider`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The local address the attempt went out from (SPEC R14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ip: Option<String>,
    /// It failed after its stream had reached the client (the row's own attempt).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub committed: bool,
}

/// The request log's size ([`Store::log_size`](crate::Store::log_size)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LogSize {
    pub rows: u64,
    /// When the oldest row kept was written (Unix milliseconds); none when empty.
    pub oldest_ts: Option<u64>,
    /// The database file's size in bytes.
    pub database_bytes: u64,
}

/// Which request-log rows the store's `Store::query_logs` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Only this key's rows.
    pub key_id: Option<String>,
    /// Only rows served (or last tried) by this provider.
    pub provider: Option<String>,
    /// Only rows whose requested or resolved model is this.
    pub model: Option<String>,
    pub status: Option<StatusFilter>,
    /// Only rows at or after this time (Unix milliseconds).
    pub since_ms: Option<u64>,
    /// Only rows at or before this time (Unix milliseconds).
    pub until_ms: Option<u64>,
    /// Only rows older than this row id (the cursor of the previous page).
    pub before: Option<i64>,
    /// Rows to return.
    pub limit: u32,
}

/// Which statuses a log query keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// Exactly this status.
    Exact(u16),
    /// One class: `2` keeps 200–299.
    Class(u16),
    /// Every error: 400 and above.
    Errors,
}

impl StatusFilter {
    /// The inclusive range of statuses kept.
    pub fn bounds(self) -> (u16, u16) {
        match self {
            StatusFilter::Exact(s) => (s, s),
            StatusFilter::Class(c) => {
                let lo = c.saturating_mul(100);
                (lo, lo.saturating_add(99))
            }
            StatusFilter::Errors => (400, u16::MAX),
        }
    }
}

/// Requests of one time bucket, provider, connection and key (see the store's
/// `Store::log_series`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesRow {
    /// The bucket's start (Unix milliseconds).
    pub bucket_ms: u64,
    pub provider: Option<String>,
    pub connection_id: Option<String>,
    pub key_id: Option<String>,
    pub requests: u64,
    /// Requests answered with a status of 400 or above.
    pub errors: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// One logged request's outcome on its connection (see the store's
/// `Store::recent_outcomes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeRow {
    pub connection_id: String,
    /// The model as the upstream saw it.
    pub model: String,
    pub status: u16,
    pub stream: bool,
    pub latency_ms: u64,
    pub ttfb_ms: Option<u64>,
    pub ts: u64,
}

/// Everything the gateway's in-memory snapshot is built from.
#[derive(Debug, Clone, Default)]
pub struct ConfigRows {
    pub version: i64,
    /// Hex SHA-256 of the generated admin token, when there is one.
    pub admin_token_hash: Option<String>,
    pub providers: Vec<ProviderRecord>,
    /// Connections with their credentials (decrypted; empty = none), for the gateway's
    /// upstream headers only.
    pub connections: Vec<(ConnectionRecord, SecretString)>,
    pub combos: Vec<ComboRecord>,
    /// Model aliases in the order they are tried.
    pub aliases: Vec<AliasRecord>,
    pub keys: Vec<KeyRecord>,
    pub settings: Vec<SettingRecord>,
    pub pools: Vec<switchyard_core::quota::pool::PoolInput>,
    pub plans: Vec<PlanRecord>,
    /// The OAuth connections' refresh state (their tokens are in `connections`).
    pub oauth: Vec<OauthRecord>,
}
