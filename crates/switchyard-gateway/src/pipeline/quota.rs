//! The quota stage (SPEC Q6, Q7): soft-penalty ordering before the attempts, and the
//! per-attempt reservation that admits a candidate or skips it.

use crate::quota::{Admission, QuotaBlock};
use crate::snapshot::Snapshot;
use crate::state::AppState;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use std::sync::Arc;
use switchyard_core::catalog::ApiKey;
use switchyard_core::quota::cost::Estimate;
use switchyard_core::routing::Candidate;

use super::finish::Finisher;

/// Moves candidates on which the key is over a soft share behind the others: their score
/// is multiplied by the soft-deprioritize factor after every other factor (SPEC Q7).
/// Under the priority strategy every candidate scores 1, so penalized ones go last and
/// keep their relative order. With one candidate there is nothing to reorder.
pub async fn order(
    state: &AppState,
    snap: &Snapshot,
    key_id: &str,
    estimate: &Estimate,
    candidates: &mut [Candidate],
) {
    if snap.quota.is_empty() || candidates.len() < 2 {
        return;
    }
    let factor = snap.settings.quota.soft_deprioritize_factor;
    let mut scored: Vec<(f64, usize)> = Vec::with_capacity(candidates.len());
    for (i, c) in candidates.iter().enumerate() {
        let penalized = match snap.quota.pool_of(c.connection.index) {
            Some(pool) => {
                let price = snap.price(&c.connection.provider, &c.upstream_model);
                state
                    .quota
                    .is_deprioritized(pool, key_id, estimate, price, &snap.settings.quota)
                    .await
            }
            None => false,
        };
        scored.push((if penalized { factor } else { 1.0 }, i));
    }
    if scored.iter().all(|(s, _)| *s == 1.0) {
        return;
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let reordered: Vec<Candidate> = scored.iter().map(|(_, i)| candidates[*i].clone()).collect();
    candidates.clone_from_slice(&reordered);
}

/// Reserves quota for an attempt on `conn`. `Ok` carries the headers to add to a
/// successful response (empty when the connection is in no pool); `Err` is the pool's
/// refusal, and the caller moves on to the next candidate.
pub async fn admit(
    state: &Arc<AppState>,
    snap: &Snapshot,
    key: &ApiKey,
    candidate: &Candidate,
    estimate: Estimate,
    finisher: &mut Finisher,
) -> Result<Vec<(HeaderName, HeaderValue)>, Box<QuotaBlock>> {
    let conn = &candidate.connection;
    let Some(pool) = snap.quota.pool_of(conn.index) else {
        return Ok(Vec::new());
    };
    let price = snap.price(&conn.provider, &candidate.upstream_model);
    match state
        .quota
        .reserve(
            pool,
            &conn.id,
            &key.id,
            (estimate, price),
            &snap.settings.quota,
        )
        .await
    {
        Admission::Admitted { guard, headers } => {
            finisher.set_quota(guard);
            Ok(headers)
        }
        Admission::Unenforced(_) => Ok(Vec::new()),
        Admission::Blocked(block) => {
            tracing::info!(
                request_id = finisher.request_id(),
                key_id = %key.id,
                pool = %block.pool_id,
                connection_id = %conn.id,
                dimension = %block.dimension.key(),
                reason = block.reason().as_str(),
                retry_after_ms = block.retry_after_ms,
                "Quota pool blocked a candidate."
            );
            Err(Box::new(block))
        }
    }
}

/// Adds the quota headers of the admitted attempt to the response.
pub fn add_headers(response: &mut Response, headers: Vec<(HeaderName, HeaderValue)>) {
    let h = response.headers_mut();
    for (name, value) in headers {
        h.insert(name, value);
    }
}

/// Of several refusals, the one that clears soonest (the client's best `Retry-After`).
pub fn most_hopeful(blocked: Vec<QuotaBlock>) -> Option<Box<QuotaBlock>> {
    blocked
        .into_iter()
        .min_by_key(|b| b.retry_after_ms.unwrap_or(u64::MAX))
        .map(Box::new)
}
