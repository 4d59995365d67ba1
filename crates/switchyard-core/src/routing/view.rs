//! The per-request view of the candidates: the facts a routing strategy orders by, one
//! [`CandidateView`] per candidate, in plan order. The shell gathers only the facts the
//! strategy asks for ([`super::strategy::Needs`]), so a strategy that reads nothing costs
//! nothing on the request path. This module holds data only: it decides nothing and
//! reads no state.

/// One window's provider reading (SPEC Q6): how used the account is and when the
/// window resets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Used fraction, 0 to 1.
    pub used: f64,
    /// Milliseconds until the window resets, when the provider said.
    pub reset_in_ms: Option<u64>,
}

/// The provider's readings of a candidate's account, by window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QuotaWindows {
    /// The 5-hour window (Codex primary, Anthropic 5h).
    pub five_hours: Option<Reading>,
    /// The weekly window (Codex secondary, Anthropic 7d).
    pub weekly: Option<Reading>,
    /// The highest used fraction of any reading, whatever its window.
    pub used_max: Option<f64>,
}

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
    /// The provider's quota readings of its account (SPEC Q6).
    pub quota: QuotaWindows,
    /// Its connection last served the combo successfully.
    pub last_good: bool,
    /// Its model's context window in tokens, when the operator declared one.
    pub context_window: Option<u64>,
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
            quota: QuotaWindows::default(),
            last_good: false,
            context_window: None,
        }
    }
}
