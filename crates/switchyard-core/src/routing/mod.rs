//! Routing: which connections a request may go to, in which order, and why the others
//! are left out.
//!
//! - `resolve`: the plan from the catalog and the key (direct `provider/model`, combos,
//!   `qtSd/` pools, then aliases), and what a key may ask for
//! - [`exclusion`]: the one [`Exclusion`] type every stage reports skipped candidates in
//! - [`view`]: the per-candidate facts a strategy orders by
//! - [`strategy`]: one file per routing strategy, and the registry of their names
//! - [`affinity`]: session ids, the pinned-first rule and the pin's lifecycle (SPEC R15)
//! - [`lease`]: exclusive session leases, their fence and lifecycle (SPEC R16)
//! - [`stats`]: each connection × model's remembered service, for the strategies
//! - [`trace`]: a request's routing decision, for its trace
//!
//! Nothing here reads live state: the shell gathers the facts and passes them in.

pub mod affinity;
pub mod exclusion;
pub mod lease;
pub mod relay;
mod resolve;
pub mod shape;
pub mod stats;
pub mod strategy;
pub mod trace;
pub mod view;

pub use exclusion::{Exclusion, Reason};
pub use resolve::{left_out, offered, plan, NoPools, Offer, OfferKind, Pools};

use crate::catalog::Connection;
use std::sync::Arc;
use strategy::StrategyRef;

/// Prefix of the internal quota-share combos (SPEC Q12): `qtSd/<pool>[/<model>]`.
pub const SHARE_PREFIX: &str = "qtSd/";

/// One upstream attempt: a connection and the model name the upstream will see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub connection: Arc<Connection>,
    pub upstream_model: String,
    /// Index of the combo target this candidate came from (0 for direct requests).
    pub target: usize,
}

#[cfg(test)]
impl Candidate {
    /// A candidate on an API-key connection `id` of `provider` (its family too), for
    /// the core's tests.
    pub(crate) fn for_test(provider: &str, id: &str, model: &str, target: usize) -> Self {
        Self {
            connection: Arc::new(Connection {
                id: id.into(),
                provider: provider.into(),
                auth_class: crate::domain::AuthClass::Apikey,
                format: crate::domain::UpstreamFormat::Openai,
                base_url: "http://x".into(),
                enabled: true,
                max_concurrent: None,
                model_concurrency: Default::default(),
                queue: Default::default(),
                disable_cooling: false,
                family: provider.into(),
                index: 0,
            }),
            upstream_model: model.to_owned(),
            target,
        }
    }
}

/// How a plan's candidates are dispatched: properties of the plan, so no stage needs
/// to know which strategy made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchPolicy {
    /// Whether a request whose every target is briefly held back waits it out (SPEC R9).
    pub combo_wait: bool,
    /// What the account gate does when its queue is full or the wait too long.
    pub account_gate: AccountGate,
}

/// The account gate's behaviour when it cannot give a slot in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountGate {
    /// The request is refused with the gate's reason (SPEC R7, R10).
    Strict,
    /// The request goes ahead without a slot: quota-share dispatch (SPEC Q12) spreads
    /// load itself and must not fail for want of a slot.
    FailOpen,
}

/// The routing plan for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Candidates in the order they will be attempted.
    pub candidates: Vec<Candidate>,
    /// Candidates left out by resolution (switched off, not allowed for the key).
    pub excluded: Vec<Exclusion>,
    /// The combo the request named (or its alias led to), if any.
    pub combo: Option<String>,
    /// The strategy that orders the candidates.
    pub strategy: StrategyRef,
    pub policy: DispatchPolicy,
    /// The pattern of the alias the requested name followed, if it followed one.
    pub alias: Option<String>,
    /// Every candidate's connection was fixed by the operator (combo targets naming
    /// their connection): a session pin does not reorder them (SPEC R15).
    pub fixed: bool,
}

/// Why a requested model cannot be routed at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("model `{model}` does not exist{}", offered_list(offered))]
    UnknownModel {
        model: String,
        /// What the key may ask for instead (see [`offered`]).
        offered: Vec<String>,
    },
    #[error("this API key may not use model `{0}`")]
    ModelNotAllowed(String),
}

/// How many names an unknown-model error lists before it refers to `GET /v1/models`.
pub const LISTED_OFFERS: usize = 20;

fn offered_list(offered: &[String]) -> String {
    if offered.is_empty() {
        return ": this API key may ask for nothing yet (no provider, combo or alias is configured for it)".to_owned();
    }
    let shown = offered.iter().take(LISTED_OFFERS).map(String::as_str);
    let mut out = format!("; ask for one of: {}", shown.collect::<Vec<_>>().join(", "));
    if offered.len() > LISTED_OFFERS {
        out.push_str(&format!(" and {} more", offered.len() - LISTED_OFFERS));
    }
    out.push_str(" (see GET /v1/models)");
    out
}
