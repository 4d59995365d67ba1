//! The stream watchdog of one attempt (SPEC R11, R12): a pure state machine over the
//! [`Progress`] of each relayed chunk and `now` (milliseconds on the attempt's
//! monotonic clock), that says when the attempt must be abandoned and why.
//!
//! Deadlines (each `None` when off):
//!
//! - **total**: `started + total_ms`, whatever the stream does.
//! - **first output** (R11): `budget_from + first_output_ms` until the first output
//!   event, where `budget_from` is the start, restarted by every reasoning event.
//!   Heartbeats restart nothing: a stream of pings alone trips it.
//! - **idle** (R11): after the first output, `budget_from + idle_ms`, `budget_from`
//!   restarted by every output or reasoning event.
//! - **throughput** (R12): once `warmup_ms` after the start and then one whole window
//!   have passed, the useful output (UTF-8 bytes of text that is not only whitespace)
//!   of the last window must reach `min_bytes_per_s × window`. While a tool call or
//!   reasoning is open the watchdog is paused; when the pause ends, what came before is
//!   forgotten and a whole new window must pass before it judges again. The window is
//!   [`SLOTS`] slots of `ceil(window_ms / SLOTS)` ms; it is judged at each slot
//!   boundary, over the slots of the last window (the current one included).
//!
//! A deadline trips at `now >= deadline` ([`Watchdog::check`]). An event is never
//! refused for coming late ([`Watchdog::observe`] does not trip): the shell reads the
//! upstream only as fast as the client takes the stream, so lateness may be the
//! client's. The shell checks when the upstream has nothing to give, at
//! [`Watchdog::next_check`]. What a trip means — another candidate before the attempt
//! committed, the client's terminal frame after — is the shell's.

use super::Progress;

/// Slots of the throughput window.
pub const SLOTS: usize = 32;

/// An attempt's deadlines; see the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub first_output_ms: Option<u64>,
    pub idle_ms: Option<u64>,
    pub total_ms: Option<u64>,
    pub throughput: Option<Throughput>,
}

/// The throughput watchdog's settings (R12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throughput {
    pub warmup_ms: u64,
    /// At least 1.
    pub window_ms: u64,
    pub min_bytes_per_s: u64,
}

/// Why an attempt was abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trip {
    /// No output within the first-output budget.
    FirstOutput { budget_ms: u64 },
    /// No output or reasoning for this long after the first output.
    Idle { idle_ms: u64 },
    /// The attempt ran past its total bound.
    Total { total_ms: u64 },
    /// Useful output of the last window below the minimum.
    Throughput { bytes: u64, window_ms: u64 },
}

/// The rolling window of useful bytes: slot index and bytes, per slot.
#[derive(Debug, Clone)]
struct Window {
    slot_ms: u64,
    slots: [(u64, u64); SLOTS],
}

impl Window {
    fn new(window_ms: u64) -> Self {
        let slots = u64::try_from(SLOTS).unwrap_or(u64::MAX);
        Self {
            slot_ms: window_ms.div_ceil(slots).max(1),
            slots: [(u64::MAX, 0); SLOTS],
        }
    }

    fn slot_of(&self, now: u64) -> u64 {
        now / self.slot_ms
    }

    fn place(index: u64) -> usize {
        usize::try_from(index % u64::try_from(SLOTS).unwrap_or(u64::MAX)).unwrap_or(0)
    }

    fn add(&mut self, now: u64, bytes: u64) {
        let index = self.slot_of(now);
        let slot = &mut self.slots[Self::place(index)];
        if slot.0 != index {
            *slot = (index, 0);
        }
        slot.1 = slot.1.saturating_add(bytes);
    }

    /// Bytes of the last [`SLOTS`] slots, the one holding `now` included.
    fn bytes(&self, now: u64) -> u64 {
        let current = self.slot_of(now);
        let oldest = current.saturating_sub(u64::try_from(SLOTS - 1).unwrap_or(0));
        self.slots
            .iter()
            .filter(|(i, _)| *i != u64::MAX && (oldest..=current).contains(i))
            .fold(0, |sum, (_, b)| sum.saturating_add(*b))
    }

    fn clear(&mut self) {
        self.slots = [(u64::MAX, 0); SLOTS];
    }

