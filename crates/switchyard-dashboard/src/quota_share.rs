//! Quota share (SPEC D1): what a pool is, creating one, the pools' cards, and a pool's
//! page with its usage per dimension (a stacked bar per dimension, the allocation
//! table, the burn-rate chart, recent decisions), its allocations form and its removal.
//!
//! The create form has rows of fields for the dimensions and the allocations (see
//! `forms`), the allocations form a row per key. The handlers only map the fields to
//! the API's input structs and `services::quota` validates them, so an error reads as
//! the management API's, beside the row it names.

use crate::charts::{self, Mark, Segment, Series};
use crate::forms::{self, AllocRow, DimRow, Placed};
use crate::html::{self, table, text, Nav};
use crate::overview;
use crate::web::{Dash, Empty, Posted, Routes, Session, Signed, View};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use switchyard_core::quota::decide::{Mode, Unit};
use switchyard_core::quota::pool::{AllocationInput, PoolInput};
use switchyard_gateway::error::ApiError;
use switchyard_gateway::runtime::quota::views::{DecisionRecord, DimensionUsage, PoolUsage};
use switchyard_gateway::services;
use switchyard_gateway::services::model::{SaveMode, SeriesRow};
use switchyard_gateway::services::quota::PoolView;
use switchyard_gateway::state::AppState;

/// The list's path.
pub const LIST: &str = "/dashboard/costs/quota-share";

/// The pages' routes.
pub fn routes() -> Routes {
    Routes::default()
        .page_and_form(LIST, list_page, create)
        .page("/dashboard/costs/quota-share/{id}", pool_page)
        .form(
            "/dashboard/costs/quota-share/{id}/allocations",
            save_allocations,
        )
        .form("/dashboard/costs/quota-share/{id}/delete", delete)
}

/// The page of pool `id`.
fn pool_path(id: &str) -> String {
    format!("{LIST}/{id}")
}

/// A connection the create form offers.
#[derive(Debug, Clone)]
pub struct Choice {
    pub id: String,
    pub provider: String,
}

/// `GET /dashboard/costs/quota-share`: the concept card, the create form and the pools.
async fn list_page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    show_list(&dash, &session, StatusCode::OK, &CreateForm::blank()).await
}

/// The list page with the create form as `form` says, answered with `status`.
async fn show_list(
    dash: &Dash,
    session: &Session,
    status: StatusCode,
    form: &CreateForm,
) -> Response {
    let title = "Quota share";
    let gathered = async {
        let pools = services::quota::pools(&dash.app).await?;
        let connections = services::config::connections(&dash.app)
            .await?
            .into_iter()
            .map(|c| Choice {
                id: c.id,
                provider: c.provider,
            })
            .collect::<Vec<_>>();
        let keys = key_ids(&dash.app).await?;
        Ok::<_, ApiError>((pools, connections, keys))
    }
    .await;
    match gathered {
        Ok((pools, connections, keys)) => {
            let mut usage = HashMap::new();
            for p in &pools {
                if let Ok(u) = services::quota::usage(&dash.app, p.id.clone()).await {
                    usage.insert(p.id.clone(), u);
                }
            }
            let main = render_list(&pools, &usage, &connections, &keys, form, &session.csrf);
            dash.render(
                session,
                View {
                    status,
                    title,
                    nav: Nav::QuotaShare,
                    main,
                },
            )
        }
        Err(e) => dash.failed(session, title, Nav::QuotaShare, &e),
    }
}

/// The ids of the keys that are not revoked, for the forms' hints.
async fn key_ids(app: &AppState) -> Result<Vec<String>, ApiError> {
    Ok(services::keys::list(app)
        .await?
        .into_iter()
        .filter(|k| k.revoked_at.is_none())
        .map(|k| k.id)
        .collect())
}

/// The create form's values as posted (or blank) and the error placed on it.
#[derive(Debug, Default)]
pub struct CreateForm {
    pub id: String,
    pub name: String,
    pub connections: Vec<String>,
    pub dims: Vec<DimRow>,
    pub allocs: Vec<AllocRow>,
    pub error: Option<Placed>,
}

impl CreateForm {
    /// A new form: one blank dimension row and one blank allocation row.
    pub fn blank() -> Self {
        Self {
            dims: vec![DimRow::default()],
            allocs: vec![AllocRow::default()],
            ..Self::default()
        }
    }

    fn posted(fields: &[(String, String)]) -> Self {
        let one = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map_or("", |(_, v)| v.trim())
                .to_owned()
        };
        Self {
            id: one("id"),
            name: one("name"),
            connections: fields
                .iter()
                .filter(|(k, _)| k == "connection")
                .map(|(_, v)| v.clone())
                .collect(),
            dims: forms::dim_rows(fields),
            allocs: forms::alloc_rows(fields),
            error: None,
        }
    }

    /// The pool the form describes; the rows are only mapped to fields here, the
    /// service judges them.
    fn pool(&self) -> Result<PoolInput, ApiError> {
        Ok(PoolInput {
            id: self.id.clone(),
            name: self.name.clone(),
            connection_ids: self.connections.clone(),
            dimensions: forms::dimensions(&self.dims)?,
            allocations: forms::allocations(&self.allocs)?,
        })
    }
}

