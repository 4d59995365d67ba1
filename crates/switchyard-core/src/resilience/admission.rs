//! Request-queue admission (SPEC R10, issue 5): the limits of one provider+connection
//! queue, resolved from their layers, and the decisions taken on them — all pure.
//!
//! - `maxQueueDepth` (0 = unbounded, up to 100 000) rejects a request before any work
//!   is done on it when the queue is already that deep: `RATE_LIMIT_QUEUE_FULL`.
//! - `maxWaitMs` bounds the time in the queue: `RATE_LIMIT_QUEUE_TIMEOUT`.
//! - `executionMaxWaitMs` bounds execution after dispatch — raised to the upstream's own
//!   start timeout when that is longer, so a request is never cut before the executor
//!   would have given up on its own: `RATE_LIMIT_EXECUTION_TIMEOUT` (504).
//! - A request whose wait cannot end before its deadline — judged from its position in
//!   the queue and the service times observed — is told so at once, with an honest
//!   `Retry-After`, instead of waiting only to fail late.
//!
//! Precedence, highest first: per-connection override → stored settings → environment
//! → default. Times are clamped to 1 ms – 24 h.

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

/// One layer's values; `None` = not set at this layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layer {
    pub max_wait_ms: Option<u64>,
    pub execution_max_wait_ms: Option<u64>,
    pub max_queue_depth: Option<u64>,
}

fn first(values: [Option<u64>; 3], default: u64) -> u64 {
    values.into_iter().flatten().next().unwrap_or(default)
}

/// Resolves the limits: `connection` → `stored` → `env` → defaults, clamped.
pub fn resolve(connection: &Layer, stored: &Layer, env: &Layer) -> Limits {
    let pick = |f: fn(&Layer) -> Option<u64>| [f(connection), f(stored), f(env)];
    Limits {
        max_wait_ms: first(pick(|l| l.max_wait_ms), DEFAULTS.max_wait_ms).clamp(MIN_MS, MAX_MS),
        execution_max_wait_ms: first(
            pick(|l| l.execution_max_wait_ms),
            DEFAULTS.execution_max_wait_ms,
        )
        .clamp(MIN_MS, MAX_MS),
        max_queue_depth: first(pick(|l| l.max_queue_depth), DEFAULTS.max_queue_depth)
            .min(MAX_QUEUE_DEPTH),
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
    /// Ran past the execution bound.
    ExecutionTimeout,
}

impl Refusal {
    /// The typed error code.
    pub fn code(self) -> &'static str {
        match self {
            Self::QueueFull | Self::Hopeless { .. } => "RATE_LIMIT_QUEUE_FULL",
            Self::QueueTimeout => "RATE_LIMIT_QUEUE_TIMEOUT",
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
/// gate of `capacity` slots whose holders take `service_ms` on average: every
/// `capacity` requests ahead cost one service time.
pub fn expected_wait_ms(position: u64, capacity: u64, service_ms: u64) -> u64 {
    let rounds = (position / capacity.max(1)) + 1;
    rounds.saturating_mul(service_ms)
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

    fn layer(w: Option<u64>, e: Option<u64>, d: Option<u64>) -> Layer {
        Layer {
            max_wait_ms: w,
            execution_max_wait_ms: e,
            max_queue_depth: d,
        }
    }

    #[test]
    fn defaults_apply_when_no_layer_sets_a_value() {
        let none = Layer::default();
        assert_eq!(resolve(&none, &none, &none), DEFAULTS);
    }

    #[test]
    fn each_layer_wins_over_the_ones_below_it() {
        let env = layer(Some(1_000), Some(2_000), Some(3));
        let stored = layer(Some(10_000), None, Some(30));
        let conn = layer(None, None, Some(300));
        let none = Layer::default();
        assert_eq!(
            resolve(&none, &none, &env),
            Limits {
                max_wait_ms: 1_000,
                execution_max_wait_ms: 2_000,
                max_queue_depth: 3
            }
        );
        assert_eq!(
            resolve(&none, &stored, &env),
            Limits {
                max_wait_ms: 10_000,
                execution_max_wait_ms: 2_000,
                max_queue_depth: 30
            }
        );
        assert_eq!(
            resolve(&conn, &stored, &env),
            Limits {
                max_wait_ms: 10_000,
                execution_max_wait_ms: 2_000,
                max_queue_depth: 300
            }
        );
    }

    #[test]
    fn values_are_clamped() {
        let l = resolve(
            &layer(Some(0), Some(u64::MAX), Some(u64::MAX)),
            &Layer::default(),
            &Layer::default(),
        );
        assert_eq!(
            l,
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
        // Two slots, 3 s per request: the 5th in line (position 4) waits 3 rounds.
        assert_eq!(expected_wait_ms(4, 2, 3_000), 9_000);
        assert_eq!(judge_wait(&l, 4, 2, Some(3_000)), Ok(()));
        assert_eq!(
            judge_wait(&l, 6, 2, Some(3_000)),
            Err(Refusal::Hopeless {
                retry_after_ms: 12_000
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
        assert_eq!(Refusal::QueueTimeout.code(), "RATE_LIMIT_QUEUE_TIMEOUT");
        assert_eq!(
            (
                Refusal::ExecutionTimeout.code(),
                Refusal::ExecutionTimeout.status()
            ),
            ("RATE_LIMIT_EXECUTION_TIMEOUT", 504)
        );
    }
}