    /// The start of the slot after the one holding `now`.
    fn next_boundary(&self, now: u64) -> u64 {
        self.slot_of(now)
            .saturating_add(1)
            .saturating_mul(self.slot_ms)
    }
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct Watchdog {
    limits: Limits,
    started: u64,
    /// When the first-output or idle budget last (re)started.
    budget_from: u64,
    output_seen: bool,
    reasoning_seen: bool,
    paused: bool,
    /// Throughput is judged from here on (warm-up, or a pause's end, plus a window).
    judged_from: u64,
    window: Option<Window>,
}

impl Watchdog {
    /// The watchdog of an attempt started at `now`.
    pub fn new(limits: Limits, now: u64) -> Self {
        let judged_from = limits.throughput.map_or(u64::MAX, |t| {
            now.saturating_add(t.warmup_ms).saturating_add(t.window_ms)
        });
        Self {
            limits,
            started: now,
            budget_from: now,
            output_seen: false,
            reasoning_seen: false,
            paused: false,
            judged_from,
            window: limits.throughput.map(|t| Window::new(t.window_ms)),
        }
    }

    /// Whether an output event was seen.
    pub fn output_seen(&self) -> bool {
        self.output_seen
    }

    /// Notes a chunk's progress at `now`.
    pub fn observe(&mut self, p: &Progress, now: u64) {
        if p.output > 0 {
            self.output_seen = true;
        }
        if p.reasoning > 0 {
            self.reasoning_seen = true;
        }
        if p.output > 0 || p.reasoning > 0 {
            self.budget_from = self.budget_from.max(now);
        }
        let Some(t) = self.limits.throughput else {
            return;
        };
        let paused = p.tool_open || p.reasoning_open;
        if let Some(w) = &mut self.window {
            if self.paused && !paused {
                // The pause ended: judge a whole new window of unpaused time.
                w.clear();
                self.judged_from = self.judged_from.max(now.saturating_add(t.window_ms));
            }
            if p.text_bytes > 0 {
                w.add(now, p.text_bytes);
            }
        }
        self.paused = paused;
    }

    /// The output budget's deadline: first output (restarted by reasoning), or idle
    /// after it. A stream without a first-output budget (the last candidate's, or with
    /// it off) that has reasoned is bounded by the idle budget instead, so one that
    /// reasons and then stalls is still cut.
    fn content_deadline(&self) -> Option<(u64, Trip)> {
        let idle = (self.output_seen || self.reasoning_seen)
            .then_some(self.limits.idle_ms)
            .flatten()
            .map(|idle_ms| {
                (
                    self.budget_from.saturating_add(idle_ms),
                    Trip::Idle { idle_ms },
                )
            });
        if self.output_seen {
            return idle;
        }
        let first = self.limits.first_output_ms.map(|budget_ms| {
            (
                self.budget_from.saturating_add(budget_ms),
                Trip::FirstOutput { budget_ms },
            )
        });
        first.or(idle)
    }

    fn total_deadline(&self) -> Option<(u64, Trip)> {
        let total_ms = self.limits.total_ms?;
        Some((
            self.started.saturating_add(total_ms),
            Trip::Total { total_ms },
        ))
    }

    /// Whether the attempt must be abandoned at `now`, and why.
    pub fn check(&self, now: u64) -> Option<Trip> {
        for (deadline, trip) in [self.total_deadline(), self.content_deadline()]
            .into_iter()
            .flatten()
        {
            if now >= deadline {
                return Some(trip);
            }
        }
        let (t, w) = (self.limits.throughput?, self.window.as_ref()?);
        if self.paused || now < self.judged_from {
            return None;
        }
        let bytes = w.bytes(now);
        let wanted = u128::from(t.min_bytes_per_s) * u128::from(t.window_ms);
        (u128::from(bytes) * 1000 < wanted).then_some(Trip::Throughput {
            bytes,
            window_ms: t.window_ms,
        })
    }

    /// Whether the total bound alone has passed at `now` (checked with every chunk).
    pub fn check_total(&self, now: u64) -> Option<Trip> {
        let (deadline, trip) = self.total_deadline()?;
        (now >= deadline).then_some(trip)
    }

