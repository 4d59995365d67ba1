//! The overview page's content: requests in flight and open breakers, per-minute charts
//! of the last hour (requests and errors, per provider, per key), providers with their
//! breakers, connections with their cooldowns, quota pools, the keys count and the
//! newest request-log rows. Rendering only; the data comes from the gateway's
//! `services`. The whole content refreshes itself every 30 s.

use crate::charts::{line_chart, Series};
use crate::html::{live, table, text, Nav};
use crate::web::{Dash, Signed, View};
use axum::extract::State;
use axum::response::Response;
use maud::{html, Markup};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services;
use switchyard_gateway::services::logs::LogStats;
use switchyard_gateway::services::model::{KeyRecord, LogRow, ProviderRecord, SeriesRow};
use switchyard_gateway::services::quota::PoolView;
use switchyard_gateway::services::resilience::ConnectionState;
use switchyard_gateway::services::system::{Health, InFlight};
use switchyard_gateway::state::AppState;

/// The series label of requests with no provider (refused before any was tried) or
/// no key.
const NO_LABEL: &str = "none (refused before routing)";

/// Request-log rows the overview shows.
pub const LOG_ROWS: u32 = 20;

/// A chart bucket: one minute.
pub const MINUTE_MS: u64 = 60 * 1000;

/// Minutes the charts show, the newest one (the minute of now) last.
pub const MINUTES: usize = 60;

/// What the overview shows.
#[derive(Debug)]
pub struct Overview {
    pub health: Health,
    /// The request log's size and retention.
    pub log: LogStats,
    pub providers: Vec<ProviderRecord>,
    pub connections: Vec<ConnectionState>,
    pub pools: Vec<PoolView>,
    pub keys: Vec<KeyRecord>,
    pub logs: Vec<LogRow>,
    pub in_flight: InFlight,
    /// Requests of the last hour per minute, provider, connection and key.
    pub series: Vec<SeriesRow>,
    /// When the data was read (Unix milliseconds): the charts end at its minute.
    pub now_ms: u64,
}

/// Requests per minute over [`MINUTES`] minutes, oldest first: in all, errors, and per
/// provider and per key (each sorted by label; rows without one count under [`NO_LABEL`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Minutes {
    pub requests: Vec<f64>,
    pub errors: Vec<f64>,
    pub by_provider: Vec<(String, Vec<f64>)>,
    pub by_key: Vec<(String, Vec<f64>)>,
    /// Errors (status 400 and above) per provider and per key.
    pub errors_by_provider: Vec<(String, Vec<f64>)>,
    pub errors_by_key: Vec<(String, Vec<f64>)>,
}

/// The place of `bucket_ms`'s minute among the [`MINUTES`] minutes ending with the
/// minute of `now_ms` (0 the oldest), or `None` outside them.
pub(crate) fn minute_slot(bucket_ms: u64, now_ms: u64) -> Option<usize> {
    let back = (now_ms / MINUTE_MS).checked_sub(bucket_ms / MINUTE_MS)?;
    usize::try_from(back)
        .ok()
        .and_then(|b| (MINUTES - 1).checked_sub(b))
}

/// Lines of the [`MINUTES`] minutes ending with the minute of `now_ms`, sorted by label:
/// `point` gives each row's label and value (`None` leaves the row out), and the values
/// are summed per label and minute. Rows outside those minutes are left out, and a
/// label only they have gets no line.
pub(crate) fn minute_lines(
    rows: &[SeriesRow],
    now_ms: u64,
    point: impl Fn(&SeriesRow) -> Option<(String, f64)>,
) -> Vec<(String, Vec<f64>)> {
    let mut lines: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in rows {
        let Some(i) = minute_slot(r.bucket_ms, now_ms) else {
            continue;
        };
        let Some((label, value)) = point(r) else {
            continue;
        };
        lines.entry(label).or_insert_with(|| vec![0.0; MINUTES])[i] += value;
    }
    lines.into_iter().collect()
}

