//! The overview page's content: providers with their breakers, connections with their
//! cooldowns, quota pools, the keys count and the newest request-log rows. Rendering
//! only; the data comes from the gateway's `services`.

use crate::html::{escape, table, Nav};
use crate::web::{Dash, Signed, View};
use axum::extract::State;
use axum::response::Response;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use switchyard_gateway::error::ApiError;
use switchyard_gateway::services;
use switchyard_gateway::services::quota::PoolView;
use switchyard_gateway::services::resilience::ConnectionState;
use switchyard_gateway::services::system::Health;
use switchyard_gateway::state::AppState;
use switchyard_store::{KeyRecord, LogRow, ProviderRecord};

/// Request-log rows the overview shows.
pub const LOG_ROWS: u32 = 20;

/// What the overview shows.
#[derive(Debug)]
pub struct Overview {
    pub health: Health,
    pub providers: Vec<ProviderRecord>,
    pub connections: Vec<ConnectionState>,
    pub pools: Vec<PoolView>,
    pub keys: Vec<KeyRecord>,
    pub logs: Vec<LogRow>,
}

/// `GET /dashboard`: the overview.
pub async fn page(State(dash): State<Arc<Dash>>, Signed(session): Signed) -> Response {
    match gather(&dash.app).await {
        Ok(o) => dash.render(&session, View::ok("Overview", Nav::Overview, &render(&o))),
        Err(e) => dash.failed(&session, "Overview", Nav::Overview, &e),
    }
}

/// The overview's data, from the services the management API uses.
async fn gather(app: &AppState) -> Result<Overview, ApiError> {
    Ok(Overview {
        health: services::system::health(app),
        providers: services::config::providers(app).await?,
        connections: services::resilience::cooldowns(app, None),
        pools: services::quota::pools(app).await?,
        keys: services::keys::list(app).await?,
        logs: services::logs::recent(
            app,
            services::logs::LogFilter {
                limit: Some(LOG_ROWS),
                key_id: None,
            },
        )
        .await?,
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

/// The overview's `<main>` content.
pub fn render(o: &Overview) -> String {
    let breakers: HashMap<&str, (&str, u32)> = o
        .health
        .breakers
        .iter()
        .map(|b| (b.provider.as_str(), (b.state, b.failures)))
        .collect();
    let providers: Vec<Vec<String>> = o
        .providers
        .iter()
        .map(|p| {
            let (state, failures) = breakers
                .get(p.id.as_str())
                .copied()
                .unwrap_or(("CLOSED", 0));
            vec![
                p.id.clone(),
                p.format.as_str().to_owned(),
                state.to_owned(),
                failures.to_string(),
            ]
        })
        .collect();
    let connections: Vec<Vec<String>> = o
        .connections
        .iter()
        .map(|c| {
            vec![
                c.connection_id.clone(),
                c.provider.clone(),
                c.auth_class.to_owned(),
                c.state.to_owned(),
                if c.remaining_ms == 0 {
                    "—".to_owned()
                } else {
                    seconds(c.remaining_ms)
                },
                c.model_locks.len().to_string(),
                or_dash(c.last_error.as_deref()),
            ]
        })
        .collect();
    let pools: Vec<Vec<String>> = o
        .pools
        .iter()
        .map(|p| {
            vec![
                p.id.clone(),
                p.name.clone(),
                p.connection_ids.join(", "),
                p.effective_dimensions.len().to_string(),
                p.allocations.len().to_string(),
            ]
        })
        .collect();
    let logs: Vec<Vec<String>> = o
        .logs
        .iter()
        .map(|r| {
            vec![
                httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(r.ts)),
                r.request_id.clone(),
                or_dash(r.key_id.as_deref()),
                r.requested_model.clone(),
                or_dash(r.provider.as_deref()),
                or_dash(r.connection_id.as_deref()),
                r.status.to_string(),
                r.latency_ms.to_string(),
            ]
        })
        .collect();
    let revoked = o.keys.iter().filter(|k| k.revoked_at.is_some()).count();
    format!(
        r#"<ul class="summary" aria-label="Summary">
<li>Status: {status}</li>
<li>Keys: {keys} ({revoked} revoked)</li>
<li>Open breakers: {open}</li>
</ul>
<section aria-labelledby="providers"><h2 id="providers">Providers</h2>
{providers}</section>
<section aria-labelledby="connections"><h2 id="connections">Connections</h2>
{connections}</section>
<section aria-labelledby="pools"><h2 id="pools">Quota pools</h2>
{pools}</section>
<section aria-labelledby="requests"><h2 id="requests">Recent requests</h2>
{logs}</section>"#,
        status = escape(o.health.status),
        keys = o.keys.len(),
        open = o
            .health
            .breakers
            .iter()
            .filter(|b| b.state == "OPEN")
            .count(),
        providers = table(
            "Providers and their circuit breakers",
            &["Provider", "Format", "Breaker", "Failures"],
            &providers,
            "No providers."
        ),
        connections = table(
            "Connections and their cooldowns",
            &[
                "Connection",
                "Provider",
                "Auth",
                "State",
                "Cooldown left",
                "Model locks",
                "Last error"
            ],
            &connections,
            "No connections."
        ),
        pools = table(
            "Quota pools",
            &["Pool", "Name", "Connections", "Dimensions", "Allocations"],
            &pools,
            "No quota pools."
        ),
        logs = table(
            "The newest requests, newest first",
            &[
                "Time",
                "Request",
                "Key",
                "Model",
                "Provider",
                "Connection",
                "Status",
                "Latency (ms)"
            ],
            &logs,
            "No requests yet."
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up() {
        assert_eq!(seconds(0), "0 s");
        assert_eq!(seconds(1), "1 s");
        assert_eq!(seconds(1000), "1 s");
        assert_eq!(seconds(1001), "2 s");
    }
}