/// `POST /dashboard/costs/quota-share`: a row button (`add`, `remove`) shows the form
/// again with one row more or less; otherwise creates the pool. A refused pool shows
/// the form again as posted, with the API's error beside the row it names.
async fn create(
    State(dash): State<Arc<Dash>>,
    Posted(session, fields): Posted<Vec<(String, String)>>,
) -> Response {
    let mut form = CreateForm::posted(&fields);
    if let Some(edit) = forms::edit(&fields) {
        forms::apply(edit, &mut form.dims, &mut form.allocs);
        return show_list(&dash, &session, StatusCode::OK, &form).await;
    }
    let outcome = match form.pool() {
        Ok(p) => services::quota::save_pool(&dash.app, p, SaveMode::Create).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(v) => {
            dash.done(&session, LIST, Ok(v), |v| {
                format!("Pool `{}` created.", v.id)
            })
            .await
        }
        Err(e) => {
            let dims = forms::dim_from(&form.dims);
            let allocs = forms::alloc_from(&form.allocs);
            form.error = Some(forms::place(&e, &dims, &allocs));
            show_list(&dash, &session, e.parts().0, &form).await
        }
    }
}

/// The concept card: what a pool is, in a few plain sentences.
fn concept() -> Markup {
    html! {
        details.card.concept open {
            summary { "What is a quota pool?" }
            p {
                "A " strong { "pool" } " lets several API keys share the quota of one upstream account (one or more of its connections). The pool has "
                strong { "dimensions" } ": a limit of requests, tokens, percent or USD per rolling window (5h, hourly, daily, weekly, monthly). Leave them out and the pool uses the connections' plan."
            }
            p {
                "Each key gets a " strong { "fair share" } " of every limit in proportion to its " strong { "weight" }
                " (a percentage; all weights 0 means an equal split). While the pool is used below the "
                strong { "saturation threshold" } " (a setting, half the limit by default) the pool is " em { "lenient" }
                ": a key may " strong { "borrow" } " the share others leave unused. Past the threshold it is " em { "strict" }
                ": a key over its share is blocked with a 429 if its policy is " strong { "hard" }
                ", only given lower priority if it is " strong { "soft" } ", and let through while any room is left if it is "
                strong { "burst" } "."
            }
            p {
                "A " strong { "cap" } " is an absolute limit for one key that blocks whatever the mode. The pool's own limit is never exceeded."
            }
        }
    }
}

/// The list page's `<main>`: the concept card, the create form and a card per pool
/// (refreshed every 30 s).
pub fn render_list(
    pools: &[PoolView],
    usage: &HashMap<String, PoolUsage>,
    connections: &[Choice],
    keys: &[String],
    form: &CreateForm,
    csrf: &str,
) -> Markup {
    let cards = html! {
        @if pools.is_empty() {
            p { "No pools yet." }
        } @else {
            div.cards { @for p in pools { (pool_card(p, usage.get(&p.id))) } }
        }
    };
    html! {
        (concept())
        section aria-labelledby="pools-h" {
            h2 id="pools-h" { "Pools" }
            (html::live("pools", LIST, 30, cards))
        }
        section aria-labelledby="create-h" {
            h2 id="create-h" { "Create a pool" }
            (create_form(connections, keys, form, csrf))
        }
    }
}

/// A mode as text, styled by its class.
fn mode_badge(mode: Mode) -> Markup {
    let class = match mode {
        Mode::Lenient => "state-normal",
        Mode::Strict => "state-strict",
    };
    html! { span class={ "state " (class) } { (mode.as_str()) } }
}

/// `used of limit unit` (or `limit unknown` for a limit of 0).
fn use_of(d: &DimensionUsage) -> String {
    if d.limit > 0.0 {
        format!(
            "{} of {} {} used",
            charts::number(d.global_used),
            charts::number(d.limit),
            d.unit.as_str()
        )
    } else {
        format!(
            "{} {} used (limit unknown)",
            charts::number(d.global_used),
            d.unit.as_str()
        )
    }
}

/// `, provider reports N %` when the provider's latest reading of the dimension is known
/// (the engine counts the larger of it and the keys' use), or nothing.
fn provider_reading(d: &DimensionUsage) -> String {
    d.provider_signal.map_or_else(String::new, |f| {
        format!(", provider reports {} %", charts::number(f * 100.0))
    })
}

/// One dimension's headline: its key, its use and its mode.
fn dimension_line(d: &DimensionUsage) -> Markup {
    html! { (d.key) ": " (use_of(d)) (provider_reading(d)) ", " (mode_badge(d.mode)) }
}

/// One pool's card.
fn pool_card(p: &PoolView, usage: Option<&PoolUsage>) -> Markup {
    html! {
        article.card.pool-card id={ "pool-" (p.id) } {
            h3 { a href=(pool_path(&p.id)) { (p.name) } }
            p {
                "Id: " code { (p.id) } br;
                "Connections: " (p.connection_ids.join(", ")) br;
                "Allocations: " (p.allocations.len())
            }
            @match usage {
                Some(u) if !u.dimensions.is_empty() => {
                    ul.pool-dims { @for d in &u.dimensions { li { (dimension_line(d)) } } }
                }
                Some(_) => p.hint { "No dimensions: the connections' plan is empty." },
                None => p.hint { "Usage is unavailable right now." },
            }
        }
    }
}

