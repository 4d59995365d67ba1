//! The per-request view of the candidates: the facts a routing strategy orders by, one
//! [`CandidateView`] per candidate, in plan order. The shell gathers only the facts the
//! strategy asks for ([`super::strategy::Needs`]), so a strategy that reads nothing costs
//! nothing on the request path. This module holds data only: it decides nothing and
//! reads no state.

/// What a strategy may know about one candidate. A fact the strategy did not ask for
/// keeps its default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CandidateView {
    /// Requests running plus waiting on the candidate's connection.
    pub load: usize,
    /// The provider reports the connection's used quota at or over the saturation
    /// threshold (its quota headroom is gone).
    pub saturated: bool,
    /// The soft quota penalty (SPEC Q7): the factor the candidate's score is multiplied
    /// by after every other factor; 1.0 when the key is within its share.
    pub penalty: f64,
    /// The combo target's weight (1 for a direct request's candidates).
    pub weight: u32,
    /// The combo target's declared cost, else the catalog's input price of its model
    /// (USD per million input tokens); `None` when neither is known.
    pub cost: Option<f64>,
    /// The connection × model's mean success, 0 to 1 (1 before any outcome).
    pub success: f64,
    /// Its mean milliseconds to response headers for a request of this kind (streams:
    /// time to first byte), when known.
    pub header_ms: Option<f64>,
    /// Requests sent to it lately, decayed (never negative).
    pub used: f64,
    /// Its connection's rendezvous score for the request's prompt-cache key (0 when the
    /// request has none).
    pub affinity: u64,
}

impl Default for CandidateView {
    fn default() -> Self {
        Self {
            load: 0,
            saturated: false,
            penalty: 1.0,
            weight: 1,
            cost: None,
            success: 1.0,
            header_ms: None,
            used: 0.0,
            affinity: 0,
        }
    }
}
