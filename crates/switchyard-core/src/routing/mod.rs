//! Routing: which connections a request may go to, in which order, and why the others
//! are left out.
//!
//! - `resolve`: the plan from the catalog and the key (direct `provider/model`, combos)
//! - [`exclusion`]: the one [`Exclusion`] type every stage reports skipped candidates in
//! - [`view`]: the per-request facts a strategy orders by
//! - [`strategy`]: one file per routing strategy
//!
//! Nothing here reads live state: the shell gathers the view and passes it in.

pub mod exclusion;
mod resolve;
pub mod strategy;
pub mod view;

pub use exclusion::{Exclusion, Reason};
pub use resolve::{left_out, plan};

use crate::catalog::Connection;
use std::sync::Arc;

/// One upstream attempt: a connection and the model name the upstream will see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub connection: Arc<Connection>,
    pub upstream_model: String,
    /// Index of the combo target this candidate came from (0 for direct requests).
    pub target: usize,
}

/// The routing plan for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Candidates in the order they will be attempted.
    pub candidates: Vec<Candidate>,
    /// Candidates left out by resolution (switched off, not allowed for the key).
    pub excluded: Vec<Exclusion>,
    /// The combo the request named, if any.
    pub combo: Option<String>,
    /// The strategy that orders the candidates.
    pub strategy: strategy::Kind,
}

/// Why a requested model cannot be routed at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("model `{0}` does not exist: use provider/model or a combo name (see GET /v1/models)")]
    UnknownModel(String),
    #[error("this API key may not use model `{0}`")]
    ModelNotAllowed(String),
}
