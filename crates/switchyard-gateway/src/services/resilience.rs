//! Resilience state and settings (SPEC R6): connection cooldowns and terminal states,
//! model locks, provider breakers, and the resilience settings.
//!
//! Reads come from the snapshot and the runtime state; clears and resets change the
//! runtime state only, and settings go through `apply_change`. Nothing here returns a
//! credential or touches the quota engine.

use super::{apply_change, check_consistency, upsert_setting};
use crate::error::ApiError;
use crate::state::AppState;
use serde::Serialize;
use serde_json::{Map, Value};
use switchyard_core::resilience::cooldown::ErrorType;
use switchyard_core::resilience::lockout::Scope;
use switchyard_core::resilience::rules::{self, ErrorRule, Restatement};
use switchyard_core::settings;
use utoipa::ToSchema;

/// One connection's resilience state.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionState {
    pub connection_id: String,
    pub provider: String,
    pub auth_class: &'static str,
    /// `active`, `cooling`, or a terminal state (`banned`, `expired`,
    /// `credits_exhausted`).
    pub state: &'static str,
    pub remaining_ms: u64,
    pub backoff_level: u32,
    #[schema(value_type = Option<String>)]
    pub last_error_type: Option<ErrorType>,
    pub last_error: Option<String>,
    pub error_code: Option<u16>,
    /// Models locked on this connection.
    pub model_locks: Vec<ModelLockView>,
    /// The Claude usage wall (SPEC R17), for a connection that met it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_wall: Option<UsageWallView>,
}

/// A connection's usage-wall state (SPEC R17); times are Unix milliseconds, absent once
/// passed.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageWallView {
    /// Requests carry `anthropic-usage-limit: slow` until then.
    pub lane_active_until_ms: Option<u64>,
    /// Why the lane last ended: `weekly_limit`, `budget_exhausted`, `off`, `ineligible`,
    /// `window_rolled`, `extra_usage` or `max_wait`.
    pub last_exit: Option<&'static str>,
    pub last_exit_at_ms: Option<u64>,
    /// The slow-lane offer is not accepted until then.
    pub offer_blocked_until_ms: Option<u64>,
    /// No session-limit reset is attempted until then.
    pub reset_unavailable_until_ms: Option<u64>,
}

impl From<switchyard_core::resilience::usage_wall::Status> for UsageWallView {
    fn from(s: switchyard_core::resilience::usage_wall::Status) -> Self {
        Self {
            lane_active_until_ms: s.lane_active_until_ms,
            last_exit: s.last_exit.map(|e| e.reason.as_str()),
            last_exit_at_ms: s.last_exit.map(|e| e.at_ms),
            offer_blocked_until_ms: s.offer_blocked_until_ms,
            reset_unavailable_until_ms: s.reset_unavailable_until_ms,
        }
    }
}

/// Every connection's resilience state, or only `provider`'s connections'.
pub fn cooldowns(state: &AppState, provider: Option<&str>) -> Vec<ConnectionState> {
    let snap = state.snapshot();
    let now = state.clock.now_ms();
    let locks = lock_views(state, now);
    snap.catalog
        .connections()
        .iter()
        .filter(|c| provider.is_none_or(|p| p == c.provider))
        .map(|c| {
            let h = state.runtime.resilience.health_of(&c.id);
            let status = match h.terminal {
                Some(t) => t.as_str(),
                None if !h.usable(now) => "cooling",
                None => "active",
            };
            ConnectionState {
                connection_id: c.id.clone(),
                provider: c.provider.clone(),
                auth_class: c.auth_class.as_str(),
                state: status,
                remaining_ms: h.remaining_ms(now),
                backoff_level: h.backoff_level,
                last_error_type: h.last_error_type,
                last_error: h.last_error,
                error_code: h.error_code,
                model_locks: locks
                    .iter()
                    .filter(|l| l.connection == c.id)
                    .cloned()
                    .collect(),
                usage_wall: state
                    .runtime
                    .walls
                    .status(&c.id, now)
                    .map(UsageWallView::from),
            }
        })
        .collect()
}

