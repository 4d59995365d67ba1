//! The request log page, `/dashboard/requests`: a `GET` filter form (key, provider,
//! model, status, time window), the matching rows newest first, and paging by cursor.
//!
//! The filters travel in the query string, so a filtered page can be bookmarked:
//! `key` and `provider` (ids; empty for any), `model` (requested or resolved), `status`
//! (`429`, `4xx`, `errors`: as [`services::logs::parse_status`] reads it), `last` (the
//! time window ending now: `15m`, `1h`, `24h`, or empty for all time), `limit` (rows
//! per page, 1 to [`MAX_PAGE`], default [`DEFAULT_PAGE`]) and `before` (the cursor of
//! an older page, set by the "Older" link). A bad filter shows the search's message
//! with its status and no rows. The first page refreshes itself every 30 s; older
//! pages stay put.

use crate::html::{error_notice, live, Nav};
use crate::web::{Dash, Routes, Signed, View};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::sync::Arc;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services;
use switchyard_gateway::services::logs::{LogPage, LogSearch};
use switchyard_gateway::services::model::{FailedAttempt, LogRow, RouteTrace};
use switchyard_gateway::state::AppState;

/// The page's path.
pub const PATH: &str = "/dashboard/requests";

/// Rows per page unless `limit` says otherwise.
pub const DEFAULT_PAGE: u32 = 50;

/// Most rows one page shows.
pub const MAX_PAGE: u32 = 200;

/// The time windows the form offers: the `last` value, its label and its length.
const WINDOWS: [(&str, &str, u64); 3] = [
    ("15m", "last 15 min", 15 * 60 * 1000),
    ("1h", "last 1 h", 60 * 60 * 1000),
    ("24h", "last 24 h", 24 * 60 * 60 * 1000),
];

/// The page's routes.
pub fn routes() -> Routes {
    Routes::default().page(PATH, page)
}

/// The filters as the query string carries them (and the form shows them back).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filters {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub limit: String,
    /// The page's cursor; never carried into the links the page builds.
    #[serde(default, skip_serializing)]
    pub before: String,
}

/// An invalid query parameter of this page, with the message people read.
fn invalid(field: &str, message: String) -> ApiError {
    ApiError::InvalidField {
        field: field.to_owned(),
        message,
    }
}