/// The create form, showing `form` back.
fn create_form(connections: &[Choice], keys: &[String], form: &CreateForm, csrf: &str) -> Markup {
    let placed = form.error.as_ref();
    let fields = html! {
        (forms::default_submit("Create pool"))
        @if let Some(p) = placed.filter(|p| p.row.is_none()) {
            p.notice.error role="alert" id="create-error" { "Error: " (p.message) }
        }
        label for="pool-id" { "Id" }
        input id="pool-id" name="id" value=(form.id) required maxlength="64";
        label for="pool-name" { "Name" }
        input id="pool-name" name="name" value=(form.name) required maxlength="128";
        fieldset {
            legend { "Connections (of one provider account)" }
            @for (i, c) in connections.iter().enumerate() {
                div.check {
                    input type="checkbox" id={ "pool-conn-" (i) } name="connection" value=(c.id)
                        checked[form.connections.contains(&c.id)];
                    label for={ "pool-conn-" (i) } { (c.id) " (" (c.provider) ")" }
                }
            }
            @if connections.is_empty() {
                p.hint { "No connections yet: add one first." }
            }
        }
        (forms::dimension_rows(&form.dims, placed))
        p.hint id="pool-dims-hint" {
            "A dimension is a limit per rolling window. A row without a limit is left out; leave them all empty to use the connections' plan."
        }
        (forms::allocation_rows(&form.allocs, keys, placed))
        p.hint id="pool-allocs-hint" {
            "The weight is a percentage of every limit (all 0 = an equal split); the policy says what happens past the share; the optional cap is an absolute limit in one of the pool's units. A row without a key is left out."
        }
    };
    html::form(LIST, csrf, "stack wide", fields, "Create pool")
}

/// What a pool's page shows.
#[derive(Debug)]
pub struct PoolPage {
    pub pool: PoolView,
    /// The usage now, or why it cannot be read.
    pub usage: Result<PoolUsage, String>,
    /// The newest decisions (at most [`DECISIONS_SHOWN`]).
    pub decisions: Vec<DecisionRecord>,
    /// How many decisions the engine keeps for the pool.
    pub decisions_kept: usize,
    /// Per-minute request counts of the last hour (all connections).
    pub series: Vec<SeriesRow>,
    /// The used fraction from which a dimension is strict.
    pub threshold: f64,
    /// The page's time (Unix milliseconds).
    pub now: u64,
    pub keys: Vec<String>,
}

/// `GET /dashboard/costs/quota-share/{id}`: one pool.
async fn pool_page(
    State(dash): State<Arc<Dash>>,
    Signed(session): Signed,
    Path(id): Path<String>,
) -> Response {
    let app = &dash.app;
    let gathered = async {
        let pool = services::quota::pool(app, id.clone()).await?;
        let usage = services::quota::usage(app, id.clone())
            .await
            .map_err(|e| e.to_string());
        let (decisions_kept, decisions) =
            services::quota::newest_decisions(app, id.clone(), DECISIONS_SHOWN)?;
        let series = services::logs::last_hour(app).await?;
        Ok::<_, ApiError>(PoolPage {
            pool,
            usage,
            decisions,
            decisions_kept,
            series,
            threshold: services::quota::saturation_threshold(app),
            now: dash.now(),
            keys: key_ids(app).await?,
        })
    }
    .await;
    match gathered {
        Ok(page) => {
            let title = format!("Pool {}", page.pool.name);
            let main = render_pool(&page, &session.csrf);
            dash.render(&session, View::ok(&title, Nav::QuotaShare, main))
        }
        Err(e) => dash.failed(&session, "Pool", Nav::QuotaShare, &e),
    }
}

/// A duration for people, never shorter than it is: `45 s`, `1 min 59 s`, `3 h 20 min`,
/// `2 d 4 h`. Seconds are rounded up; from an hour on the smaller unit is rounded up
/// (so 1 h and 1 ms reads `1 h 1 min`) and a zero smaller unit is left out.
pub(crate) fn duration(ms: u64) -> String {
    let two = |big: u64, big_name: &str, small: u64, small_name: &str| {
        if small == 0 {
            format!("{big} {big_name}")
        } else {
            format!("{big} {big_name} {small} {small_name}")
        }
    };
    let s = ms.div_ceil(1000);
    let minutes = s.div_ceil(60);
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        two(s / 60, "min", s % 60, "s")
    } else if minutes < 24 * 60 {
        two(minutes / 60, "h", minutes % 60, "min")
    } else {
        let hours = s.div_ceil(3600);
        two(hours / 24, "d", hours % 24, "h")
    }
}

