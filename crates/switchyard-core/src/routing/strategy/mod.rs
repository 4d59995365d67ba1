//! Routing strategies: the order in which a request's candidates are tried, decided
//! from the per-request view ([`super::view`]) and a rotation counter, never from
//! state. One file per strategy; a new one is a file here and a line in [`for_kind`].
//! Strategies only order: exclusion, admission and failover are other modules' work.

mod priority;
mod quota_share;

pub use priority::Priority;
pub use quota_share::QuotaShare;

use super::view::CandidateView;

/// The facts a strategy reads; the shell gathers only these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// [`CandidateView::load`].
    pub load: bool,
    /// [`CandidateView::saturated`].
    pub saturation: bool,
    /// [`CandidateView::penalty`].
    pub penalty: bool,
}

impl Needs {
    /// Reads nothing.
    pub const NONE: Self = Self {
        load: false,
        saturation: false,
        penalty: false,
    };
}

/// A routing strategy: see the module docs.
pub trait Strategy: Sync + std::fmt::Debug {
    /// The name in logs and configuration.
    fn name(&self) -> &'static str;

    /// The facts [`Strategy::order`] reads.
    fn needs(&self) -> Needs;

    /// Indices into `views` in the order to try the candidates; a permutation.
    /// `rotation` is a per-request counter for strategies that spread load.
    fn order(&self, views: &[CandidateView], rotation: usize) -> Vec<usize>;
}

/// Which strategy orders a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A combo's or a direct request's: targets in the configured order.
    Priority,
    /// The internal strategy of `qtSd/` combos (SPEC Q12); not selectable by combos.
    QuotaShare,
}

/// The strategy of `kind`.
pub fn for_kind(kind: Kind) -> &'static dyn Strategy {
    match kind {
        Kind::Priority => &Priority,
        Kind::QuotaShare => &QuotaShare,
    }
}

/// Whether `order` leaves the candidates where they are.
pub fn is_identity(order: &[usize]) -> bool {
    order.iter().enumerate().all(|(i, &j)| i == j)
}
