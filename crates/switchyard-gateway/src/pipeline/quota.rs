//! The quota stage (SPEC Q6): the per-attempt reservation that admits a candidate or
//! skips it. (The soft-penalty ordering of Q7 is a fact of the routing view, gathered in
//! the plan stage.)
//!
//! The stage uses only the runtime's quota engine and reads the snapshot, never
//! `AppState`; the admission itself is the engine's decision.

use super::attempt::Ctx;
use crate::heads::LateFields;
use crate::runtime::quota::{Admission, QuotaBlock, QuotaGuard};
use switchyard_core::routing::Candidate;

/// Quota fields for a successful response (none when the candidate is in no pool).
pub type Headers = Option<LateFields>;

/// Why the pool refused a candidate.
#[derive(Debug)]
pub enum Refusal {
    /// The key's share, the pool's limit or its cap.
    Blocked(Box<QuotaBlock>),
    /// The pool meters `usd` and the model has no price; says so.
    Unpriced(String),
}

/// Reserves quota for an attempt on `candidate`. `Ok` carries the reservation (none when
/// the connection is in no pool or the pool does not enforce) and the headers to add to
/// a successful response; `Err` is the pool's refusal, and the caller moves on to the
/// next candidate. `output_limit` is the model's configured output limit, which the
/// request is clamped to.
pub async fn admit(
    ctx: &Ctx<'_>,
    candidate: &Candidate,
    output_limit: Option<u64>,
    request_id: &str,
) -> Result<(Option<QuotaGuard>, Headers), Refusal> {
    let (runtime, snap, key, mut estimate) = (ctx.runtime, ctx.snap, ctx.key, ctx.estimate);
    let conn = &candidate.connection;
    let Some(pool) = snap.quota.pool_of(conn.index) else {
        return Ok((None, None));
    };
    // The request is clamped to the model's output limit: book no more than it allows.
    if let Some(limit) = output_limit {
        estimate.completion_tokens = estimate.completion_tokens.min(limit);
    }
    let price = snap.price(&conn.provider, &candidate.upstream_model);
    match runtime
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
        Admission::Admitted { guard, fields } => {
            Ok((Some(guard), Some(LateFields(Box::new(fields)))))
        }
        Admission::Unenforced(_) => Ok((None, None)),
        Admission::Unpriced => {
            let message = format!(
                "quota pool `{}` meters `usd`, but model `{}/{}` has no price: set its price on provider `{}` (`price`), or use another model",
                pool.pool.id, conn.provider, candidate.upstream_model, conn.provider
            );
            tracing::warn!(request_id, key_id = %key.id, connection_id = %conn.id, %message, "Quota pool refused an unpriced model.");
            Err(Refusal::Unpriced(message))
        }
        Admission::Blocked(block) => {
            tracing::info!(
                request_id,
                key_id = %key.id,
                pool = %block.pool_id,
                connection_id = %conn.id,
                dimension = %block.dimension.key(),
                reason = block.reason().as_str(),
                retry_after_ms = block.retry_after_ms,
                "Quota pool blocked a candidate."
            );
            Err(Refusal::Blocked(Box::new(block)))
        }
    }
}
