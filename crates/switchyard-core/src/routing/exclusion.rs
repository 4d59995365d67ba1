//! Why a candidate is not attempted: the one exclusion vocabulary shared by routing
//! (disabled, not allowed for the key), resilience (breakers, cooldowns, terminal
//! states, provider cooldowns, model locks, slow start), quota (a pool's refusal) and
//! concurrency (a gate's refusal), and read by the dispatch loop, the R9 combo wait and
//! the R18 diagnostics. This module only names and classifies; it decides nothing.

use crate::resilience::admission::Refusal;
use crate::resilience::combo_wait::{self, Hold};
use crate::resilience::cooldown::Terminal;

/// A candidate left out, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exclusion {
    /// `provider/model` as the upstream sees it.
    pub target: String,
    pub connection: String,
    pub reason: Reason,
}

impl Exclusion {
    /// How long until the candidate may be tried; `None` when that is not known to
    /// happen on its own.
    pub fn retry_after_ms(&self) -> Option<u64> {
        self.reason.retry_after_ms()
    }
}

/// Every reason a candidate is not attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The connection is switched off by the operator.
    Disabled,
    /// The client key's `allowedConnections` does not include the connection.
    NotAllowedForKey,
    /// The provider's breaker is open (or a half-open probe is already out).
    CircuitOpen { retry_after_ms: u64 },
    /// The connection is cooling down; `transient` unless its last failure was an auth
    /// refusal or a rejection.
    CoolingDown {
        retry_after_ms: u64,
        transient: bool,
    },
    /// The connection is in a terminal state.
    Terminal(Terminal),
    /// The provider's time-window cooldown tripped (SPEC R2).
    ProviderCooling { retry_after_ms: u64 },
    /// The model is locked on this connection (SPEC R5) after a `status` answer.
    ModelLocked { retry_after_ms: u64, status: u16 },
    /// The target is recovering and this request is not in its share yet; it goes
    /// after the other candidates.
    Warming,
    /// The connection's quota pool refused the key (SPEC Q2); `None` when the request
    /// never fits the window.
    QuotaBlocked { retry_after_ms: Option<u64> },
    /// A concurrency gate or the request queue refused (SPEC R7, R10).
    SlotRefused(Refusal),
    /// The request cannot be expressed in the candidate's upstream format.
    Untranslatable,
    /// The candidate's quota pool meters `usd` and its model has no price (SPEC Q5).
    Unpriced,
    /// Another owner's live exclusive lease holds the connection (SPEC R16).
    LeasedByOther { retry_after_ms: u64 },
    /// The model's declared context window cannot hold the request's prompt.
    ContextTooSmall,
    /// The request's own lease no longer passes its fence (released, lapsed or taken
    /// anew at another generation since the request began).
    LeaseFenced,
}