/// `text` trimmed, or `None` when that leaves nothing.
fn present(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

impl Filters {
    /// The filters of a query string; a query that cannot be read (a field given
    /// twice) is refused with the reason.
    pub fn parse(query: &str) -> Result<Self, ApiError> {
        serde_urlencoded::from_str(query)
            .map_err(|e| invalid("query", format!("the filters could not be read: {e}")))
    }

    /// The search these filters ask for, with time windows ending at `now_ms`.
    pub fn search(&self, now_ms: u64) -> Result<LogSearch, ApiError> {
        let since_ms = match self.last.trim() {
            "" | "all" => None,
            w => match WINDOWS.iter().find(|(value, _, _)| *value == w) {
                Some((_, _, len)) => Some(now_ms.saturating_sub(*len)),
                None => {
                    return Err(invalid(
                        "last",
                        format!("last: `{w}` is not one of 15m, 1h, 24h or all"),
                    ))
                }
            },
        };
        let before = present(&self.before)
            .map(|b| {
                b.parse::<i64>()
                    .map_err(|_| invalid("before", format!("before: `{b}` is not a page cursor")))
            })
            .transpose()?;
        let limit = match present(&self.limit) {
            None => DEFAULT_PAGE,
            Some(l) => match l.parse::<u32>() {
                Ok(n @ 1..=MAX_PAGE) => n,
                _ => {
                    return Err(invalid(
                        "limit",
                        format!("limit: `{l}` is not a number of rows from 1 to {MAX_PAGE}"),
                    ))
                }
            },
        };
        Ok(LogSearch {
            key_id: present(&self.key),
            provider: present(&self.provider),
            model: present(&self.model),
            status: present(&self.status),
            since_ms,
            until_ms: None,
            before,
            limit: Some(limit),
        })
    }

    /// This page's URL with these filters and `before` as the cursor.
    fn url(&self, before: Option<i64>) -> String {
        let mut query = serde_urlencoded::to_string(self).unwrap_or_default();
        if let Some(b) = before {
            if !query.is_empty() {
                query.push('&');
            }
            let _ = write!(query, "before={b}");
        }
        if query.is_empty() {
            PATH.to_owned()
        } else {
            format!("{PATH}?{query}")
        }
    }
}

/// What the filter form offers: the keys (id, name) and the provider ids.
#[derive(Debug, Default)]
pub struct Choices {
    pub keys: Vec<(String, String)>,
    pub providers: Vec<String>,
}

/// `GET /dashboard/requests`.
async fn page(
    State(dash): State<Arc<Dash>>,
    Signed(session): Signed,
    RawQuery(query): RawQuery,
) -> Response {
    let choices = match choices(&dash.app).await {
        Ok(c) => c,
        Err(e) => return dash.failed(&session, "Requests", Nav::Requests, &e),
    };
    let (filters, found) = match Filters::parse(query.as_deref().unwrap_or_default()) {
        Ok(f) => {
            let found = match f.search(dash.now()) {
                Ok(search) => services::logs::search(&dash.app, search).await,
                Err(e) => Err(e),
            };
            (f, found)
        }
        Err(e) => (Filters::default(), Err(e)),
    };
    let (status, outcome) = match &found {
        Ok(p) => (StatusCode::OK, Ok(p)),
        Err(e) => (e.parts().0, Err(e.to_string())),
    };
    let main = render(&filters, &choices, outcome);
    dash.render(
        &session,
        View {
            status,
            title: "Requests",
            nav: Nav::Requests,
            main,
        },
    )
}

/// The form's choices, from the services the management API uses.
async fn choices(app: &AppState) -> Result<Choices, ApiError> {
    Ok(Choices {
        keys: services::keys::list(app)
            .await?
            .into_iter()
            .map(|k| (k.id, k.name))
            .collect(),
        providers: services::config::providers(app)
            .await?
            .into_iter()
            .map(|p| p.id)
            .collect(),
    })
}

/// An `<option>`, selected when `value` is `current`.
fn option(value: &str, label: &str, current: &str) -> Markup {
    html! {
        option value=(value) selected[value == current.trim()] { (label) }
    }
}

/// The filter form, showing `f` back.
fn filter_form(f: &Filters, choices: &Choices) -> Markup {
    html! {
        form method="get" action=(PATH) class="row" aria-label="Filters" {
            label for="f-key" {
                "Key"
                select id="f-key" name="key" {
                    (option("", "any", &f.key))
                    @for (id, name) in &choices.keys {
                        (option(id, &format!("{id} ({name})"), &f.key))
                    }
                }
            }
            label for="f-provider" {
                "Provider"
                select id="f-provider" name="provider" {
                    (option("", "any", &f.provider))
                    @for id in &choices.providers { (option(id, id, &f.provider)) }
                }
            }
            label for="f-model" {
                "Model"
                input type="text" id="f-model" name="model" value=(f.model);
            }
            label for="f-status" {
                "Status"
                input type="text" id="f-status" name="status" value=(f.status) aria-describedby="f-status-hint";
            }
            label for="f-last" {
                "Time"
                select id="f-last" name="last" {
                    @for (value, label, _) in WINDOWS { (option(value, label, &f.last)) }
                    (option("", "all time", &f.last))
                }
            }
            @if let Some(l) = present(&f.limit) {
                input type="hidden" name="limit" value=(l);
            }
            button type="submit" { "Filter" }
        }
        p.hint id="f-status-hint" {
            "Status: an exact status such as " code { "429" } ", a class such as " code { "4xx" }
            ", or " code { "errors" } " (every status from 400). Model matches the requested or the resolved model."
        }
    }
}

/// `value`, or an em dash when absent.
fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| v.to_string())
}

