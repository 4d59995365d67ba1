//! The resilience page (SPEC D3): provider breakers with their reset, the cooldown
//! manager (connection cooldowns, model locks, terminal states) with its clears, and
//! the model-lockout and provider-cooldown settings. Handlers parse forms and call
//! `services::resilience`; what is cleared, skipped or refused is decided there.

use crate::fields::{all, hidden, state_label, Fields};
use crate::html::{confirm_form, csrf_field, form, live, table, text, Nav};
use crate::overview::seconds;
use crate::web::{Dash, Empty, Posted, Routes, Signed, View};
use axum::extract::State;
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services;
use switchyard_gateway::services::model::ProviderRecord;
use switchyard_gateway::services::resilience::{
    ClearResult, ClearTarget, ConnectionState, EgressBucketView, ErrorRulesView, ModelLockView,
    ResilienceView,
};
use switchyard_gateway::services::settings::SettingView;
use switchyard_gateway::services::system::BreakerView;

/// The page's path.
const PAGE: &str = "/dashboard/resilience";

/// The settings (SPEC D3) the page offers besides the lockout and provider-cooldown
/// forms, by key prefix: breaker profiles, connection cooldown bases and backoff steps,
/// stream deadlines (first output, idle, throughput) and the stream-stall cooldown,
/// request queue, concurrency, combo cooldown wait and the quota-share concurrency limit.
const OTHER_SETTINGS: [&str; 9] = [
    "breaker.",
    "cooldown.",
    "streamContentStall.",
    "streamThroughputWatchdog.",
    "streamStallCooldown.",
    "requestQueue.",
    "concurrency.",
    "comboCooldownWait.",
    "quotaShareConcurrencyLimit.",
];

/// The resilience page's routes.
pub fn routes() -> Routes {
    Routes::default()
        .page(PAGE, page)
        .form("/dashboard/resilience/reset", reset)
        .form("/dashboard/resilience/clear", clear_selected)
        .form("/dashboard/resilience/clear-provider", clear_provider)
        .form("/dashboard/resilience/clear-all", clear_all)
        .form("/dashboard/resilience/re-enable", re_enable)
        .form("/dashboard/resilience/model-lockout", model_lockout)
        .form("/dashboard/resilience/provider-cooldown", provider_cooldown)
        .form("/dashboard/resilience/error-rules", error_rules)
}

/// What the page shows.
#[derive(Debug)]
pub struct Resilience {
    pub providers: Vec<ProviderRecord>,
    pub breakers: Vec<BreakerView>,
    pub connections: Vec<ConnectionState>,
    pub locks: Vec<ModelLockView>,
    pub settings: ResilienceView,
    /// The error rules in force (SPEC R13).
    pub rules: ErrorRulesView,
    /// The egress buckets (SPEC R14).
    pub egress: Vec<EgressBucketView>,
    /// The [`OTHER_SETTINGS`], as the settings page lists them.
    pub others: Vec<SettingView>,
}

/// `GET /dashboard/resilience`.
async fn page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    let app = &dash.app;
    match services::config::providers(app).await {
        Ok(providers) => {
            let r = Resilience {
                providers,
                breakers: services::system::breakers(app),
                connections: services::resilience::cooldowns(app, None),
                locks: services::resilience::model_locks(app),
                settings: services::resilience::get_settings(app),
                rules: services::resilience::error_rules(app),
                egress: services::resilience::egress_buckets(app),
                others: services::settings::list(app)
                    .into_iter()
                    .filter(|s| OTHER_SETTINGS.iter().any(|p| s.key.starts_with(p)))
                    .collect(),
            };
            dash.render(
                &session,
                View::ok("Resilience", Nav::Resilience, render(&r, &session.csrf)),
            )
        }
        Err(e) => dash.failed(&session, "Resilience", Nav::Resilience, &e),
    }
}

/// A form naming one provider.
#[derive(Debug, Deserialize)]
struct ProviderForm {
    #[serde(default)]
    provider: String,
}