/// `rows` (per-minute buckets, as `services::logs::last_hour` gives them) as per-minute
/// vectors of the [`MINUTES`] minutes ending with the minute of `now_ms`; minutes
/// without requests are zeros, rows outside those minutes are left out.
pub fn per_minute(rows: &[SeriesRow], now_ms: u64) -> Minutes {
    let mut requests = vec![0.0; MINUTES];
    let mut errors = vec![0.0; MINUTES];
    for r in rows {
        if let Some(i) = minute_slot(r.bucket_ms, now_ms) {
            requests[i] += r.requests as f64;
            errors[i] += r.errors as f64;
        }
    }
    let label = |v: &Option<String>| v.clone().unwrap_or_else(|| NO_LABEL.to_owned());
    Minutes {
        requests,
        errors,
        by_provider: minute_lines(rows, now_ms, |r| {
            Some((label(&r.provider), r.requests as f64))
        }),
        by_key: minute_lines(rows, now_ms, |r| {
            Some((label(&r.key_id), r.requests as f64))
        }),
        errors_by_provider: minute_lines(rows, now_ms, |r| {
            Some((label(&r.provider), r.errors as f64))
        }),
        errors_by_key: minute_lines(rows, now_ms, |r| Some((label(&r.key_id), r.errors as f64))),
    }
}

/// A per-minute line chart of the last hour with one line per `(label, points)`.
fn minute_chart(title: &str, lines: &[(String, Vec<f64>)]) -> Markup {
    let series: Vec<Series<'_>> = lines
        .iter()
        .map(|(label, points)| Series { label, points })
        .collect();
    line_chart(title, "requests per minute", "60 min ago", "now", &series)
}

/// `GET /dashboard`: the overview.
pub async fn page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    match gather(&dash.app).await {
        Ok(o) => dash.render(
            &session,
            View::ok(
                "Overview",
                Nav::Overview,
                live("overview-live", "/dashboard", 30, render(&o)),
            ),
        ),
        Err(e) => dash.failed(&session, "Overview", Nav::Overview, &e),
    }
}

/// The overview's data, from the services the management API uses.
async fn gather(app: &AppState) -> Result<Overview, ApiError> {
    Ok(Overview {
        health: services::system::health(app).await,
        log: services::logs::stats(app).await?,
        providers: services::config::providers(app).await?,
        connections: services::resilience::cooldowns(app, None),
        pools: services::quota::pools(app).await?,
        keys: services::keys::list(app).await?,
        logs: services::logs::search(
            app,
            services::logs::LogSearch {
                limit: Some(LOG_ROWS),
                ..services::logs::LogSearch::default()
            },
        )
        .await?
        .rows
        .into_iter()
        .map(|(_, row)| row)
        .collect(),
        in_flight: services::system::in_flight(app),
        series: services::logs::last_hour(app).await?,
        now_ms: app.clock.now_ms(),
    })
}

/// A duration in milliseconds as whole seconds, rounded up (`0 s` only for zero).
pub(crate) fn seconds(ms: u64) -> String {
    format!("{} s", ms.div_ceil(1000))
}

/// `value`, or an em dash when absent.
fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("—").to_owned()
}

/// A size in bytes, in the largest binary unit that keeps it at 1 or more.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The quota store line: its driver and state, the Redis breaker and its newest probe.
fn quota_store(h: &Health) -> Markup {
    let q = &h.quota_store_status;
    html! {
        (q.driver) " (" (q.state) ")"
        @if let Some(breaker) = q.breaker { ", breaker " (breaker) }
        @if let Some(p) = q.last_probe {
            ", last probe " (crate::html::utc(p.at_ms)) " " (if p.ok { "answered" } else { "failed" })
        }
    }
}