/// Column headers of the results table.
const HEADERS: [&str; 15] = [
    "Time (UTC)",
    "Request",
    "Key",
    "Client",
    "Requested model",
    "Provider",
    "Connection",
    "Model",
    "Status",
    "Error",
    "Attempts",
    "Route",
    "Latency (ms)",
    "TTFB (ms)",
    "Tokens (in / out)",
];

/// One results row; errors' statuses carry the `status-error` class.
fn row_html(r: &LogRow) -> Markup {
    let tokens = if r.prompt_tokens.is_none() && r.completion_tokens.is_none() {
        "—".to_owned()
    } else {
        format!(
            "{} / {}",
            or_dash(r.prompt_tokens),
            or_dash(r.completion_tokens)
        )
    };
    let before = [
        crate::html::utc(r.ts),
        r.request_id.clone(),
        or_dash(r.key_id.as_deref()),
        r.client_format.clone(),
        r.requested_model.clone(),
        or_dash(r.provider.as_deref()),
        or_dash(r.connection_id.as_deref()),
        or_dash(r.model.as_deref()),
    ];
    let after = [r.latency_ms.to_string(), or_dash(r.ttfb_ms), tokens];
    html! {
        tr {
            @for c in &before { td { (c) } }
            td class=[(r.status >= 400).then_some("status-error")] { (r.status) }
            td { (or_dash(r.error_code.as_deref())) }
            td {
                (r.attempts)
                // Why each attempt that did not answer ended.
                @for f in &r.failed_attempts {
                    br;
                    small.failed-attempt { (failed_attempt(f)) }
                }
            }
            td { (route_cell(r.route.as_ref())) }
            @for c in &after { td { (c) } }
        }
    }
}

/// The routing decision (SPEC R19's trace): the strategy, folded over the facts it
/// read and the order it produced, each candidate with the values it saw.
fn route_cell(route: Option<&RouteTrace>) -> Markup {
    let Some(t) = route else {
        return html! { "—" };
    };
    let read = if t.facts.is_empty() {
        "no facts read".to_owned()
    } else {
        format!("read {}", t.facts.join(", "))
    };
    let mut extra = Vec::new();
    if let Some(d) = t.draw {
        extra.push(format!("draw {d}"));
    }
    if let Some(n) = t.turn {
        extra.push(format!("turn {n}"));
    }
    if let Some(f) = &t.first {
        extra.push(format!("{f} first"));
    }
    html! {
        details.route {
            summary { (t.strategy) }
            small { (read) @for e in &extra { "; " (e) } }
            ol {
                @for step in &t.order {
                    li {
                        (step.provider) "/" (step.model) " @ " (step.connection_id)
                        @if !step.facts.is_empty() {
                            br;
                            small { (step_facts(&step.facts)) }
                        }
                    }
                }
            }
        }
    }
}