/// `POST /dashboard/resilience/reset`: resets one provider's breaker.
async fn reset(
    State(dash): State<Arc<Dash>>,
    Posted(session, f): Posted<ProviderForm>,
) -> Response {
    let outcome = services::resilience::reset(&dash.app, Some(&f.provider), &[]);
    dash.done(&session, PAGE, outcome, |r| {
        format!("{}: {} breaker reset.", f.provider, r.breakers_reset)
    })
    .await
}

/// The notice of a clear.
fn cleared(r: &ClearResult) -> String {
    format!(
        "{} cleared, {} unchanged, {} skipped as terminal; {} model locks cleared.",
        r.cleared, r.unchanged, r.skipped_terminal, r.lockouts_cleared
    )
}

/// `POST /dashboard/resilience/clear`: clears the checked connections (`connection`
/// fields, repeated).
async fn clear_selected(
    State(dash): State<Arc<Dash>>,
    Posted(session, fields): Posted<Fields>,
) -> Response {
    let ids = all(&fields, "connection");
    let outcome = services::resilience::clear_cooldowns(&dash.app, ClearTarget::Connections(ids));
    dash.done(&session, PAGE, outcome, |r| cleared(&r)).await
}

/// `POST /dashboard/resilience/clear-provider`: clears every connection of a provider.
async fn clear_provider(
    State(dash): State<Arc<Dash>>,
    Posted(session, f): Posted<ProviderForm>,
) -> Response {
    let target = ClearTarget::All {
        provider: Some(f.provider),
    };
    let outcome = services::resilience::clear_cooldowns(&dash.app, target);
    dash.done(&session, PAGE, outcome, |r| cleared(&r)).await
}

/// `POST /dashboard/resilience/clear-all`: clears every connection.
async fn clear_all(
    State(dash): State<Arc<Dash>>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome =
        services::resilience::clear_cooldowns(&dash.app, ClearTarget::All { provider: None });
    dash.done(&session, PAGE, outcome, |r| cleared(&r)).await
}

/// The re-enable form: a lock's provider, connection and family or model.
#[derive(Debug, Deserialize)]
struct ReEnable {
    provider: String,
    connection: String,
    model: String,
}

/// `POST /dashboard/resilience/re-enable`: clears the locks covering a model.
async fn re_enable(
    State(dash): State<Arc<Dash>>,
    Posted(session, f): Posted<ReEnable>,
) -> Response {
    let r =
        services::resilience::clear_model_locks(&dash.app, &f.provider, &f.connection, &f.model);
    dash.done(&session, PAGE, Ok::<_, ApiError>(r), |r| {
        format!(
            "{} re-enabled on {}: {} lock cleared.",
            f.model, f.connection, r.cleared
        )
    })
    .await
}

/// A settings form's fields (all but the CSRF token) as the patch's JSON fields.
fn patch_fields(fields: Fields) -> Map<String, Value> {
    fields
        .into_iter()
        .filter(|(k, _)| k != "csrf")
        .map(|(k, v)| (k, Value::String(v)))
        .collect()
}

/// `POST /dashboard/resilience/model-lockout`: the model-lockout settings, validated as
/// `PATCH /api/resilience` validates `modelLockout`.
async fn model_lockout(
    State(dash): State<Arc<Dash>>,
    Posted(session, fields): Posted<Fields>,
) -> Response {
    let outcome =
        services::resilience::patch_settings(&dash.app, &[("modelLockout", &patch_fields(fields))])
            .await;
    dash.done(&session, PAGE, outcome, |_| {
        "Model lockout settings saved.".to_owned()
    })
    .await
}

/// `POST /dashboard/resilience/provider-cooldown`: the provider-cooldown settings,
/// validated as `PATCH /api/resilience` validates `providerCooldown`.
async fn provider_cooldown(
    State(dash): State<Arc<Dash>>,
    Posted(session, fields): Posted<Fields>,
) -> Response {
    let outcome = services::resilience::patch_settings(
        &dash.app,
        &[("providerCooldown", &patch_fields(fields))],
    )
    .await;
    dash.done(&session, PAGE, outcome, |_| {
        "Provider cooldown settings saved.".to_owned()
    })
    .await
}