/// Which connections a clear applies to.
#[derive(Debug)]
pub enum ClearTarget {
    /// These connections; none is an error.
    Connections(Vec<String>),
    /// Every connection, or every one of this provider.
    All { provider: Option<String> },
}

/// What a clear did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClearResult {
    pub cleared: usize,
    pub unchanged: usize,
    pub skipped_terminal: usize,
    pub lockouts_cleared: usize,
}

/// Clears the cooldowns and model locks of `target`'s connections; terminal states are
/// counted, never cleared.
pub fn clear_cooldowns(state: &AppState, target: ClearTarget) -> Result<ClearResult, ApiError> {
    let snap = state.snapshot();
    let ids: Vec<String> = match target {
        ClearTarget::All { provider } => snap
            .catalog
            .connections()
            .iter()
            .filter(|c| provider.as_deref().is_none_or(|p| p == c.provider))
            .map(|c| c.id.clone())
            .collect(),
        ClearTarget::Connections(ids) => {
            if ids.is_empty() {
                return Err(ApiError::InvalidField {
                    field: "connectionIds".to_owned(),
                    message: "connectionIds: list the connections, or set all: true".to_owned(),
                });
            }
            if let Some(bad) = ids.iter().find(|c| snap.catalog.connection(c).is_none()) {
                return Err(ApiError::InvalidField {
                    field: "connectionIds".to_owned(),
                    message: format!("connectionIds: unknown connection `{bad}`"),
                });
            }
            ids
        }
    };
    let (cleared, unchanged, skipped_terminal) = state.runtime.resilience.clear_cooldowns(&ids);
    // The connections' model locks go too (SPEC R6); a lock is not a terminal state.
    let lockouts_cleared = state
        .runtime
        .resilience
        .clear_locks(|k| ids.contains(&k.connection));
    tracing::info!(
        cleared,
        unchanged,
        skipped_terminal,
        lockouts_cleared,
        "Operator cleared connection cooldowns."
    );
    Ok(ClearResult {
        cleared,
        unchanged,
        skipped_terminal,
        lockouts_cleared,
    })
}

/// What a reset did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResetResult {
    pub breakers_reset: usize,
    pub connections_reset: usize,
}

/// Resets `provider`'s breaker (every breaker when `None`) and resets `connection_ids`
/// completely, terminal states included.
pub fn reset(
    state: &AppState,
    provider: Option<&str>,
    connection_ids: &[String],
) -> Result<ResetResult, ApiError> {
    let snap = state.snapshot();
    if let Some(p) = provider {
        if snap.catalog.provider(p).is_none() {
            return Err(ApiError::InvalidField {
                field: "provider".to_owned(),
                message: format!("provider: unknown provider `{p}`"),
            });
        }
    }
    if let Some(bad) = connection_ids
        .iter()
        .find(|c| snap.catalog.connection(c).is_none())
    {
        return Err(ApiError::InvalidField {
            field: "connectionIds".to_owned(),
            message: format!("connectionIds: unknown connection `{bad}`"),
        });
    }
    let breakers_reset = state.runtime.resilience.reset_breakers(provider);
    for c in connection_ids {
        state.runtime.resilience.reset_connection(c);
    }
    tracing::info!(
        breakers_reset,
        connections_reset = connection_ids.len(),
        "Operator reset resilience state."
    );
    Ok(ResetResult {
        breakers_reset,
        connections_reset: connection_ids.len(),
    })
}

/// One active model lock.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelLockView {
    pub provider: String,
    pub connection: String,
    /// `family` or `model`.
    pub scope: &'static str,
    /// The family or model name.
    pub name: String,
    pub failures: u32,
    pub status: u16,
    pub until: u64,
    pub remaining_ms: u64,
}

/// The model locks in force now.
pub fn model_locks(state: &AppState) -> Vec<ModelLockView> {
    lock_views(state, state.clock.now_ms())
}