/// One dimension's bar: each key's consumption, the saturation threshold, the global
/// use the mode is judged by (the larger of the keys' use and the provider's reading)
/// and a mark per distinct fair share (naming its keys).
fn dimension_bar(d: &DimensionUsage, threshold: f64) -> Markup {
    let segments: Vec<Segment<'_>> = d
        .keys
        .iter()
        .map(|k| Segment {
            label: &k.api_key_id,
            value: k.consumed,
        })
        .collect();
    let mut shares: BTreeMap<String, (f64, Vec<&str>)> = BTreeMap::new();
    if d.limit > 0.0 {
        for k in d.keys.iter().filter(|k| k.allocated) {
            shares
                .entry(charts::number(k.fair_share))
                .or_insert((k.fair_share, Vec::new()))
                .1
                .push(&k.api_key_id);
        }
    }
    let labels: Vec<(String, f64)> = shares
        .into_values()
        .map(|(v, keys)| (format!("fair share of {}", keys.join(", ")), v))
        .collect();
    let threshold_label = format!(
        "saturation threshold ({} %)",
        charts::number(threshold * 100.0)
    );
    let mut marks: Vec<Mark<'_>> = Vec::new();
    if d.limit > 0.0 {
        marks.push(Mark {
            label: &threshold_label,
            value: d.limit * threshold,
        });
        marks.push(Mark {
            label: "global use",
            value: d.limit * d.used_fraction,
        });
    }
    marks.extend(labels.iter().map(|(label, value)| Mark {
        label,
        value: *value,
    }));
    let max = if d.limit > 0.0 {
        d.limit
    } else {
        d.global_used
    };
    let title = format!(
        "{}: {}{}, {}",
        d.key,
        use_of(d),
        provider_reading(d),
        d.mode.as_str()
    );
    charts::stacked_bar(&title, max, &segments, &marks)
}

/// One dimension's allocation table.
fn allocation_table(d: &DimensionUsage) -> Markup {
    let unit = d.unit.as_str();
    let rows: Vec<Vec<Markup>> = d
        .keys
        .iter()
        .map(|k| {
            let balance = if d.limit <= 0.0 {
                "—".to_owned()
            } else if k.surplus >= 0.0 {
                format!("surplus {}", charts::number(k.surplus))
            } else {
                format!("shortfall {}", charts::number(-k.surplus))
            };
            [
                k.api_key_id.clone(),
                charts::number(k.consumed),
                charts::number(k.fair_share),
                balance,
                if k.borrowing { "yes" } else { "no" }.to_owned(),
                if k.allocated {
                    k.policy.as_str().to_owned()
                } else {
                    format!("{} (no allocation)", k.policy.as_str())
                },
                k.cap.map_or_else(|| "—".to_owned(), charts::number),
                format!(
                    "{} {unit}/min",
                    charts::number(k.burn_rate.tokens_per_second * 60.0)
                ),
                k.burn_rate
                    .time_to_exhaustion_ms
                    .map_or_else(|| "—".to_owned(), duration),
            ]
            .into_iter()
            .map(text)
            .collect()
        })
        .collect();
    table(
        &format!("Allocations on {}", d.key),
        &[
            "Key",
            "Consumed",
            "Fair share",
            "Shortfall / surplus",
            "Borrowing",
            "Policy",
            "Cap",
            "Burn rate",
            "Time to exhaustion",
        ],
        &rows,
        "No key has used this pool yet.",
    )
}

/// The burn-rate chart in tokens (for `Unit::Tokens`) or requests (any other unit; the
/// request log counts neither percent nor USD): one line per key over the pool's
/// connections, a point per minute of the last hour.
fn burn_chart(page: &PoolPage, unit: Unit) -> Markup {
    let tokens = unit == Unit::Tokens;
    let lines = overview::minute_lines(&page.series, page.now, |r| {
        r.connection_id
            .as_ref()
            .is_some_and(|c| page.pool.connection_ids.contains(c))
            .then(|| {
                let value = if tokens {
                    r.prompt_tokens + r.completion_tokens
                } else {
                    r.requests
                };
                (
                    r.key_id.clone().unwrap_or_else(|| "no key".to_owned()),
                    value as f64,
                )
            })
    });
    let series: Vec<Series<'_>> = lines
        .iter()
        .map(|(label, points)| Series { label, points })
        .collect();
    let what = if tokens { "tokens" } else { "requests" };
    if series.is_empty() {
        return html::hint(&format!(
            "No {what} through this pool's connections in the last hour."
        ));
    }
    charts::line_chart(
        &format!("Burn rate: {what} per minute by key"),
        &format!("{what} per minute"),
        "60 min ago",
        "now",
        &series,
    )
}

/// Decisions the pool page shows (the API lists every one the engine keeps).
const DECISIONS_SHOWN: usize = 30;