/// The error-rules form: the operator's restatements and rules, each a JSON list.
#[derive(Debug, Deserialize)]
struct RulesForm {
    #[serde(default)]
    restatements: String,
    #[serde(default)]
    rules: String,
}

/// `POST /dashboard/resilience/error-rules`: the operator's error rules (SPEC R13),
/// validated as `PATCH /api/resilience` validates `errorRules`. A list that is not JSON
/// is passed on as text, so the refusal names what is wrong with it.
async fn error_rules(
    State(dash): State<Arc<Dash>>,
    Posted(session, f): Posted<RulesForm>,
) -> Response {
    let list = |text: &str| {
        let text = if text.trim().is_empty() { "[]" } else { text };
        serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    };
    let mut fields = Map::new();
    fields.insert("restatements".to_owned(), list(&f.restatements));
    fields.insert("rules".to_owned(), list(&f.rules));
    let outcome = services::resilience::patch_settings(&dash.app, &[("errorRules", &fields)]).await;
    dash.done(&session, PAGE, outcome, |v| {
        format!(
            "Error rules saved: {} restatements and {} rules of the operator's.",
            v.error_rules.restatements.len(),
            v.error_rules.rules.len()
        )
    })
    .await
}

/// A rule's duration: whole hours, minutes or seconds.
fn span(ms: u64) -> String {
    match ms {
        ms if ms >= 3_600_000 && ms.is_multiple_of(3_600_000) => format!("{} h", ms / 3_600_000),
        ms if ms >= 60_000 && ms.is_multiple_of(60_000) => format!("{} min", ms / 60_000),
        ms => seconds(ms),
    }
}

/// A list of strings as one cell, or an em dash.
fn listed(items: &[String]) -> String {
    if items.is_empty() {
        "—".to_owned()
    } else {
        items.join(", ")
    }
}

