//! Classification of an upstream attempt's outcome: did it succeed, may the next
//! candidate be tried, and which failure it was (the gateway maps it to a typed error).
//!
//! Failover is safe only before the first byte reaches the client. Retryable failures
//! are those where another account or provider can plausibly succeed: the upstream was
//! unreachable, too slow, broken (5xx) or throttling this account (429, 408). A 4xx other
//! than those says the request itself is wrong, and another upstream would say the same,
//! so it is returned to the client as it is.
//!
//! It only classifies: acting on the answer is the attempt loop's (`crate::dispatch`),
//! and nothing here sees a request, a response body or a clock.

/// How an attempt failed before producing a usable response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptFailure {
    /// TCP/TLS connection could not be established.
    Connect,
    /// No response headers within the first-byte deadline.
    FirstByteTimeout,
    /// The connection broke while the response was being read.
    Reset,
    /// The upstream answered with a non-success status.
    Status(u16),
    /// The upstream answered 200 with something other than what was asked for: a body
    /// that is not JSON, or not an event stream when a stream was asked for. Treated like
    /// a 502 from the provider (the gateway's own quality 502 of SPEC R5).
    InvalidResponse,
}

impl AttemptFailure {
    /// Whether the next candidate may be tried.
    pub fn is_retryable(self) -> bool {
        match self {
            Self::Connect | Self::FirstByteTimeout | Self::Reset | Self::InvalidResponse => true,
            Self::Status(s) => is_retryable_status(s),
        }
    }

    /// The status the failure stands for where decisions go by status (model lockout):
    /// the upstream's, or 502 for an invalid answer; `None` for transport failures.
    pub fn status(self) -> Option<u16> {
        match self {
            Self::Status(s) => Some(s),
            Self::InvalidResponse => Some(502),
            Self::Connect | Self::FirstByteTimeout | Self::Reset => None,
        }
    }

    /// Short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Connect => "connect_error",
            Self::FirstByteTimeout => "timeout",
            Self::Reset => "connection_reset",
            Self::InvalidResponse => "invalid_response",
            Self::Status(429) => "rate_limited",
            Self::Status(s) if s >= 500 => "server_error",
            Self::Status(_) => "client_error",
        }
    }
}

/// Statuses after which another upstream may succeed.
pub fn is_retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || (500..=599).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_statuses() {
        for s in [408, 429, 500, 502, 503, 504, 599] {
            assert!(is_retryable_status(s), "{s}");
        }
        for s in [200, 400, 401, 403, 404, 413, 422] {
            assert!(!is_retryable_status(s), "{s}");
        }
    }

    #[test]
    fn transport_failures_are_retryable() {
        assert!(AttemptFailure::Connect.is_retryable());
        assert!(AttemptFailure::FirstByteTimeout.is_retryable());
        assert!(AttemptFailure::Reset.is_retryable());
        assert!(!AttemptFailure::Status(401).is_retryable());
        assert_eq!(AttemptFailure::Status(429).label(), "rate_limited");
        assert_eq!(AttemptFailure::Status(503).label(), "server_error");
        assert_eq!(AttemptFailure::Status(400).label(), "client_error");
        assert!(AttemptFailure::InvalidResponse.is_retryable());
        assert_eq!(AttemptFailure::InvalidResponse.status(), Some(502));
        assert_eq!(AttemptFailure::Status(404).status(), Some(404));
        assert_eq!(AttemptFailure::Reset.status(), None);
    }
}
