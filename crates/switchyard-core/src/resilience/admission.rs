//! Request-queue admission (SPEC R10): the limits of one provider+connection queue and
//! the decisions taken on them — all pure.
//!
//! - `maxQueueDepth` (0 = unbounded, up to 100 000) rejects a request before any work
//!   is done on it when the queue is already that deep: `RATE_LIMIT_QUEUE_FULL`.
//! - `maxWaitMs` bounds the time in the queue: `SEMAPHORE_TIMEOUT`.
//! - `executionMaxWaitMs` bounds execution after dispatch — raised to the upstream's own
//!   start timeout when that is longer, so a request is never cut before the executor
//!   would have given up on its own: `RATE_LIMIT_EXECUTION_TIMEOUT` (504).
//! - A request whose wait cannot end before its deadline — judged from its position in
//!   the queue and the service times observed — is told so at once, with an honest
//!   `Retry-After`, instead of waiting only to fail late.
//! - Every gate's queue has a hard bound besides (memory, not policy):
//!   `SEMAPHORE_QUEUE_FULL`.
//!
//! Precedence, highest first: per-connection override → stored settings → environment
//! → default. The settings registry resolves the last three; [`Limits::with`] applies
//! the first. Times are clamped to 1 ms – 24 h.

/// The smallest and largest time limit.
pub const MIN_MS: u64 = 1;
pub const MAX_MS: u64 = 86_400_000;

/// The deepest queue a setting may ask for.
pub const MAX_QUEUE_DEPTH: u64 = 100_000;

/// Resolved limits of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_wait_ms: u64,
    pub execution_max_wait_ms: u64,
    /// 0 = unbounded.
    pub max_queue_depth: u64,
}

/// SPEC R10 defaults: 30 s in the queue, 10 min of execution, unbounded depth.
pub const DEFAULTS: Limits = Limits {
    max_wait_ms: 30_000,
    execution_max_wait_ms: 600_000,
    max_queue_depth: 0,
};

/// A connection's overrides; `None` = not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    pub max_wait_ms: Option<u64>,
    pub execution_max_wait_ms: Option<u64>,
    pub max_queue_depth: Option<u64>,
}

impl Limits {
    /// These limits (from the settings) under a connection's overrides, clamped.
    pub fn with(self, over: &Overrides) -> Self {
        Self {
            max_wait_ms: over
                .max_wait_ms
                .unwrap_or(self.max_wait_ms)
                .clamp(MIN_MS, MAX_MS),
            execution_max_wait_ms: over
                .execution_max_wait_ms
                .unwrap_or(self.execution_max_wait_ms)
                .clamp(MIN_MS, MAX_MS),
            max_queue_depth: over
                .max_queue_depth
                .unwrap_or(self.max_queue_depth)
                .min(MAX_QUEUE_DEPTH),
        }
    }
}

/// The execution bound: the limit, raised to the upstream's start timeout if longer.
pub fn execution_bound_ms(limits: &Limits, upstream_start_timeout_ms: u64) -> u64 {
    limits.execution_max_wait_ms.max(upstream_start_timeout_ms)
}

/// Why a request is refused by its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The queue is at `maxQueueDepth`.
    QueueFull,
    /// The wait cannot end in time; come back then.
    Hopeless { retry_after_ms: u64 },
    /// Waited `maxWaitMs` without a slot.
    QueueTimeout,
    /// A gate's queue is at its hard bound.
    GateQueueFull,
    /// Ran past the execution bound.
    ExecutionTimeout,
}

impl Refusal {
    /// The typed error code.
    pub fn code(self) -> &'static str {
        match self {
            Self::QueueFull => "RATE_LIMIT_QUEUE_FULL",
            Self::Hopeless { .. } | Self::QueueTimeout => "SEMAPHORE_TIMEOUT",
            Self::GateQueueFull => "SEMAPHORE_QUEUE_FULL",
            Self::ExecutionTimeout => "RATE_LIMIT_EXECUTION_TIMEOUT",
        }
    }

    /// The HTTP status: 504 for an execution timeout, 429 otherwise (the client may
    /// retry later).
    pub fn status(self) -> u16 {
        match self {
            Self::ExecutionTimeout => 504,
            _ => 429,
        }
    }
}

/// Whether a request may join a queue that already holds `depth` waiters.
pub fn admit(limits: &Limits, depth: u64) -> Result<(), Refusal> {
    if limits.max_queue_depth > 0 && depth >= limits.max_queue_depth {
        return Err(Refusal::QueueFull);
    }
    Ok(())
}