/// Statuses as one cell, or `any`.
fn statuses(items: &[u16]) -> String {
    if items.is_empty() {
        "any".to_owned()
    } else {
        items
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The restatements and classification rules in force, the operator's first, with the
/// allow-lists (SPEC R13).
fn rules_tables(r: &Resilience) -> Markup {
    let e = &r.rules;
    let restated: Vec<Vec<Markup>> = e
        .restatements
        .iter()
        .map(|x| ("operator", x))
        .chain(e.builtin_restatements.iter().map(|x| ("built-in", x)))
        .map(|(origin, x)| {
            vec![
                text(origin),
                text(&x.id),
                text(&x.provider),
                text(statuses(&x.from_statuses)),
                text(x.to_status.to_string()),
                text(listed(&x.text_markers)),
                text(listed(&x.exclude_markers)),
                text(x.default_retry_after_ms.map_or("—".to_owned(), span)),
            ]
        })
        .collect();
    let rules: Vec<Vec<Markup>> = e
        .rules
        .iter()
        .map(|x| ("operator", x))
        .chain(e.builtin_rules.iter().map(|x| ("built-in", x)))
        .map(|(origin, x)| {
            let mut matches = Vec::new();
            for (what, items) in [
                ("headers", &x.headers),
                ("codes", &x.codes),
                ("text", &x.text_markers),
                ("not", &x.exclude_markers),
            ] {
                if !items.is_empty() {
                    matches.push(format!("{what}: {}", items.join(", ")));
                }
            }
            vec![
                text(origin),
                text(&x.id),
                text(&x.provider),
                text(statuses(&x.statuses)),
                text(if matches.is_empty() {
                    "—".to_owned()
                } else {
                    matches.join("; ")
                }),
                text(x.reason.as_str()),
                text(x.scope.map_or("—", |s| s.as_str())),
                text(x.cooldown_ms.map_or("—".to_owned(), span)),
            ]
        })
        .collect();
    html! {
        (table(
            "Status restatements (applied before classification)",
            &["Origin", "Id", "Family", "From", "To", "Markers", "Unless", "Client retry"],
            &restated,
            "No restatement.",
        ))
        (table(
            "Provider error rules (the first that matches decides)",
            &["Origin", "Id", "Family", "Statuses", "Matches", "Cause", "Scope", "Cooldown"],
            &rules,
            "No rule.",
        ))
        p.hint {
            "Built-in rules read the full error text only for " (e.full_text_families.join(", "))
            ", and their scope is acted on only for " (e.honors_scope_families.join(", "))
            ". A family with an operator rule gets both. Status 200 in a rule matches an error event inside a stream."
        }
    }
}

/// The operator's error rules as an editable form: two JSON lists.
fn rules_form(r: &Resilience, csrf: &str) -> Markup {
    let e = &r.rules;
    let pretty = |v: Value| serde_json::to_string_pretty(&v).unwrap_or_default();
    let restatements = pretty(serde_json::to_value(&e.restatements).unwrap_or_default());
    let rules = pretty(serde_json::to_value(&e.rules).unwrap_or_default());
    let body = html! {
        label for="rules-restatements" { "Status restatements (JSON list)" }
        textarea id="rules-restatements" name="restatements" rows="6" { (restatements) }
        label for="rules-rules" { "Provider error rules (JSON list)" }
        textarea id="rules-rules" name="rules" rows="8" { (rules) }
    };
    form(
        "/dashboard/resilience/error-rules",
        csrf,
        "stack",
        body,
        "Save error rules",
    )
}

/// The egress buckets (SPEC R14): connections by the address they last went out from.
fn egress(r: &Resilience) -> Markup {
    let rows: Vec<Vec<Markup>> = r
        .egress
        .iter()
        .map(|b| {
            let connections: Vec<String> = b
                .connections
                .iter()
                .map(|c| c.connection_id.clone())
                .collect();
            vec![
                text(&b.family),
                text(&b.address),
                text(if b.bucketed { "yes" } else { "no" }),
                text(connections.join(", ")),
            ]
        })
        .collect();
    table(
        "Egress buckets (last 24 h; a 429 in a bucketed family cools the whole bucket)",
        &["Family", "Egress address", "Bucketed", "Connections"],
        &rows,
        "No upstream attempt seen yet.",
    )
}

/// A duration left, or an em dash when nothing is left.
fn left(ms: u64) -> String {
    if ms == 0 {
        "—".to_owned()
    } else {
        seconds(ms)
    }
}

/// A labelled input of a settings form; its id is the form's prefix and the name.
fn input(prefix: &str, name: &str, label: &str, kind: &str, value: &str) -> Markup {
    let id = format!("{prefix}-{}", name.replace('.', "-"));
    crate::fields::input(&id, name, label, kind, value, false)
}

/// A labelled true/false select of a settings form.
fn yes_no(prefix: &str, name: &str, label: &str, value: bool) -> Markup {
    let id = format!("{prefix}-{}", name.replace('.', "-"));
    html! {
        label for=(id) { (label) }
        select id=(id) name=(name) {
            @for v in [true, false] {
                option value=(v) selected[v == value] { (if v { "on" } else { "off" }) }
            }
        }
    }
}

/// The provider breakers' table: every provider, `CLOSED` unless its breaker has seen
/// failures, with a reset button.
fn breakers(r: &Resilience, csrf: &str) -> Markup {
    let by_provider: HashMap<&str, &BreakerView> = r
        .breakers
        .iter()
        .map(|b| (b.provider.as_str(), b))
        .collect();
    let rows: Vec<Vec<Markup>> = r
        .providers
        .iter()
        .map(|p| {
            let b = by_provider.get(p.id.as_str());
            let probe = match b.and_then(|b| b.probe_in_ms) {
                Some(0) => "now".to_owned(),
                Some(ms) => seconds(ms),
                None => "—".to_owned(),
            };
            vec![
                text(&p.id),
                state_label(b.map_or("CLOSED", |b| b.state)),
                text(b.map_or(0, |b| b.failures).to_string()),
                text(probe),
                form(
                    "/dashboard/resilience/reset",
                    csrf,
                    "inline",
                    hidden("provider", &p.id),
                    "Reset",
                ),
            ]
        })
        .collect();
    table(
        "Provider circuit breakers",
        &["Provider", "State", "Failures", "Next probe in", "Action"],
        &rows,
        "No providers.",
    )
}

/// The connection cooldowns (refreshed with the live region).
fn cooldowns(r: &Resilience) -> Markup {
    let rows: Vec<Vec<Markup>> = r
        .connections
        .iter()
        .map(|c| {
            vec![
                text(&c.connection_id),
                text(&c.provider),
                text(c.auth_class),
                state_label(c.state),
                text(left(c.remaining_ms)),
                text(c.backoff_level.to_string()),
                text(c.last_error.as_deref().unwrap_or("—")),
            ]
        })
        .collect();
    table(
        "Connection cooldowns (terminal states are never cleared)",
        &[
            "Connection",
            "Provider",
            "Auth",
            "State",
            "Time left",
            "Backoff level",
            "Last error",
        ],
        &rows,
        "No connections.",
    )
}

/// The clear-by-selection form: a checkbox per connection, with its state when the
/// page loaded. It sits outside the live region, so a refresh never clears the ticks.
fn select_form(r: &Resilience, csrf: &str) -> Markup {
    html! {
        form method="post" action="/dashboard/resilience/clear" id="clear-selected" class="stack" {
            (csrf_field(csrf))
            fieldset {
                legend { "Connections to clear" }
                @for c in &r.connections {
                    @let id = format!("select-{}", c.connection_id);
                    div.check {
                        input type="checkbox" name="connection" value=(c.connection_id) id=(id);
                        label for=(id) { (c.connection_id) " (" (c.state) ")" }
                    }
                }
            }
            button type="submit" { "Clear selected" }
        }
    }
}

/// The clear-by-provider and clear-all forms.
fn clear_forms(r: &Resilience, csrf: &str) -> Markup {
    html! {
        (form(
            "/dashboard/resilience/clear-provider",
            csrf,
            "row",
            html! {
                label for="clear-provider" { "Provider" }
                select id="clear-provider" name="provider" {
                    @for p in &r.providers { option value=(p.id) { (p.id) } }
                }
            },
            "Clear provider's cooldowns",
        ))
        (confirm_form(
            "/dashboard/resilience/clear-all",
            csrf,
            "Clear all cooldowns…",
            "Clear every connection's cooldowns and model locks",
        ))
    }
}

/// The model locks, each with a re-enable button.
fn locks(r: &Resilience, csrf: &str) -> Markup {
    let rows: Vec<Vec<Markup>> = r
        .locks
        .iter()
        .map(|l| {
            vec![
                text(&l.provider),
                text(&l.connection),
                text(l.scope),
                text(&l.name),
                text(l.failures.to_string()),
                text(l.status.to_string()),
                text(left(l.remaining_ms)),
                form(
                    "/dashboard/resilience/re-enable",
                    csrf,
                    "inline",
                    html! {
                        (hidden("provider", &l.provider))
                        (hidden("connection", &l.connection))
                        (hidden("model", &l.name))
                    },
                    "Re-enable",
                ),
            ]
        })
        .collect();
    table(
        "Model cooldowns (locked models)",
        &[
            "Provider",
            "Connection",
            "Scope",
            "Model or family",
            "Failures",
            "Status",
            "Time left",
            "Action",
        ],
        &rows,
        "No model is locked.",
    )
}

/// The connections in a terminal state.
fn terminal(r: &Resilience) -> Markup {
    let rows: Vec<Vec<Markup>> = r
        .connections
        .iter()
        .filter(|c| !matches!(c.state, "active" | "cooling"))
        .map(|c| {
            vec![
                text(&c.connection_id),
                text(&c.provider),
                text(c.state),
                text(c.last_error.as_deref().unwrap_or("—")),
            ]
        })
        .collect();
    table(
        "Terminal states (a new credential ends them)",
        &["Connection", "Provider", "State", "Last error"],
        &rows,
        "No connection is in a terminal state.",
    )
}

/// The model-lockout and provider-cooldown settings forms.
fn settings(s: &ResilienceView, csrf: &str) -> Markup {
    let l = &s.model_lockout;
    let codes: Vec<String> = l.error_codes.iter().map(u16::to_string).collect();
    let lockout = html! {
        (yes_no("lockout", "enabled", "Lock failing models", l.enabled))
        (input(
            "lockout",
            "errorCodes",
            "Statuses that lock a model (comma separated)",
            "text",
            &codes.join(","),
        ))
        (input("lockout", "baseCooldownMs", "First lock (ms)", "number", &l.base_cooldown_ms.to_string()))
        (input("lockout", "maxCooldownMs", "Longest lock (ms)", "number", &l.max_cooldown_ms.to_string()))
        (input("lockout", "maxBackoffSteps", "Most doublings", "number", &l.max_backoff_steps.to_string()))
        (yes_no("lockout", "useExponentialBackoff", "Double repeated locks", l.use_exponential_backoff))
    };
    let p = &s.provider_cooldown;
    let groups = [
        ("oauth", "OAuth", &p.oauth),
        ("apiKey", "API key", &p.api_key),
    ];
    let cooldown = html! {
        (yes_no("cooldown", "enabled", "Provider cooldown", p.enabled))
        @for (class, label, g) in groups {
            @for (field, what, value) in [
                ("failureThreshold", "failures that trip it", u64::from(g.failure_threshold)),
                ("failureWindowMs", "failure window (ms)", g.failure_window_ms),
                ("cooldownMs", "cooldown (ms)", g.cooldown_ms),
            ] {
                (input(
                    "cooldown",
                    &format!("{class}.{field}"),
                    &format!("{label}: {what}"),
                    "number",
                    &value.to_string(),
                ))
            }
        }
    };
    html! {
        h3 id="lockout-settings" { "Model lockout" }
        (form("/dashboard/resilience/model-lockout", csrf, "stack", lockout, "Save model lockout"))
        h3 id="cooldown-settings" { "Provider cooldown" }
        (form("/dashboard/resilience/provider-cooldown", csrf, "stack", cooldown, "Save provider cooldown"))
    }
}

/// The page's `<main>` content; the tables that change refresh every 30 s.
pub fn render(r: &Resilience, csrf: &str) -> Markup {
    let changing = html! {
        section aria-labelledby="breakers" {
            h2 id="breakers" { "Provider breakers" }
            (breakers(r, csrf))
        }
        section aria-labelledby="cooldowns" {
            h2 id="cooldowns" { "Cooldown manager" }
            (cooldowns(r))
            (locks(r, csrf))
            (terminal(r))
            (egress(r))
        }
    };
    html! {
        (live("resilience-live", PAGE, 30, changing))
        section aria-labelledby="clear" {
            h2 id="clear" { "Clear cooldowns" }
            p.hint { "Clearing ends cooldowns and model locks; connections in a terminal state are counted and left as they are. The states below are as of the page load; the tables above refresh every 30 s." }
            (select_form(r, csrf))
            (clear_forms(r, csrf))
        }
        section aria-labelledby="error-rules" {
            h2 id="error-rules" { "Error rules" }
            (rules_tables(r))
            (rules_form(r, csrf))
        }
        section aria-labelledby="settings" {
            h2 id="settings" { "Settings" }
            (settings(&r.settings, csrf))
            h3 id="other-settings" { "Breaker and cooldown profiles, stream deadlines, queues, waits and stalls" }
            (crate::settings::table(
                "Other resilience settings",
                &r.others.iter().collect::<Vec<_>>(),
                csrf,
                PAGE,
            ))
        }
    }
}