impl Reason {
    /// The name in diagnostics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::NotAllowedForKey => "not_allowed_for_key",
            Self::CircuitOpen { .. } => "circuit_open",
            Self::CoolingDown { .. } => "unavailable",
            Self::Terminal(t) => t.as_str(),
            Self::ProviderCooling { .. } => "provider_cooldown",
            Self::ModelLocked { .. } => "model_lockout",
            Self::Warming => "warming_up",
            Self::QuotaBlocked { .. } => "quota_exceeded",
            Self::SlotRefused(r) => r.code(),
            Self::Untranslatable => "untranslatable",
            Self::Unpriced => "model_unpriced",
            Self::LeasedByOther { .. } => "leased_by_other",
            Self::LeaseFenced => "lease_fenced",
            Self::ContextTooSmall => "context_too_small",
        }
    }

    /// How long until the candidate may be tried; `None` for what does not end by
    /// itself (operator switches, terminal states, a request that never fits).
    pub fn retry_after_ms(self) -> Option<u64> {
        match self {
            Self::CircuitOpen { retry_after_ms }
            | Self::CoolingDown { retry_after_ms, .. }
            | Self::ProviderCooling { retry_after_ms }
            | Self::ModelLocked { retry_after_ms, .. }
            | Self::SlotRefused(Refusal::Hopeless { retry_after_ms })
            | Self::LeasedByOther { retry_after_ms } => Some(retry_after_ms),
            Self::QuotaBlocked { retry_after_ms } => retry_after_ms,
            Self::Warming => Some(0),
            Self::Disabled
            | Self::NotAllowedForKey
            | Self::Terminal(_)
            | Self::SlotRefused(_)
            | Self::Untranslatable
            | Self::Unpriced
            | Self::LeaseFenced
            | Self::ContextTooSmall => None,
        }
    }

    /// Whether it ends on its own shortly (SPEC R9): rate-limit cooldowns, transient
    /// model locks, open breakers, provider cooldowns and slow start do; quota, auth,
    /// rejections, terminal states, operator switches, queue refusals and leases (held
    /// for minutes and renewed) do not.
    pub fn ends_on_its_own(self) -> bool {
        match self {
            Self::ModelLocked { status, .. } => combo_wait::lock_is_transient(status),
            Self::CoolingDown { transient, .. } => transient,
            Self::CircuitOpen { .. } | Self::ProviderCooling { .. } | Self::Warming => true,
            Self::Disabled
            | Self::NotAllowedForKey
            | Self::Terminal(_)
            | Self::QuotaBlocked { .. }
            | Self::SlotRefused(_)
            | Self::Untranslatable
            | Self::Unpriced
            | Self::LeasedByOther { .. }
            | Self::LeaseFenced
            | Self::ContextTooSmall => false,
        }
    }

    /// What the R9 combo wait sees of it.
    pub fn hold(self) -> Hold {
        match self.retry_after_ms() {
            Some(retry_after_ms) if self.ends_on_its_own() => Hold::Transient { retry_after_ms },
            _ => Hold::Lasting,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_name_retry_after_and_hold() {
        let t = |retry_after_ms| Hold::Transient { retry_after_ms };
        let cases: [(Reason, &str, Option<u64>, Hold); 20] = [
            (
                Reason::ContextTooSmall,
                "context_too_small",
                None,
                Hold::Lasting,
            ),
            (
                Reason::LeasedByOther { retry_after_ms: 11 },
                "leased_by_other",
                Some(11),
                Hold::Lasting,
            ),
            (Reason::LeaseFenced, "lease_fenced", None, Hold::Lasting),
            (Reason::Disabled, "disabled", None, Hold::Lasting),
            (Reason::Unpriced, "model_unpriced", None, Hold::Lasting),
            (
                Reason::Untranslatable,
                "untranslatable",
                None,
                Hold::Lasting,
            ),
            (
                Reason::NotAllowedForKey,
                "not_allowed_for_key",
                None,
                Hold::Lasting,
            ),
            (
                Reason::CircuitOpen { retry_after_ms: 5 },
                "circuit_open",
                Some(5),
                t(5),
            ),
            (
                Reason::CoolingDown {
                    retry_after_ms: 6,
                    transient: true,
                },
                "unavailable",
                Some(6),
                t(6),
            ),
            (
                Reason::CoolingDown {
                    retry_after_ms: 6,
                    transient: false,
                },
                "unavailable",
                Some(6),
                Hold::Lasting,
            ),
            (
                Reason::Terminal(Terminal::Banned),
                "banned",
                None,
                Hold::Lasting,
            ),
            (
                Reason::ProviderCooling { retry_after_ms: 7 },
                "provider_cooldown",
                Some(7),
                t(7),
            ),
            (
                Reason::ModelLocked {
                    retry_after_ms: 8,
                    status: 429,
                },
                "model_lockout",
                Some(8),
                t(8),
            ),
            (
                Reason::ModelLocked {
                    retry_after_ms: 8,
                    status: 503,
                },
                "model_lockout",
                Some(8),
                t(8),
            ),
            (
                Reason::ModelLocked {
                    retry_after_ms: 8,
                    status: 403,
                },
                "model_lockout",
                Some(8),
                Hold::Lasting,
            ),
            (Reason::Warming, "warming_up", Some(0), t(0)),
            (
                Reason::QuotaBlocked {
                    retry_after_ms: Some(9),
                },
                "quota_exceeded",
                Some(9),
                Hold::Lasting,
            ),
            (
                Reason::QuotaBlocked {
                    retry_after_ms: None,
                },
                "quota_exceeded",
                None,
                Hold::Lasting,
            ),
            (
                Reason::SlotRefused(Refusal::Hopeless { retry_after_ms: 10 }),
                "SEMAPHORE_TIMEOUT",
                Some(10),
                Hold::Lasting,
            ),
            (
                Reason::SlotRefused(Refusal::QueueFull),
                "RATE_LIMIT_QUEUE_FULL",
                None,
                Hold::Lasting,
            ),
        ];
        for (reason, name, retry, hold) in cases {
            assert_eq!(reason.as_str(), name, "{reason:?}");
            assert_eq!(reason.retry_after_ms(), retry, "{reason:?}");
            assert_eq!(reason.hold(), hold, "{reason:?}");
            let e = Exclusion {
                target: "p/m".into(),
                connection: "c".into(),
                reason,
            };
            assert_eq!(e.retry_after_ms(), retry);
            assert_eq!(
                e.reason.ends_on_its_own(),
                matches!(hold, Hold::Transient { .. })
            );
        }
    }
}