fn lock_views(state: &AppState, now: u64) -> Vec<ModelLockView> {
    state
        .runtime
        .resilience
        .model_locks(now)
        .into_iter()
        .map(|(k, l)| {
            let (scope, name) = match k.scope {
                Scope::Family(f) => ("family", f),
                Scope::Model(m) => ("model", m),
            };
            ModelLockView {
                provider: k.provider,
                connection: k.connection,
                scope,
                name,
                failures: l.failures,
                status: l.status,
                until: l.until,
                remaining_ms: l.until.saturating_sub(now),
            }
        })
        .collect()
}

/// What a re-enable did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReEnableResult {
    pub cleared: usize,
}

/// Re-enables `model` on `provider`'s connection `connection`: clears the locks that
/// cover it.
pub fn clear_model_locks(
    state: &AppState,
    provider: &str,
    connection: &str,
    model: &str,
) -> ReEnableResult {
    let cleared = state.runtime.resilience.clear_locks(|k| {
        k.provider == provider && k.connection == connection && k.scope.covers(model)
    });
    tracing::info!(provider = %provider, connection_id = %connection, model = %model, cleared, "Operator re-enabled a model.");
    ReEnableResult { cleared }
}

/// The resilience settings as `GET`/`PATCH /api/resilience` show them.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResilienceView {
    #[schema(value_type = Object)]
    pub model_lockout: switchyard_core::resilience::lockout::Settings,
    pub provider_cooldown: ProviderCooldownView,
    pub error_rules: OperatorRules,
}

/// The operator's error rules (SPEC R13; settings `resilience.statusRestatements` and
/// `resilience.providerErrorRules`), matched before the built-in ones.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperatorRules {
    #[schema(value_type = Vec<Object>)]
    pub restatements: Vec<Restatement>,
    #[schema(value_type = Vec<Object>)]
    pub rules: Vec<ErrorRule>,
}

/// The error rules in force (SPEC R13): the operator's, then the built-in ones, with
/// the families each allow-list opens.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorRulesView {
    #[schema(value_type = Vec<Object>)]
    pub restatements: Vec<Restatement>,
    #[schema(value_type = Vec<Object>)]
    pub rules: Vec<ErrorRule>,
    #[schema(value_type = Vec<Object>)]
    pub builtin_restatements: Vec<Restatement>,
    #[schema(value_type = Vec<Object>)]
    pub builtin_rules: Vec<ErrorRule>,
    /// Families whose built-in rules read the full error text.
    pub full_text_families: Vec<&'static str>,
    /// Families whose built-in rules' scope is acted on.
    pub honors_scope_families: Vec<&'static str>,
    /// Families whose 429s cool every connection behind the same egress address.
    pub egress_bucketed_families: Vec<&'static str>,
}

/// One egress bucket (SPEC R14).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressBucketView {
    pub family: String,
    pub address: String,
    /// Whether a 429 of one connection cools the others.
    pub bucketed: bool,
    pub connections: Vec<EgressConnectionView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressConnectionView {
    pub connection_id: String,
    /// When an attempt last went out from the address (Unix milliseconds).
    pub last_seen_ms: u64,
}

