//! The one place that reads time. Decisions take `now` as an argument; the shell reads
//! the wall clock here, once per request at the edge ([`RequestClock`]), and measures
//! elapsed time on tokio's clock ([`Stopwatch`]) — so tests can substitute a manual wall
//! clock, and a server on one runtime can run under tokio's paused time.
//!
//! Clocks only report time: nothing here sleeps, schedules work or imports the rest of
//! the crate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use switchyard_core::UnixMillis;

/// Wall-clock time source.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> UnixMillis;

    /// Whether time passes on its own between reads (a manual clock's does not: it
    /// moves only when the test moves it).
    fn flows(&self) -> bool {
        true
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[expect(
        clippy::disallowed_methods,
        reason = "the clock module is the one place allowed to read the system time"
    )]
    fn now_ms(&self) -> UnixMillis {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock tests move by hand.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start: UnixMillis) -> Self {
        Self(AtomicU64::new(start))
    }

    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(
            u64::try_from(by.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    pub fn set(&self, now: UnixMillis) {
        self.0.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMillis {
        self.0.load(Ordering::SeqCst)
    }

    fn flows(&self) -> bool {
        false
    }
}

/// Measures elapsed durations (latency, time to first byte, waits) on tokio's monotonic
/// clock, which tests may pause and advance.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(tokio::time::Instant);

impl Stopwatch {
    pub fn start() -> Self {
        Self(tokio::time::Instant::now())
    }

    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    pub fn elapsed_ms(&self) -> u64 {
        whole_ms(self.0.elapsed())
    }

    /// Started at `at`, an instant already read.
    pub fn started_at(at: tokio::time::Instant) -> Self {
        Self(at)
    }

    /// The time from the start to `at`, an instant read since (zero for one before).
    pub fn until(&self, at: tokio::time::Instant) -> Duration {
        at.saturating_duration_since(self.0)
    }

    /// [`Self::until`] in whole milliseconds.
    pub fn until_ms(&self, at: tokio::time::Instant) -> u64 {
        whole_ms(self.until(at))
    }

    /// The instant `ms` milliseconds after the start.
    pub fn at_ms(&self, ms: u64) -> tokio::time::Instant {
        self.0 + Duration::from_millis(ms)
    }
}

/// `d` in whole milliseconds.
fn whole_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One request's time: the wall clock read once, at the edge, advanced by the elapsed
/// time since (when the clock flows). Every `now` a request's decisions take comes
/// from here, and so do its latency and time to first byte.
#[derive(Debug, Clone, Copy)]
pub struct RequestClock {
    at: UnixMillis,
    started: Stopwatch,
    flows: bool,
}

impl RequestClock {
    /// Reads `clock` once.
    pub fn start(clock: &dyn Clock) -> Self {
        Self {
            at: clock.now_ms(),
            started: Stopwatch::start(),
            flows: clock.flows(),
        }
    }

    /// When the request arrived.
    pub fn arrived_ms(&self) -> UnixMillis {
        self.at
    }

    /// Milliseconds since the request arrived, on the monotonic clock.
    pub fn elapsed_ms(&self) -> u64 {
        self.started.elapsed_ms()
    }

    /// Now, for the request's decisions.
    pub fn now_ms(&self) -> UnixMillis {
        if self.flows {
            self.at.saturating_add(self.started.elapsed_ms())
        } else {
            self.at
        }
    }

    /// The request's time at `at`, an instant read since it arrived: [`Self::now_ms`]
    /// for a step that reads the monotonic clock for its own timing too.
    pub fn ms_at(&self, at: tokio::time::Instant) -> UnixMillis {
        if self.flows {
            self.at.saturating_add(self.started.until_ms(at))
        } else {
            self.at
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_clock_reads_the_wall_clock_once_and_then_follows_elapsed_time() {
        let manual = ManualClock::new(1_000);
        let flowing = RequestClock {
            at: 1_000,
            started: Stopwatch::start(),
            flows: true,
        };
        let frozen = RequestClock::start(&manual);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(flowing.now_ms(), 1_250);
        assert_eq!(flowing.arrived_ms(), 1_000);
        assert_eq!(flowing.elapsed_ms(), 250);
        // A manual clock moves only when told, and the request saw it once.
        manual.advance(Duration::from_secs(5));
        assert_eq!(frozen.now_ms(), 1_000);
        // Its latency still follows the monotonic clock.
        assert_eq!(frozen.elapsed_ms(), 250);
        assert_eq!(RequestClock::start(&manual).now_ms(), 6_000);
        // An instant read once serves the request's time and a step's timing alike.
        let watch = Stopwatch::start();
        tokio::time::sleep(Duration::from_millis(40)).await;
        let at = tokio::time::Instant::now();
        assert_eq!(flowing.ms_at(at), 1_290);
        assert_eq!(frozen.ms_at(at), 1_000);
        assert_eq!(watch.until_ms(at), 40);
        assert_eq!(
            Stopwatch::started_at(at).until_ms(at - Duration::from_millis(5)),
            0
        );
        assert!(SystemClock.flows());
        assert!(!manual.flows());
    }
}