/// The decisions table: the newest [`DECISIONS_SHOWN`] of the `kept` ones.
fn decisions_table(decisions: &[DecisionRecord], kept: usize) -> Markup {
    let rows: Vec<Vec<Markup>> = decisions
        .iter()
        .take(DECISIONS_SHOWN)
        .map(|d| {
            let outcome = if !d.admitted {
                "blocked"
            } else if d.deprioritized {
                "deprioritized"
            } else {
                "admitted"
            };
            let or_dash = |v: Option<&str>| v.unwrap_or("—").to_owned();
            [
                crate::html::utc(d.at),
                d.api_key_id.clone(),
                outcome.to_owned(),
                or_dash(d.dimension.as_deref()),
                or_dash(d.reason),
                or_dash(d.mode),
                d.policy.to_owned(),
                d.retry_after_ms.map_or_else(|| "—".to_owned(), duration),
            ]
            .into_iter()
            .map(text)
            .collect()
        })
        .collect();
    let shown = decisions.len().min(DECISIONS_SHOWN);
    let caption = if kept > shown {
        format!(
            "Recent decisions, newest first: {shown} of {kept} (all through GET /api/quota/pools/{{id}}/decisions)"
        )
    } else {
        "Recent decisions, newest first".to_owned()
    };
    table(
        &caption,
        &[
            "Time",
            "Key",
            "Outcome",
            "Dimension",
            "Rule",
            "Mode",
            "Policy",
            "Retry after",
        ],
        &rows,
        "No decisions recorded yet.",
    )
}