    /// The next time [`Self::check`] may trip, after `now`; `None` when nothing could.
    pub fn next_check(&self, now: u64) -> Option<u64> {
        let throughput = match (&self.window, self.paused) {
            (Some(w), false) => Some(self.judged_from.max(w.next_boundary(now))),
            _ => None,
        };
        [
            self.total_deadline().map(|(d, _)| d),
            self.content_deadline().map(|(d, _)| d),
            throughput,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: u64 = 80_000;
    const IDLE: u64 = 60_000;
    const TOTAL: u64 = 600_000;

    fn r11() -> Limits {
        Limits {
            first_output_ms: Some(FIRST),
            idle_ms: Some(IDLE),
            total_ms: Some(TOTAL),
            throughput: None,
        }
    }

    fn r12(warmup_ms: u64, window_ms: u64, min_bytes_per_s: u64) -> Limits {
        Limits {
            throughput: Some(Throughput {
                warmup_ms,
                window_ms,
                min_bytes_per_s,
            }),
            ..Limits::default()
        }
    }

    fn text(s: &str) -> Progress {
        let mut p = Progress::default();
        p.text(s);
        p
    }

    fn reasoning(open: bool) -> Progress {
        let mut p = Progress::default();
        p.reasoning("hm");
        p.reasoning_open = open;
        p
    }

    fn ping() -> Progress {
        let mut p = Progress::default();
        p.heartbeat();
        p
    }

    fn tool(open: bool) -> Progress {
        let mut p = Progress::default();
        p.tool(true, "");
        p.tool_open = open;
        p
    }

    #[test]
    fn the_first_output_budget_trips_at_exactly_its_end() {
        let w = Watchdog::new(r11(), 1_000);
        assert_eq!(w.next_check(1_000), Some(81_000));
        assert_eq!(w.check(80_999), None);
        assert_eq!(
            w.check(81_000),
            Some(Trip::FirstOutput { budget_ms: FIRST })
        );
    }

    #[test]
    fn heartbeats_alone_trip_the_first_output_budget() {
        let mut w = Watchdog::new(r11(), 0);
        for at in (0..80_000).step_by(5_000) {
            w.observe(&ping(), at);
        }
        assert_eq!(
            w.check(80_000),
            Some(Trip::FirstOutput { budget_ms: FIRST })
        );
        assert!(!w.output_seen());
    }

    #[test]
    fn empty_text_is_not_output() {
        let mut w = Watchdog::new(r11(), 0);
        w.observe(&text(""), 10);
        assert!(!w.output_seen());
        assert_eq!(
            w.check(80_000),
            Some(Trip::FirstOutput { budget_ms: FIRST })
        );
    }

    #[test]
    fn reasoning_restarts_the_budget_but_is_not_output() {
        let mut w = Watchdog::new(r11(), 0);
        w.observe(&reasoning(true), 70_000);
        assert!(!w.output_seen());
        assert_eq!(w.check(80_000), None);
        assert_eq!(w.next_check(80_000), Some(150_000));
        assert_eq!(
            w.check(150_000),
            Some(Trip::FirstOutput { budget_ms: FIRST })
        );
    }

    #[test]
    fn without_a_first_output_budget_reasoning_is_bounded_by_the_idle_budget() {
        let last = Limits {
            first_output_ms: None,
            ..r11()
        };
        let mut w = Watchdog::new(last, 0);
        // Nothing yet: only the total bound.
        w.observe(&ping(), 1_000);
        assert_eq!(w.next_check(1_000), Some(TOTAL));
        w.observe(&reasoning(true), 70_000);
        assert!(!w.output_seen());
        assert_eq!(w.next_check(70_000), Some(130_000));
        assert_eq!(w.check(129_999), None);
        assert_eq!(w.check(130_000), Some(Trip::Idle { idle_ms: 60_000 }));
    }

    #[test]
    fn after_the_first_output_the_idle_budget_applies() {
        let mut w = Watchdog::new(r11(), 0);
        w.observe(&text("hi"), 5_000);
        assert!(w.output_seen());
        assert_eq!(w.next_check(5_000), Some(65_000));
        w.observe(&ping(), 60_000);
        assert_eq!(w.check(64_999), None);
        assert_eq!(w.check(65_000), Some(Trip::Idle { idle_ms: IDLE }));
        w.observe(&text("more"), 64_000);
        assert_eq!(w.check(65_000), None);
        w.observe(&reasoning(false), 120_000);
        assert_eq!(w.check(179_999), None);
        assert_eq!(w.check(180_000), Some(Trip::Idle { idle_ms: IDLE }));
    }

    #[test]
    fn a_late_event_is_taken_not_refused() {
        let mut w = Watchdog::new(r11(), 0);
        w.observe(&text("late"), 95_000);
        assert_eq!(w.check(95_000), None);
        assert_eq!(w.next_check(95_000), Some(155_000));
    }

    #[test]
    fn the_total_bound_wins_whatever_the_stream_does() {
        let mut w = Watchdog::new(r11(), 0);
        for at in (0..=600_000).step_by(1_000) {
            w.observe(&text("x"), at);
        }
        assert_eq!(w.check(599_999), None);
        assert_eq!(w.check_total(599_999), None);
        assert_eq!(w.check(600_000), Some(Trip::Total { total_ms: TOTAL }));
        assert_eq!(
            w.check_total(600_000),
            Some(Trip::Total { total_ms: TOTAL })
        );
        assert_eq!(w.next_check(0), Some(600_000));
    }

    #[test]
    fn without_limits_nothing_trips() {
        let mut w = Watchdog::new(Limits::default(), 0);
        w.observe(&ping(), 1);
        assert_eq!(w.check(u64::MAX), None);
        assert_eq!(w.next_check(0), None);
    }

    #[test]
    fn the_last_candidate_has_no_first_output_budget_but_keeps_its_total() {
        let limits = Limits {
            first_output_ms: None,
            ..r11()
        };
        let w = Watchdog::new(limits, 0);
        assert_eq!(w.check(599_999), None);
        assert_eq!(w.next_check(0), Some(600_000));
    }

    #[test]
    fn throughput_is_judged_only_after_the_warmup_and_one_whole_window() {
        // 30 s warm-up, 32 s window (1 s slots), 1 byte/s.
        let w = Watchdog::new(r12(30_000, 32_000, 1), 0);
        assert_eq!(w.next_check(0), Some(62_000));
        assert_eq!(w.check(61_999), None);
        assert_eq!(
            w.check(62_000),
            Some(Trip::Throughput {
                bytes: 0,
                window_ms: 32_000
            })
        );
    }

    #[test]
    fn enough_useful_bytes_in_the_window_keep_the_stream() {
        let mut w = Watchdog::new(r12(30_000, 32_000, 1), 0);
        w.observe(&text(&"a".repeat(32)), 31_000);
        assert_eq!(w.check(62_000), None);
        // The slot of 31 s is the window's oldest at 62 s and leaves it at 63 s.
        assert_eq!(w.next_check(62_000), Some(63_000));
        assert_eq!(
            w.check(63_000),
            Some(Trip::Throughput {
                bytes: 0,
                window_ms: 32_000
            })
        );
    }

    #[test]
    fn one_byte_short_of_the_minimum_trips() {
        let mut w = Watchdog::new(r12(0, 32_000, 1), 0);
        w.observe(&text(&"a".repeat(31)), 1_000);
        assert_eq!(
            w.check(32_000),
            Some(Trip::Throughput {
                bytes: 31,
                window_ms: 32_000
            })
        );
    }

    #[test]
    fn whitespace_and_usage_only_chunks_are_not_useful_output() {
        let mut w = Watchdog::new(r12(0, 32_000, 1), 0);
        w.observe(&text(&" \n".repeat(40)), 1_000);
        w.observe(&Progress::default(), 2_000);
        assert_eq!(
            w.check(32_000),
            Some(Trip::Throughput {
                bytes: 0,
                window_ms: 32_000
            })
        );
    }

    #[test]
    fn an_open_tool_call_or_reasoning_pauses_it_and_its_end_restarts_the_window() {
        for opened in [tool(true), reasoning(true)] {
            let mut w = Watchdog::new(r12(0, 32_000, 1), 0);
            w.observe(&text(&"a".repeat(100)), 0);
            w.observe(&opened, 10_000);
            assert_eq!(w.check(100_000), None);
            assert_eq!(w.next_check(100_000), None);
            // Closed at 100 s: the bytes before are forgotten, a new window must pass.
            w.observe(&Progress::default(), 100_000);
            assert_eq!(w.check(131_999), None);
            assert_eq!(w.next_check(100_000), Some(132_000));
            assert_eq!(
                w.check(132_000),
                Some(Trip::Throughput {
                    bytes: 0,
                    window_ms: 32_000
                })
            );
        }
    }

    #[test]
    fn throughput_and_the_output_budgets_are_independent() {
        let limits = Limits {
            throughput: r12(0, 32_000, 1).throughput,
            ..r11()
        };
        let mut w = Watchdog::new(limits, 0);
        w.observe(&text("ok"), 1_000);
        assert_eq!(w.next_check(1_000), Some(32_000));
        assert_eq!(
            w.check(32_000),
            Some(Trip::Throughput {
                bytes: 2,
                window_ms: 32_000
            })
        );
    }

    #[test]
    fn huge_values_saturate() {
        let limits = Limits {
            first_output_ms: Some(u64::MAX),
            idle_ms: Some(u64::MAX),
            total_ms: Some(u64::MAX),
            throughput: Some(Throughput {
                warmup_ms: u64::MAX,
                window_ms: u64::MAX,
                min_bytes_per_s: u64::MAX,
            }),
        };
        let mut w = Watchdog::new(limits, u64::MAX - 1);
        w.observe(&text("x"), u64::MAX);
        assert_eq!(w.check(u64::MAX - 2), None);
        assert!(w.next_check(u64::MAX).is_some());
    }
}