/// The overview's `<main>` content.
pub fn render(o: &Overview) -> Markup {
    let breakers: HashMap<&str, (&str, u32)> = o
        .health
        .breakers
        .iter()
        .map(|b| (b.provider.as_str(), (b.state, b.failures)))
        .collect();
    let providers: Vec<Vec<Markup>> = o
        .providers
        .iter()
        .map(|p| {
            let (state, failures) = breakers
                .get(p.id.as_str())
                .copied()
                .unwrap_or(("CLOSED", 0));
            vec![
                text(&p.id),
                text(p.format.as_str()),
                text(state),
                text(failures.to_string()),
            ]
        })
        .collect();
    let connections: Vec<Vec<Markup>> = o
        .connections
        .iter()
        .map(|c| {
            vec![
                text(&c.connection_id),
                text(&c.provider),
                text(c.auth_class),
                text(c.state),
                text(if c.remaining_ms == 0 {
                    "—".to_owned()
                } else {
                    seconds(c.remaining_ms)
                }),
                text(c.model_locks.len().to_string()),
                text(or_dash(c.last_error.as_deref())),
            ]
        })
        .collect();
    let pools: Vec<Vec<Markup>> = o
        .pools
        .iter()
        .map(|p| {
            vec![
                text(&p.id),
                text(&p.name),
                text(p.connection_ids.join(", ")),
                text(p.effective_dimensions.len().to_string()),
                text(p.allocations.len().to_string()),
            ]
        })
        .collect();
    let logs: Vec<Vec<Markup>> = o
        .logs
        .iter()
        .map(|r| {
            vec![
                text(crate::html::utc(r.ts)),
                text(&r.request_id),
                text(or_dash(r.key_id.as_deref())),
                text(&r.requested_model),
                text(or_dash(r.provider.as_deref())),
                text(or_dash(r.connection_id.as_deref())),
                text(r.status.to_string()),
                text(r.latency_ms.to_string()),
            ]
        })
        .collect();
    let revoked = o.keys.iter().filter(|k| k.revoked_at.is_some()).count();
    let m = per_minute(&o.series, o.now_ms);
    let totals = [
        ("requests".to_owned(), m.requests),
        ("errors".to_owned(), m.errors),
    ];
    let open = o
        .health
        .breakers
        .iter()
        .filter(|b| b.state == "OPEN")
        .count();
    let log = &o.log;
    html! {
        ul.summary aria-label="Summary" {
            li id="status" { "Status: " (o.health.status) }
            li id="quota-store" { "Quota store: " (quota_store(&o.health)) }
            li id="request-log" {
                "Request log: " (log.size.rows) " of at most " (log.max_rows) " rows, "
                (bytes(log.size.database_bytes)) " on disk, kept " (log.retention_days) " days"
                @if let Some(ts) = log.size.oldest_ts { ", oldest " (crate::html::utc(ts)) }
            }
            li { "In flight: " (o.in_flight.requests) " (" (o.in_flight.queued) " waiting for a slot)" }
            li { "Keys: " (o.keys.len()) " (" (revoked) " revoked)" }
            li { "Open breakers: " (open) }
        }
        @if !o.health.reasons.is_empty() {
            ul id="health-reasons" aria-label="Why the status is not ok" {
                @for reason in &o.health.reasons { li { (reason) } }
            }
        }
        section aria-labelledby="traffic" {
            h2 id="traffic" { "The last hour" }
            div.charts {
                (minute_chart("Requests and errors per minute", &totals))
                (minute_chart("Requests per minute by provider", &m.by_provider))
                (minute_chart("Requests per minute by key", &m.by_key))
                (minute_chart("Errors per minute by provider", &m.errors_by_provider))
                (minute_chart("Errors per minute by key", &m.errors_by_key))
            }
        }
        section aria-labelledby="providers" {
            h2 id="providers" { "Providers" }
            (table(
                "Providers and their circuit breakers",
                &["Provider", "Format", "Breaker", "Failures"],
                &providers,
                "No providers.",
            ))
        }
        section aria-labelledby="connections" {
            h2 id="connections" { "Connections" }
            (table(
                "Connections and their cooldowns",
                &["Connection", "Provider", "Auth", "State", "Cooldown left", "Model locks", "Last error"],
                &connections,
                "No connections.",
            ))
        }
        section aria-labelledby="pools" {
            h2 id="pools" { "Quota pools" }
            (table(
                "Quota pools",
                &["Pool", "Name", "Connections", "Dimensions", "Allocations"],
                &pools,
                "No quota pools.",
            ))
        }
        section aria-labelledby="requests" {
            h2 id="requests" { "Recent requests" }
            (table(
                "The newest requests, newest first",
                &["Time", "Request", "Key", "Model", "Provider", "Connection", "Status", "Latency (ms)"],
                &logs,
                "No requests yet.",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(minute: u64, provider: Option<&str>, key: &str, requests: u64) -> SeriesRow {
        SeriesRow {
            bucket_ms: minute * MINUTE_MS,
            provider: provider.map(str::to_owned),
            connection_id: None,
            key_id: Some(key.to_owned()),
            requests,
            errors: requests / 2,
            prompt_tokens: 0,
            completion_tokens: 0,
        }
    }

    #[test]
    fn minutes_without_requests_are_zeros() {
        // Now is 30 s into minute 100: the charts cover minutes 41 to 100.
        let now = 100 * MINUTE_MS + 30_000;
        let rows = [
            bucket(40, Some("alpha"), "k1", 9),
            bucket(41, Some("alpha"), "k1", 2),
            bucket(41, Some("beta"), "k1", 1),
            bucket(99, None, "ops", 4),
            bucket(100, Some("beta"), "ops", 3),
            bucket(101, Some("beta"), "ops", 5),
        ];
        let m = per_minute(&rows, now);
        let at = |pairs: &[(usize, f64)]| {
            let mut v = vec![0.0; MINUTES];
            for (i, n) in pairs {
                v[*i] = *n;
            }
            v
        };
        assert_eq!(m.requests, at(&[(0, 3.0), (58, 4.0), (59, 3.0)]));
        assert_eq!(m.errors, at(&[(0, 1.0), (58, 2.0), (59, 1.0)]));
        assert_eq!(
            m.by_provider,
            vec![
                ("alpha".to_owned(), at(&[(0, 2.0)])),
                ("beta".to_owned(), at(&[(0, 1.0), (59, 3.0)])),
                (NO_LABEL.to_owned(), at(&[(58, 4.0)])),
            ]
        );
        assert_eq!(
            m.by_key,
            vec![
                ("k1".to_owned(), at(&[(0, 3.0)])),
                ("ops".to_owned(), at(&[(58, 4.0), (59, 3.0)])),
            ]
        );
        assert_eq!(
            m.errors_by_provider,
            vec![
                ("alpha".to_owned(), at(&[(0, 1.0)])),
                ("beta".to_owned(), at(&[(59, 1.0)])),
                (NO_LABEL.to_owned(), at(&[(58, 2.0)])),
            ]
        );
        assert_eq!(
            m.errors_by_key,
            vec![
                ("k1".to_owned(), at(&[(0, 1.0)])),
                ("ops".to_owned(), at(&[(58, 2.0), (59, 1.0)])),
            ]
        );
        let empty = per_minute(&[], now);
        assert_eq!(empty.requests, vec![0.0; MINUTES]);
        assert!(empty.by_provider.is_empty() && empty.by_key.is_empty());
    }

    #[test]
    fn minute_slots_count_back_from_the_minute_of_now() {
        let now = 100 * MINUTE_MS + 30_000;
        assert_eq!(minute_slot(100 * MINUTE_MS + 59_999, now), Some(59));
        assert_eq!(minute_slot(100 * MINUTE_MS, now), Some(59));
        assert_eq!(minute_slot(99 * MINUTE_MS + 1, now), Some(58));
        assert_eq!(minute_slot(41 * MINUTE_MS, now), Some(0));
        assert_eq!(minute_slot(41 * MINUTE_MS - 1, now), None);
        assert_eq!(minute_slot(101 * MINUTE_MS, now), None);
        assert_eq!(minute_slot(0, 30_000), Some(59));
    }

    #[test]
    fn minute_lines_sum_per_label_and_leave_rows_out() {
        let now = 100 * MINUTE_MS + 30_000;
        let rows = [
            bucket(100, Some("alpha"), "k1", 2),
            bucket(100, Some("alpha"), "k1", 3),
            bucket(60, Some("beta"), "k1", 7),
            bucket(99, Some("alpha"), "k2", 4),
            bucket(40, Some("alpha"), "old", 1),
        ];
        let lines = minute_lines(&rows, now, |r| {
            (r.provider.as_deref() == Some("alpha")).then(|| {
                (
                    r.key_id.clone().unwrap_or_default(),
                    r.requests as f64 * 10.0,
                )
            })
        });
        let mut k1 = vec![0.0; MINUTES];
        k1[59] = 50.0;
        let mut k2 = vec![0.0; MINUTES];
        k2[58] = 40.0;
        assert_eq!(lines, vec![("k1".to_owned(), k1), ("k2".to_owned(), k2)]);
    }

    #[test]
    fn byte_sizes_read_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 * 1024 * 1024), "5.0 MiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(seconds(0), "0 s");
        assert_eq!(seconds(1), "1 s");
        assert_eq!(seconds(1000), "1 s");
        assert_eq!(seconds(1001), "2 s");
    }
}
