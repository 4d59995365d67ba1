//! The gateway's health over its components (SPEC O5): one status an operator or a
//! load balancer can act on, and the reasons behind it.
//!
//! - `down`: providers are configured and none can serve now — each one's breaker is
//!   open, or none of its connections is enabled and out of a terminal state. No
//!   request for a model can be answered; a load balancer should send traffic elsewhere.
//! - `degraded`: the gateway serves, but something is wrong: the quota store is not the
//!   one asked for or is failing (requests go unmetered, or replicas stop sharing), the
//!   database does not answer (the request log and configuration writes fail), a
//!   provider's breaker is open or probing, a provider has no usable connection, or a
//!   connection is in a terminal state (banned, expired, out of credits).
//! - `ok`: none of that.
//!
//! A gateway with no provider configured is not `down`: there is nothing it should be
//! serving yet.

use crate::resilience::breaker;

/// The overall status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Degraded,
    Down,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Degraded => "degraded",
            Self::Down => "down",
        }
    }
}

/// One provider as health sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider<'a> {
    pub id: &'a str,
    /// Its breaker's state, when it has seen failures.
    pub breaker: Option<breaker::State>,
    /// Its connections that are enabled.
    pub enabled: usize,
    /// Of those, the ones in a terminal state.
    pub terminal: usize,
}

impl Provider<'_> {
    /// Whether it can take a request now.
    fn serves(&self) -> bool {
        !matches!(self.breaker, Some(breaker::State::Open)) && self.enabled > self.terminal
    }
}

/// What health is judged on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Components<'a> {
    /// The quota store is the one asked for and answers.
    pub quota_store_ok: bool,
    /// The database answered a read.
    pub database_ok: bool,
    pub providers: Vec<Provider<'a>>,
}

/// The status and every reason for it, in a fixed order (database, quota store, then
/// providers by the order given).
pub fn judge(c: &Components<'_>) -> (Status, Vec<String>) {
    let mut reasons = Vec::new();
    if !c.database_ok {
        reasons.push("the database does not answer".to_owned());
    }
    if !c.quota_store_ok {
        reasons.push("the quota store is not the one asked for, or is failing".to_owned());
    }
    for p in &c.providers {
        match p.breaker {
            Some(breaker::State::Open) => {
                reasons.push(format!("provider `{}`: circuit breaker open", p.id));
            }
            Some(breaker::State::HalfOpen) => {
                reasons.push(format!("provider `{}`: circuit breaker probing", p.id));
            }
            _ => {}
        }
        if p.terminal > 0 {
            reasons.push(format!(
                "provider `{}`: {} connection(s) in a terminal state",
                p.id, p.terminal
            ));
        }
        if p.enabled <= p.terminal {
            reasons.push(format!("provider `{}`: no usable connection", p.id));
        }
    }
    let status = if !c.providers.is_empty() && !c.providers.iter().any(Provider::serves) {
        Status::Down
    } else if reasons.is_empty() {
        Status::Ok
    } else {
        Status::Degraded
    };
    (status, reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use breaker::State::{Closed, Degraded, HalfOpen, Open};

    fn provider(
        id: &str,
        breaker: Option<breaker::State>,
        enabled: usize,
        terminal: usize,
    ) -> Provider<'_> {
        Provider {
            id,
            breaker,
            enabled,
            terminal,
        }
    }

    fn status(quota: bool, db: bool, providers: Vec<Provider<'_>>) -> (&'static str, Vec<String>) {
        let (s, reasons) = judge(&Components {
            quota_store_ok: quota,
            database_ok: db,
            providers,
        });
        (s.as_str(), reasons)
    }

    #[test]
    fn every_component_counts() {
        let healthy = || vec![provider("a", None, 1, 0), provider("b", Some(Closed), 2, 0)];
        assert_eq!(status(true, true, healthy()), ("ok", vec![]));
        assert_eq!(status(true, true, vec![]), ("ok", vec![]));
        // A degraded breaker still serves and is not a fault yet.
        assert_eq!(
            status(true, true, vec![provider("a", Some(Degraded), 1, 0)]),
            ("ok", vec![])
        );
        assert_eq!(
            status(false, true, healthy()),
            (
                "degraded",
                vec!["the quota store is not the one asked for, or is failing".to_owned()]
            )
        );
        assert_eq!(
            status(true, false, healthy()),
            ("degraded", vec!["the database does not answer".to_owned()])
        );
        assert_eq!(
            status(
                true,
                true,
                vec![provider("a", Some(Open), 1, 0), provider("b", None, 1, 0)]
            ),
            (
                "degraded",
                vec!["provider `a`: circuit breaker open".to_owned()]
            )
        );
        assert_eq!(
            status(true, true, vec![provider("a", Some(HalfOpen), 1, 0)]),
            (
                "degraded",
                vec!["provider `a`: circuit breaker probing".to_owned()]
            )
        );
        assert_eq!(
            status(true, true, vec![provider("a", None, 2, 1)]),
            (
                "degraded",
                vec!["provider `a`: 1 connection(s) in a terminal state".to_owned()]
            )
        );
        assert_eq!(
            status(
                true,
                true,
                vec![provider("a", None, 0, 0), provider("b", None, 1, 0)]
            ),
            (
                "degraded",
                vec!["provider `a`: no usable connection".to_owned()]
            )
        );
    }

    #[test]
    fn down_when_no_configured_provider_can_serve() {
        assert_eq!(
            status(
                true,
                true,
                vec![provider("a", Some(Open), 1, 0), provider("b", None, 1, 1)]
            ),
            (
                "down",
                vec![
                    "provider `a`: circuit breaker open".to_owned(),
                    "provider `b`: 1 connection(s) in a terminal state".to_owned(),
                    "provider `b`: no usable connection".to_owned(),
                ]
            )
        );
        // A probing breaker lets a request through: not down.
        assert_eq!(
            status(true, true, vec![provider("a", Some(HalfOpen), 1, 0)]).0,
            "degraded"
        );
        // The quota store and the database alone never make it down: it still serves.
        assert_eq!(
            status(false, false, vec![provider("a", None, 1, 0)]).0,
            "degraded"
        );
    }
}