/// A candidate's facts as `name value` pairs; unknown values as `unknown`.
fn step_facts(facts: &serde_json::Map<String, serde_json::Value>) -> String {
    facts
        .iter()
        .map(|(name, value)| match value {
            serde_json::Value::Null => format!("{name} unknown"),
            v => format!("{name} {v}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One attempt that did not answer, as the attempts cell lists it: the connection, what
/// ended it, and the verdict — its cause, a restatement, the rule and scope that applied,
/// and the egress address (SPEC R13, R14).
fn failed_attempt(f: &FailedAttempt) -> String {
    let mut line = format!("{}: {}", f.connection_id, f.outcome);
    if let Some(status) = f.upstream_status {
        line.push_str(&format!(" (HTTP {status}"));
        if let Some(restated) = f.restated_status {
            line.push_str(&format!(" read as {restated}"));
        }
        line.push(')');
    }
    // The cause, when it says more than the outcome.
    if let Some(cause) = f.cause.as_ref().filter(|c| **c != f.outcome) {
        line.push_str(&format!(", {cause}"));
    }
    if let Some(rule) = &f.rule {
        line.push_str(&format!(", rule {rule}"));
    }
    if let Some(scope) = &f.scope {
        line.push_str(&format!(" ({scope})"));
    }
    if let Some(egress) = &f.egress_ip {
        line.push_str(&format!(", via {egress}"));
    }
    if f.committed {
        line.push_str(", after the stream reached the client");
    }
    line
}

/// The results table and the paging links.
fn results(f: &Filters, page: &LogPage) -> Markup {
    let newest = present(&f.before).map(|_| f.url(None));
    let older = page.next.map(|n| f.url(Some(n)));
    html! {
        div.table-wrap {
            table {
                caption { "Matching requests, newest first" }
                thead { tr { @for h in HEADERS { th scope="col" { (h) } } } }
                tbody {
                    @if page.rows.is_empty() {
                        tr { td colspan=(HEADERS.len()) { "No requests match these filters." } }
                    }
                    @for (_, r) in &page.rows { (row_html(r)) }
                }
            }
        }
        @if newest.is_some() || older.is_some() {
            nav.pager aria-label="Pages" {
                @if let Some(href) = &newest { a href=(href) id="page-newest" { "Newest" } }
                @if let Some(href) = &older { a href=(href) id="page-older" rel="next" { "Older" } }
            }
        }
    }
}

/// The page's `<main>` content: the form with `f`, then the rows of `outcome` or the
/// search's error message. The first page (no cursor) refreshes itself.
pub fn render(f: &Filters, choices: &Choices, outcome: Result<&LogPage, String>) -> Markup {
    html! {
        (filter_form(f, choices))
        @match outcome {
            Err(message) => (error_notice(Some("filter-error"), &message)),
            Ok(page) => {
                @if present(&f.before).is_some() {
                    (results(f, page))
                } @else {
                    (live("requests-live", &f.url(None), 30, results(f, page)))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_gateway::services::model::RouteStep;

    fn row(status: u16) -> LogRow {
        LogRow {
            ts: 1_764_606_653_000,
            request_id: "req<1>".into(),
            key_id: Some("k1".into()),
            requested_model: "fast".into(),
            provider: Some("alpha".into()),
            connection_id: Some("alpha-1".into()),
            model: Some("mock-small".into()),
            status,
            error_code: (status >= 400).then(|| "rate_limited".into()),
            stream: false,
            client_format: "openai".into(),
            attempts: 1,
            latency_ms: 12,
            ttfb_ms: None,
            prompt_tokens: Some(7),
            completion_tokens: Some(5),
            egress_ip: None,
            failed_attempts: Vec::new(),
            route: None,
        }
    }

    #[test]
    fn filters_become_a_search() {
        let f = Filters::parse("key=k1&provider=&model=+fast+&status=4xx&last=1h&limit=2").unwrap();
        let s = f.search(10_000_000).unwrap();
        assert_eq!(s.key_id.as_deref(), Some("k1"));
        assert_eq!(s.provider, None);
        assert_eq!(s.model.as_deref(), Some("fast"));
        assert_eq!(s.status.as_deref(), Some("4xx"));
        assert_eq!(s.since_ms, Some(10_000_000 - 3_600_000));
        assert_eq!(s.limit, Some(2));
        assert_eq!(s.before, None);
        let all = Filters::parse("last=all&before=17")
            .unwrap()
            .search(5)
            .unwrap();
        assert_eq!(
            (all.since_ms, all.before, all.limit),
            (None, Some(17), Some(50))
        );
        for (query, message) in [
            ("last=2h", "last: `2h` is not one of 15m, 1h, 24h or all"),
            ("before=x", "before: `x` is not a page cursor"),
            (
                "limit=0",
                "limit: `0` is not a number of rows from 1 to 200",
            ),
            (
                "limit=201",
                "limit: `201` is not a number of rows from 1 to 200",
            ),
        ] {
            let e = Filters::parse(query).unwrap().search(5).unwrap_err();
            assert_eq!(e.to_string(), message, "{query}");
        }
        assert!(Filters::parse("key=a&key=b").is_err());
    }

    #[test]
    fn links_carry_the_filters_but_not_the_cursor() {
        let f = Filters::parse("key=k%261&status=errors&before=9").unwrap();
        assert_eq!(f.url(None), "/dashboard/requests?key=k%261&status=errors");
        assert_eq!(
            f.url(Some(4)),
            "/dashboard/requests?key=k%261&status=errors&before=4"
        );
        assert_eq!(
            Filters::default().url(Some(3)),
            "/dashboard/requests?before=3"
        );
        assert_eq!(Filters::default().url(None), "/dashboard/requests");
    }

    #[test]
    fn a_route_shows_its_strategy_facts_and_order() {
        let mut facts = serde_json::Map::new();
        facts.insert("success".into(), serde_json::json!(0.7));
        facts.insert("header_ms".into(), serde_json::Value::Null);
        let step = |conn: &str, facts| RouteStep {
            provider: "alpha".into(),
            model: "mock<small>".into(),
            connection_id: conn.into(),
            facts,
        };
        let trace = RouteTrace {
            strategy: "p2c".into(),
            facts: vec!["draw".into(), "stats".into()],
            draw: Some(9),
            turn: None,
            order: vec![
                step("alpha-1", facts),
                step("alpha-2", serde_json::Map::new()),
            ],
            first: Some("session-pin".into()),
        };
        assert_eq!(
            route_cell(Some(&trace)).into_string(),
            "<details class=\"route\"><summary>p2c</summary><small>read draw, stats; draw 9; session-pin first</small><ol><li>alpha/mock&lt;small&gt; @ alpha-1<br><small>success 0.7, header_ms unknown</small></li><li>alpha/mock&lt;small&gt; @ alpha-2</li></ol></details>"
        );
        let plain = RouteTrace {
            strategy: "priority".into(),
            ..RouteTrace::default()
        };
        assert!(route_cell(Some(&plain))
            .into_string()
            .contains("<summary>priority</summary><small>no facts read</small><ol></ol>"));
        assert_eq!(route_cell(None).into_string(), "—");
    }

    #[test]
    fn rows_render_escaped_with_errors_marked() {
        let page = LogPage {
            rows: vec![(2, row(429)), (1, row(200))],
            next: Some(1),
        };
        let choices = Choices {
            keys: vec![("k1".into(), "tester".into())],
            providers: vec!["alpha".into()],
        };
        let f = Filters::parse("key=k1").unwrap();
        let html = render(&f, &choices, Ok(&page)).into_string();
        assert!(html.contains(
            "<tr><td>2025-12-01 16:30:53</td><td>req&lt;1&gt;</td><td>k1</td><td>openai</td><td>fast</td><td>alpha</td><td>alpha-1</td><td>mock-small</td><td class=\"status-error\">429</td><td>rate_limited</td><td>1</td><td>—</td><td>12</td><td>—</td><td>7 / 5</td></tr>"
        ), "{html}");
        assert!(html.contains("<td>200</td><td>—</td>"));
        assert!(html.contains(r#"<option value="k1" selected>k1 (tester)</option>"#));
        assert!(html.contains(
            r#"<option value="" selected>any</option><option value="alpha">alpha</option>"#
        ));
        assert!(html.contains(r#"<nav class="pager" aria-label="Pages"><a href="/dashboard/requests?key=k1&amp;before=1" id="page-older" rel="next">Older</a></nav>"#));
        assert!(html.contains(r##"hx-get="/dashboard/requests?key=k1" hx-trigger="every 30s""##));
        let older = Filters::parse("key=k1&before=1").unwrap();
        let last = LogPage {
            rows: vec![],
            next: None,
        };
        let html = render(&older, &choices, Ok(&last)).into_string();
        assert!(html.contains(r#"<td colspan="15">No requests match these filters.</td>"#));
        assert!(html.contains(r#"<nav class="pager" aria-label="Pages"><a href="/dashboard/requests?key=k1" id="page-newest">Newest</a></nav>"#));
        assert!(!html.contains("hx-get"));
        let bad = render(&f, &choices, Err("status: `6xx` is bad".into())).into_string();
        assert!(bad.contains(r#"<p class="notice error" role="alert" id="filter-error">Error: status: `6xx` is bad</p>"#));
        assert!(!bad.contains("<table"));
    }
}