/// The egress buckets seen in the last 24 h.
pub fn egress_buckets(state: &AppState) -> Vec<EgressBucketView> {
    state
        .runtime
        .resilience
        .egress_buckets(state.clock.now_ms())
        .into_iter()
        .map(|b| EgressBucketView {
            bucketed: rules::EGRESS_BUCKETED_FAMILIES.contains(&b.family.as_str()),
            family: b.family,
            address: b.address,
            connections: b
                .connections
                .into_iter()
                .map(|(connection_id, last_seen_ms)| EgressConnectionView {
                    connection_id,
                    last_seen_ms,
                })
                .collect(),
        })
        .collect()
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderCooldownView {
    pub enabled: bool,
    pub oauth: GateView,
    pub api_key: GateView,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateView {
    pub failure_threshold: u32,
    pub failure_window_ms: u64,
    pub cooldown_ms: u64,
}

/// The resilience settings in force now.
pub fn get_settings(state: &AppState) -> ResilienceView {
    let r = state.snapshot().settings.resilience.clone();
    let gate = |p: switchyard_core::resilience::provider_cooldown::Profile| GateView {
        failure_threshold: p.threshold,
        failure_window_ms: p.window_ms,
        cooldown_ms: p.cooldown_ms,
    };
    ResilienceView {
        model_lockout: r.lockout,
        provider_cooldown: ProviderCooldownView {
            enabled: r.provider_cooldown_enabled,
            oauth: gate(r.provider_cooldown_oauth),
            api_key: gate(r.provider_cooldown_apikey),
        },
        error_rules: OperatorRules {
            restatements: r.restatements,
            rules: r.error_rules,
        },
    }
}

/// The error rules in force now.
pub fn error_rules(state: &AppState) -> ErrorRulesView {
    let r = &state.snapshot().settings.resilience;
    ErrorRulesView {
        restatements: r.restatements.clone(),
        rules: r.error_rules.clone(),
        builtin_restatements: rules::builtin_restatements(),
        builtin_rules: rules::builtin_rules(),
        full_text_families: rules::FULL_TEXT_FAMILIES.to_vec(),
        honors_scope_families: rules::HONORS_SCOPE_FAMILIES.to_vec(),
        egress_bucketed_families: rules::EGRESS_BUCKETED_FAMILIES.to_vec(),
    }
}

/// The setting key of a patch field, or `None` for an unknown field.
fn patch_key(section: &str, field: &str) -> Option<String> {
    let key = match (section, field) {
        ("modelLockout", f) => format!("resilience.modelLockout.{f}"),
        ("errorRules", "restatements") => "resilience.statusRestatements".to_owned(),
        ("errorRules", "rules") => "resilience.providerErrorRules".to_owned(),
        ("providerCooldown", "enabled") => "providerCooldown.enabled".to_owned(),
        ("providerCooldown", f) => {
            let (class, rest) = f.split_once('.')?;
            format!("providerCooldown.{class}.{rest}")
        }
        _ => return None,
    };
    settings::def(&key).map(|_| key)
}

/// Stores the resilience settings named in `sections` (`modelLockout`,
/// `providerCooldown`, `errorRules`: the fields of `PATCH /api/resilience`); answers
/// the settings in force afterwards.
pub async fn patch_settings(
    state: &AppState,
    sections: &[(&str, &Map<String, Value>)],
) -> Result<ResilienceView, ApiError> {
    let mut writes = Vec::new();
    for &(section, fields) in sections {
        // Nested objects (`providerCooldown.oauth.{...}`, as GET shows them) are
        // flattened to dotted fields.
        let mut flat = Vec::new();
        for (field, value) in fields {
            match value.as_object().filter(|_| section != "errorRules") {
                Some(inner) => {
                    flat.extend(inner.iter().map(|(k, v)| (format!("{field}.{k}"), v)));
                }
                None => flat.push((field.clone(), value)),
            }
        }
        for (field, value) in flat {
            let name = format!("{section}.{field}");
            let key = patch_key(section, &field).ok_or_else(|| ApiError::InvalidField {
                field: name.clone(),
                message: format!("{name}: unknown resilience setting"),
            })?;
            let v = settings::validate(&key, value, settings::Source::Database).map_err(|e| {
                ApiError::InvalidField {
                    field: name.clone(),
                    message: format!("{name}: {e}"),
                }
            })?;
            writes.push((key, v.to_json()));
        }
    }
    let t = state.clock.now_ms();
    let preview = writes.clone();
    let base = state.config.layers.clone();
    apply_change(
        state,
        move |rows| {
            for (key, value) in preview {
                upsert_setting(rows, &key, value);
            }
            // The settings must hold together (e.g. lockout maximum >= base).
            check_consistency(rows, &base)
        },
        move |b| {
            for (key, value) in &writes {
                b.put_setting(key, value, t)?;
            }
            Ok(())
        },
    )
    .await?;
    Ok(get_settings(state))
}