/// A pool page's `<main>`: the usage (refreshed every 5 s), then the forms.
pub(crate) fn render_pool(page: &PoolPage, csrf: &str) -> Markup {
    let p = &page.pool;
    let path = pool_path(&p.id);
    let usage = html! {
        @match &page.usage {
            Err(e) => (html::error_notice(None, e)),
            Ok(u) if u.dimensions.is_empty() => {
                p.hint { "This pool has no dimensions: it declares none and its connections' plan is empty." }
            }
            Ok(u) => (dimensions_usage(page, u)),
        }
        h3 { "Decisions" }
        (decisions_table(&page.decisions, page.decisions_kept))
    };
    let declared = if p.dimensions.is_empty() {
        "none (the connections' plan applies)".to_owned()
    } else {
        p.dimensions
            .iter()
            .map(|d| format!("{}:{}={}", d.unit, d.window, charts::number(d.limit)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let edit = html::form(
        &format!("{path}/allocations"),
        csrf,
        "stack wide",
        allocations_fields(p, &page.keys),
        "Save allocations",
    );
    let delete = html::confirm_form(
        &format!("{path}/delete"),
        csrf,
        "Delete pool…",
        &format!("Delete pool {} for good", p.id),
    );
    html! {
        p { a href=(LIST) { "All pools" } }
        ul.summary aria-label="Pool" {
            li { "Id: " code { (p.id) } }
            li { "Connections: " (p.connection_ids.join(", ")) }
            li { "Declared dimensions: " (declared) }
            li { "Saturation threshold: " (charts::number(page.threshold * 100.0)) " % of each limit" }
        }
        section aria-labelledby="usage-h" {
            h2 id="usage-h" { "Usage" }
            (html::live("pool-usage", &path, 5, usage))
        }
        section aria-labelledby="edit-h" {
            h2 id="edit-h" { "Edit allocations" }
            p.hint { "Saving replaces every allocation of the pool with these rows. A key whose policy is “not in the pool” has no allocation (the pool treats it as weight 0, hard). Weights are percentages of every limit (all 0 = an equal split); a cap is an absolute limit in one of the pool's units that blocks whatever the mode." }
            (edit)
        }
        section aria-labelledby="delete-h" {
            h2 id="delete-h" { "Delete the pool" }
            p.hint { "Its keys are no longer limited by it, and its counters are dropped." }
            (delete)
        }
    }
}

/// Each dimension's bar and allocation table, then the burn-rate charts.
fn dimensions_usage(page: &PoolPage, u: &PoolUsage) -> Markup {
    let mut units: Vec<Unit> = u
        .dimensions
        .iter()
        .map(|d| {
            if d.unit == Unit::Tokens {
                Unit::Tokens
            } else {
                Unit::Requests
            }
        })
        .collect();
    units.sort();
    units.dedup();
    let mut uncounted: Vec<&str> = u
        .dimensions
        .iter()
        .filter(|d| matches!(d.unit, Unit::Percent | Unit::Usd))
        .map(|d| d.unit.as_str())
        .collect();
    uncounted.dedup();
    html! {
        @for d in &u.dimensions {
            section.dimension aria-label=(d.key) {
                h3 { (dimension_line(d)) }
                (dimension_bar(d, page.threshold))
                (allocation_table(d))
            }
        }
        h3 { "Burn rate" }
        @for unit in units { (burn_chart(page, unit)) }
        @if !uncounted.is_empty() {
            p.hint { "The request log does not count " (uncounted.join(", ")) ": those dimensions are charted in requests." }
        }
    }
}

/// The per-key fields of the allocations form: row `i` posts `key-i`, `weight-i`,
/// `policy-i` (empty = no allocation), `cap-i` and `capunit-i`.
fn allocations_fields(p: &PoolView, keys: &[String]) -> Markup {
    let mut ids: Vec<&str> = p
        .allocations
        .iter()
        .map(|a| a.api_key_id.as_str())
        .collect();
    ids.extend(
        keys.iter()
            .map(String::as_str)
            .filter(|k| !p.allocations.iter().any(|a| a.api_key_id == *k)),
    );
    let mut units: Vec<&str> = p
        .effective_dimensions
        .iter()
        .map(|d| d.unit.as_str())
        .collect();
    units.extend(p.allocations.iter().filter_map(|a| a.cap_unit.as_deref()));
    units.sort_unstable();
    units.dedup();
    let policies = [
        ("", "not in the pool"),
        ("hard", "hard"),
        ("soft", "soft"),
        ("burst", "burst"),
    ];
    html! {
        div.table-wrap {
            table {
                caption { "Allocations" }
                thead {
                    tr {
                        th scope="col" { "Key" }
                        th scope="col" { "Weight (%)" }
                        th scope="col" { "Policy" }
                        th scope="col" { "Cap" }
                        th scope="col" { "Cap unit" }
                    }
                }
                tbody {
                    @for (i, key) in ids.iter().enumerate() {
                        @let a = p.allocations.iter().find(|a| a.api_key_id == *key);
                        @let policy = a.map_or("", |a| a.policy.as_str());
                        @let cap_unit = a.and_then(|a| a.cap_unit.as_deref()).unwrap_or("");
                        tr {
                            th scope="row" {
                                (key)
                                input type="hidden" name={ "key-" (i) } value=(key);
                            }
                            td {
                                input type="number" name={ "weight-" (i) }
                                    value=(a.map_or_else(String::new, |a| charts::number(a.allocation_weight)))
                                    min="0" max="100" step="any" aria-label={ "Weight of " (key) " (%)" };
                            }
                            td {
                                select name={ "policy-" (i) } aria-label={ "Policy of " (key) } {
                                    @for (value, label) in policies {
                                        option value=(value) selected[value == policy] { (label) }
                                    }
                                }
                            }
                            td {
                                input type="number" name={ "cap-" (i) }
                                    value=(a.and_then(|a| a.cap_value).map_or_else(String::new, charts::number))
                                    min="0" step="any" aria-label={ "Cap of " (key) };
                            }
                            td {
                                select name={ "capunit-" (i) } aria-label={ "Cap unit of " (key) } {
                                    option value="" selected[cap_unit.is_empty()] { "no cap" }
                                    @for u in &units { option value=(u) selected[*u == cap_unit] { (u) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The allocations the form's rows describe (see [`allocations_fields`]); rows without
/// a policy are left out.
pub(crate) fn allocations_from_rows(
    fields: &[(String, String)],
) -> Result<Vec<AllocationInput>, ApiError> {
    let get = |name: String| {
        fields
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.trim())
    };
    let number = |key: &str, what: &str, text: &str| {
        text.parse::<f64>().map_err(|_| {
            forms::unreadable(
                "allocations".to_owned(),
                &format!("{what} of `{key}`: `{text}` is not a number"),
            )
        })
    };
    let mut out = Vec::new();
    for i in 0.. {
        let Some(key) = get(format!("key-{i}")) else {
            break;
        };
        let policy = get(format!("policy-{i}")).unwrap_or("");
        if policy.is_empty() {
            continue;
        }
        let weight = get(format!("weight-{i}")).unwrap_or("");
        let cap = get(format!("cap-{i}")).unwrap_or("");
        let cap_unit = get(format!("capunit-{i}")).unwrap_or("");
        out.push(AllocationInput {
            api_key_id: key.to_owned(),
            allocation_weight: if weight.is_empty() {
                0.0
            } else {
                number(key, "weight", weight)?
            },
            cap_value: if cap.is_empty() {
                None
            } else {
                Some(number(key, "cap", cap)?)
            },
            cap_unit: (!cap_unit.is_empty()).then(|| cap_unit.to_owned()),
            policy: policy.to_owned(),
        });
    }
    Ok(out)
}

/// `POST /dashboard/costs/quota-share/{id}/allocations`: replaces the pool's
/// allocations.
async fn save_allocations(
    State(dash): State<Arc<Dash>>,
    Path(id): Path<String>,
    Posted(session, fields): Posted<Vec<(String, String)>>,
) -> Response {
    let outcome = match allocations_from_rows(&fields) {
        Ok(allocations) => {
            services::quota::set_allocations(&dash.app, id.clone(), allocations).await
        }
        Err(e) => Err(e),
    };
    dash.done(&session, &pool_path(&id), outcome, |v| {
        format!(
            "Pool `{}` now has {} allocation(s).",
            v.id,
            v.allocations.len()
        )
    })
    .await
}

/// `POST /dashboard/costs/quota-share/{id}/delete`: deletes the pool.
async fn delete(
    State(dash): State<Arc<Dash>>,
    Path(id): Path<String>,
    Posted(session, Empty {}): Posted<Empty>,
) -> Response {
    let outcome = services::quota::delete_pool(&dash.app, id.clone()).await;
    dash.done(&session, LIST, outcome, |()| {
        format!("Pool `{id}` deleted.")
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overview::MINUTE_MS;
    use switchyard_core::quota::burn::BurnReport;
    use switchyard_core::quota::decide::Policy;
    use switchyard_core::quota::plan::Dimension;
    use switchyard_core::quota::window::Window;
    use switchyard_gateway::runtime::quota::views::KeyUsage;

    #[test]
    fn the_decisions_table_shows_the_newest_thirty() {
        let decision = |n: u64| DecisionRecord {
            at: n * 1000,
            api_key_id: format!("k{n}"),
            admitted: true,
            deprioritized: false,
            dimension: None,
            reason: None,
            mode: None,
            policy: "hard",
            retry_after_ms: None,
        };
        let many: Vec<DecisionRecord> = (0..31).map(decision).collect();
        let html = decisions_table(&many, 31).into_string();
        assert!(html.contains("<caption>Recent decisions, newest first: 30 of 31 (all through GET /api/quota/pools/{id}/decisions)</caption>"), "{html}");
        assert!(html.contains("<td>k29</td>"));
        assert!(!html.contains("<td>k30</td>"));
        let few = decisions_table(&many[..2], 2).into_string();
        assert!(few.contains("<caption>Recent decisions, newest first</caption>"));
        assert_eq!(few.matches("<tr><td>").count(), 2);
    }

    fn alloc(key: &str, weight: f64, policy: &str) -> AllocationInput {
        AllocationInput {
            api_key_id: key.into(),
            allocation_weight: weight,
            cap_value: None,
            cap_unit: None,
            policy: policy.into(),
        }
    }

    #[test]
    fn allocation_rows_skip_keys_without_a_policy() {
        let f = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        let rows = f(&[
            ("csrf", "t"),
            ("key-0", "a"),
            ("weight-0", " 20 "),
            ("policy-0", "soft"),
            ("cap-0", "9"),
            ("capunit-0", "tokens"),
            ("key-1", "b"),
            ("weight-1", "50"),
            ("policy-1", ""),
            ("key-2", "c"),
            ("policy-2", "hard"),
        ]);
        assert_eq!(
            allocations_from_rows(&rows).unwrap(),
            vec![
                AllocationInput {
                    cap_value: Some(9.0),
                    cap_unit: Some("tokens".into()),
                    ..alloc("a", 20.0, "soft")
                },
                alloc("c", 0.0, "hard"),
            ]
        );
    }

    #[test]
    fn durations_read_as_people_say_them_rounded_up() {
        assert_eq!(duration(0), "0 s");
        assert_eq!(duration(1), "1 s");
        assert_eq!(duration(59_000), "59 s");
        assert_eq!(duration(59_999), "1 min");
        assert_eq!(duration(60_000), "1 min");
        assert_eq!(duration(119_000), "1 min 59 s");
        assert_eq!(duration(125_000), "2 min 5 s");
        assert_eq!(duration(3_599_001), "1 h");
        assert_eq!(duration(3_600_001), "1 h 1 min");
        assert_eq!(duration(3_600_000 + 20 * 60_000), "1 h 20 min");
        assert_eq!(duration(86_400_000 - 1), "1 d");
        assert_eq!(duration(2 * 86_400_000 + 4 * 3_600_000), "2 d 4 h");
        assert_eq!(duration(2 * 86_400_000 + 4 * 3_600_000 + 1), "2 d 5 h");
    }

    fn pool(id: &str) -> PoolView {
        PoolView {
            id: id.into(),
            name: format!("Pool <{id}>"),
            connection_ids: vec!["c1".into()],
            dimensions: vec![],
            effective_dimensions: vec![Dimension::new(Unit::Requests, Window::Hourly, 10.0)],
            allocations: vec![alloc("k1", 50.0, "hard"), alloc("k2", 50.0, "soft")],
        }
    }

    fn key(id: &str, consumed: f64, policy: Policy) -> KeyUsage {
        KeyUsage {
            api_key_id: id.into(),
            allocated: true,
            policy,
            allocation_weight: 50.0,
            consumed,
            fair_share: 5.0,
            surplus: 5.0 - consumed,
            borrowing: consumed > 5.0,
            cap: None,
            burn_rate: BurnReport {
                tokens_per_second: 0.1,
                time_to_exhaustion_ms: Some(90_000),
            },
        }
    }

    fn usage(id: &str) -> PoolUsage {
        PoolUsage {
            pool_id: id.into(),
            at: 0,
            dimensions: vec![DimensionUsage {
                key: "requests:hourly".into(),
                unit: Unit::Requests,
                window: "hourly",
                limit: 10.0,
                global_used: 7.0,
                used_fraction: 0.7,
                provider_signal: None,
                mode: Mode::Strict,
                keys: vec![key("k1", 6.0, Policy::Hard), key("k2", 1.0, Policy::Soft)],
            }],
        }
    }

    #[test]
    fn the_list_escapes_names_and_says_each_dimensions_mode() {
        let pools: Vec<PoolView> = (0..100).map(|i| pool(&format!("p{i}"))).collect();
        let usage: HashMap<String, PoolUsage> =
            [("p0".to_owned(), usage("p0"))].into_iter().collect();
        let html = render_list(
            &pools,
            &usage,
            &[Choice {
                id: "c1".into(),
                provider: "openai".into(),
            }],
            &["k1".into()],
            &CreateForm::blank(),
            "tok",
        )
        .into_string();
        assert!(html.contains(r#"<a href="/dashboard/costs/quota-share/p0">Pool &lt;p0&gt;</a>"#));
        assert!(html.contains(r#"<li>requests:hourly: 7 of 10 requests used, <span class="state state-strict">strict</span></li>"#));
        assert!(html.contains(r#"<article class="card pool-card" id="pool-p99">"#));
        assert_eq!(html.matches("Usage is unavailable right now.").count(), 99);
        assert!(html.contains(r#"<input type="hidden" name="csrf" value="tok">"#));
        assert!(!html.contains("style="));
    }

    #[test]
    fn the_pool_page_draws_each_key_and_buckets_the_log_per_minute() {
        let now = 10 * MINUTE_MS + 30_000;
        let row = |bucket: u64, conn: &str, key: &str, requests: u64| SeriesRow {
            bucket_ms: bucket * MINUTE_MS,
            provider: Some("openai".into()),
            connection_id: Some(conn.into()),
            key_id: Some(key.into()),
            requests,
            errors: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
        };
        let page = PoolPage {
            pool: pool("team"),
            usage: Ok(usage("team")),
            decisions: vec![DecisionRecord {
                at: 0,
                api_key_id: "k1".into(),
                admitted: false,
                deprioritized: false,
                dimension: Some("requests:hourly".into()),
                reason: Some("fair_share"),
                mode: Some("strict"),
                policy: "hard",
                retry_after_ms: Some(61_000),
            }],
            decisions_kept: 1,
            series: vec![
                row(10, "c1", "k1", 3),
                row(9, "c1", "k1", 2),
                row(10, "other", "k2", 9),
            ],
            threshold: 0.5,
            now,
            keys: vec!["k1".into(), "k2".into(), "k3".into()],
        };
        let html = render_pool(&page, "tok").into_string();
        assert!(html.contains("<title>requests:hourly: 7 of 10 requests used, strict</title>"));
        assert!(html.contains(r#"<rect class="s0" x="0.0" y="4" width="360.0" height="24"><title>k1: 6</title></rect>"#));
        assert!(html.contains("</svg>saturation threshold (50 %): 5</li>"));
        assert!(html.contains("</svg>global use: 7</li>"));
        assert!(html.contains("</svg>fair share of k1, k2: 5</li>"));
        assert!(html.contains("<tr><td>k1</td><td>6</td><td>5</td><td>shortfall 1</td><td>yes</td><td>hard</td><td>—</td><td>6 requests/min</td><td>1 min 30 s</td></tr>"));
        assert!(html.contains("<td>k1</td><td>blocked</td><td>requests:hourly</td><td>fair_share</td><td>strict</td><td>hard</td><td>1 min 1 s</td></tr>"));
        // k1's line: 0 until the last two minutes (2 then 3); k2 is on another connection.
        assert!(
            html.contains(
                "<desc>requests per minute, from 60 min ago to now. k1: total 5, last 3, peak 3.</desc>"
            ),
            "{html}"
        );
        assert!(!html.contains("</svg>k2</li>"));
        // Every key can be given an allocation, k3 (none yet) included.
        assert!(html.contains(r#"<input type="hidden" name="key-2" value="k3">"#));
        assert!(html.contains(r#"<select name="policy-2" aria-label="Policy of k3"><option value="" selected>not in the pool</option>"#));
        assert!(!html.contains("style="));
    }

    /// Pool `team` with one request counted, strict because the provider reports 70 %.
    fn strict_by_provider() -> PoolUsage {
        let mut u = usage("team");
        let d = &mut u.dimensions[0];
        d.global_used = 1.0;
        d.provider_signal = Some(0.7);
        d.keys = vec![key("k1", 1.0, Policy::Hard)];
        u
    }

    #[test]
    fn a_pool_strict_by_the_providers_reading_says_so_on_the_bar_and_the_card() {
        let cards = render_list(
            &[pool("team")],
            &[("team".to_owned(), strict_by_provider())]
                .into_iter()
                .collect(),
            &[],
            &[],
            &CreateForm::blank(),
            "tok",
        )
        .into_string();
        assert!(cards.contains(r#"<li>requests:hourly: 1 of 10 requests used, provider reports 70 %, <span class="state state-strict">strict</span></li>"#), "{cards}");
        let page = PoolPage {
            pool: pool("team"),
            usage: Ok(strict_by_provider()),
            decisions: vec![],
            decisions_kept: 0,
            series: vec![],
            threshold: 0.5,
            now: 0,
            keys: vec![],
        };
        let html = render_pool(&page, "tok").into_string();
        assert!(html.contains(r#"<h3>requests:hourly: 1 of 10 requests used, provider reports 70 %, <span class="state state-strict">strict</span></h3>"#), "{html}");
        assert!(html.contains(
            "<title>requests:hourly: 1 of 10 requests used, provider reports 70 %, strict</title>"
        ));
        assert!(html.contains("</svg>saturation threshold (50 %): 5</li>"));
        assert!(html.contains("</svg>global use: 7</li>"));
    }
}
