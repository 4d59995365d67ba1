//! How an upstream attempt failed (the gateway maps it to a typed error). What a failure
//! means — may the next candidate be tried, what it says of the account — is the
//! verdict's ([`crate::resilience::verdict`]); acting on it is the attempt loop's
//! (`crate::dispatch`).
//!
//! Failover is safe only before the first byte reaches the client. Retryable statuses
//! are those where another account or provider can plausibly succeed: the upstream was
//! broken (5xx) or throttling this account (429, 408). A 4xx other than those says the
//! request itself is wrong, and another upstream would say the same.

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
    /// A stream that was answering failed (SPEC R11, R12): before it committed, the next
    /// candidate is tried; after, the client gets its format's terminal frame.
    Stream(StreamCut),
}

/// How a stream failed after its response headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCut {
    /// No output event within the first-output budget (R11).
    FirstOutput,
    /// No output or reasoning event for the idle budget after the first output (R11).
    OutputIdle,
    /// The attempt ran past its total bound (R10's execution bound).
    Total,
    /// Useful output below the throughput watchdog's minimum (R12).
    Throughput,
    /// No byte at all for `upstream.stream_idle_timeout_ms` (the backstop).
    Silent,
    /// The connection broke, or the stream ended before its end event.
    Broken,
    /// The upstream sent its own error event.
    Error,
}

impl StreamCut {
    /// Short label for logs, metrics and the request log.
    pub fn label(self) -> &'static str {
        match self {
            Self::FirstOutput => "first_output_timeout",
            Self::OutputIdle => "output_idle_timeout",
            Self::Total => "total_timeout",
            Self::Throughput => "throughput_low",
            Self::Silent => "stream_idle_timeout",
            Self::Broken => "stream_broken",
            Self::Error => "stream_error",
        }
    }

    /// Every cut, for metrics and docs.
    pub const ALL: [Self; 7] = [
        Self::FirstOutput,
        Self::OutputIdle,
        Self::Total,
        Self::Throughput,
        Self::Silent,
        Self::Broken,
        Self::Error,
    ];

    /// A stall (rather than a break or an error): what `streamStallCooldown` cools.
    pub fn is_stall(self) -> bool {
        !matches!(self, Self::Broken | Self::Error)
    }
}

impl From<crate::stream::watchdog::Trip> for StreamCut {
    fn from(trip: crate::stream::watchdog::Trip) -> Self {
        use crate::stream::watchdog::Trip;
        match trip {
            Trip::FirstOutput { .. } => Self::FirstOutput,
            Trip::Idle { .. } => Self::OutputIdle,
            Trip::Total { .. } => Self::Total,
            Trip::Throughput { .. } => Self::Throughput,
        }
    }
}

impl AttemptFailure {
    /// The status the failure stands for where decisions go by status (model lockout):
    /// the upstream's, or 502 for an invalid answer; `None` for transport failures.
    pub fn status(self) -> Option<u16> {
        match self {
            Self::Status(s) => Some(s),
            Self::InvalidResponse => Some(502),
            Self::Connect | Self::FirstByteTimeout | Self::Reset | Self::Stream(_) => None,
        }
    }

    /// Short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Connect => "connect_error",
            Self::FirstByteTimeout => "timeout",
            Self::Reset => "connection_reset",
            Self::InvalidResponse => "invalid_response",
            Self::Stream(cut) => cut.label(),
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
    fn failure_labels_and_statuses() {
        assert_eq!(AttemptFailure::Status(429).label(), "rate_limited");
        assert_eq!(AttemptFailure::Status(503).label(), "server_error");
        assert_eq!(AttemptFailure::Status(400).label(), "client_error");
        assert_eq!(AttemptFailure::InvalidResponse.status(), Some(502));
        assert_eq!(AttemptFailure::Status(404).status(), Some(404));
        assert_eq!(AttemptFailure::Reset.status(), None);
    }

    #[test]
    fn stream_cuts_lock_nothing() {
        for cut in StreamCut::ALL {
            let f = AttemptFailure::Stream(cut);
            assert_eq!(f.status(), None);
            assert_eq!(f.label(), cut.label());
        }
        let stalls: Vec<_> = StreamCut::ALL
            .into_iter()
            .filter(|c| c.is_stall())
            .collect();
        assert_eq!(stalls.len(), 5);
        use crate::stream::watchdog::Trip;
        let trips = [
            Trip::FirstOutput { budget_ms: 1 },
            Trip::Idle { idle_ms: 1 },
            Trip::Total { total_ms: 1 },
            Trip::Throughput {
                bytes: 0,
                window_ms: 1,
            },
        ];
        let cuts: Vec<_> = trips.into_iter().map(StreamCut::from).collect();
        assert_eq!(cuts, StreamCut::ALL[..4]);
    }
}