/// The expected wait of a request that would be `position`-th in line (0 = next) for a
/// gate of `capacity` slots whose holders take `service_ms` on average: the holders now
/// running have half their time left on average, and every `capacity` requests ahead
/// cost one more service time.
pub fn expected_wait_ms(position: u64, capacity: u64, service_ms: u64) -> u64 {
    let rounds = position / capacity.max(1);
    rounds
        .saturating_mul(service_ms)
        .saturating_add(service_ms / 2)
}

/// Refuses at once a request whose expected wait exceeds `max_wait_ms`, with the wait
/// as its `Retry-After`. Without observed service times nothing is refused.
pub fn judge_wait(
    limits: &Limits,
    position: u64,
    capacity: u64,
    service_ms: Option<u64>,
) -> Result<(), Refusal> {
    let Some(service) = service_ms else {
        return Ok(());
    };
    let wait = expected_wait_ms(position, capacity, service);
    if wait > limits.max_wait_ms {
        return Err(Refusal::Hopeless {
            retry_after_ms: wait,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_override_wins_over_the_settings() {
        let settings = Limits {
            max_wait_ms: 10_000,
            execution_max_wait_ms: 2_000,
            max_queue_depth: 30,
        };
        assert_eq!(settings.with(&Overrides::default()), settings);
        let over = Overrides {
            max_wait_ms: None,
            execution_max_wait_ms: Some(5_000),
            max_queue_depth: Some(300),
        };
        assert_eq!(
            settings.with(&over),
            Limits {
                max_wait_ms: 10_000,
                execution_max_wait_ms: 5_000,
                max_queue_depth: 300
            }
        );
    }

    #[test]
    fn values_are_clamped() {
        let over = Overrides {
            max_wait_ms: Some(0),
            execution_max_wait_ms: Some(u64::MAX),
            max_queue_depth: Some(u64::MAX),
        };
        assert_eq!(
            DEFAULTS.with(&over),
            Limits {
                max_wait_ms: MIN_MS,
                execution_max_wait_ms: MAX_MS,
                max_queue_depth: MAX_QUEUE_DEPTH
            }
        );
    }

    #[test]
    fn the_execution_bound_is_raised_to_the_upstream_start_timeout() {
        assert_eq!(execution_bound_ms(&DEFAULTS, 120_000), 600_000);
        assert_eq!(execution_bound_ms(&DEFAULTS, 900_000), 900_000);
    }

    #[test]
    fn depth_zero_is_unbounded_and_a_bound_rejects_at_it() {
        assert_eq!(admit(&DEFAULTS, 1_000_000), Ok(()));
        let l = Limits {
            max_queue_depth: 2,
            ..DEFAULTS
        };
        assert_eq!(admit(&l, 1), Ok(()));
        assert_eq!(admit(&l, 2), Err(Refusal::QueueFull));
    }

    #[test]
    fn hopeless_waits_are_refused_at_once_with_an_honest_retry_after() {
        let l = Limits {
            max_wait_ms: 10_000,
            ..DEFAULTS
        };
        // Two slots, 3 s per request: next in line waits for half a service time; the
        // 5th (position 4) for two more rounds.
        assert_eq!(expected_wait_ms(0, 2, 3_000), 1_500);
        assert_eq!(expected_wait_ms(4, 2, 3_000), 7_500);
        assert_eq!(judge_wait(&l, 4, 2, Some(3_000)), Ok(()));
        assert_eq!(judge_wait(&l, 5, 2, Some(3_000)), Ok(()));
        assert_eq!(
            judge_wait(&l, 6, 2, Some(3_000)),
            Err(Refusal::Hopeless {
                retry_after_ms: 10_500
            })
        );
        assert_eq!(judge_wait(&l, 1_000, 1, None), Ok(()));
    }

    #[test]
    fn refusals_have_distinct_codes_and_statuses() {
        assert_eq!(
            (Refusal::QueueFull.code(), Refusal::QueueFull.status()),
            ("RATE_LIMIT_QUEUE_FULL", 429)
        );
        assert_eq!(Refusal::QueueTimeout.code(), "SEMAPHORE_TIMEOUT");
        assert_eq!(
            Refusal::Hopeless { retry_after_ms: 1 }.code(),
            "SEMAPHORE_TIMEOUT"
        );
        assert_eq!(Refusal::GateQueueFull.code(), "SEMAPHORE_QUEUE_FULL");
        assert_eq!(
            (
                Refusal::ExecutionTimeout.code(),
                Refusal::ExecutionTimeout.status()
            ),
            ("RATE_LIMIT_EXECUTION_TIMEOUT", 504)
        );
    }
}
