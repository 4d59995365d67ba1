//! Sliding-window counters (SPEC Q3).
//!
//! A window of length `W` is cut into [`SLOTS`] equal slots aligned to the Unix epoch
//! (`slot = floor(now / (W / SLOTS))`). A counter keeps the last `SLOTS + 1` slots. The
//! value over the window `(now - W, now]` is the sum of the `SLOTS` newest slots, which
//! lie wholly inside it, plus the oldest slot — the one the window's start falls into —
//! weighted by the part of it still inside the window.
//!
//! **Error bound.** The estimate differs from the exact sum of what was recorded in
//! `(now - W, now]` by at most what was recorded in that one straddling slot, a
//! `1/SLOTS` (0.78 %) slice of the window's time, whatever the shape of the traffic; it
//! is exact when the traffic inside that slot was uniform. The two-bucket counter of the
//! source design has the same uniformity assumption over a whole window, so its worst
//! case is an error of the entire previous window's consumption.
//!
//! Months are fixed 30-day windows (2 592 000 000 ms), like the source system: provider
//! quotas that say "monthly" reset on their own schedule, which the provider's reset
//! headers report, and a fixed length keeps every window a whole number of slots.
//!
//! A counter reads no clock (every call takes `now`) and knows nothing of keys, pools or
//! limits.

use crate::UnixMillis;
use serde::{Deserialize, Serialize};

/// Slots per window. 128 makes every window length divide evenly (the 5-hour window has
/// 140 625 ms slots) and keeps the error bound under 1 % of the window while a counter
/// stays at 2 KiB.
pub const SLOTS: u64 = 128;

/// Entries kept per counter: the `SLOTS` inside the window and the straddling one.
const RING: usize = SLOTS as usize + 1;

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

/// The rolling windows a dimension can be measured over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Window {
    #[serde(rename = "5h")]
    FiveHours,
    #[serde(rename = "hourly")]
    Hourly,
    #[serde(rename = "daily")]
    Daily,
    #[serde(rename = "weekly")]
    Weekly,
    #[serde(rename = "monthly")]
    Monthly,
}

impl Window {
    pub const ALL: [Self; 5] = [
        Self::FiveHours,
        Self::Hourly,
        Self::Daily,
        Self::Weekly,
        Self::Monthly,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::FiveHours => "5h",
            Self::Hourly => "hourly",
            Self::Daily => "daily",
            Self::Weekly => "weekly",
            Self::Monthly => "monthly",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.as_str() == s)
    }

    /// The window's length; a month is 30 days.
    pub fn length_ms(self) -> u64 {
        match self {
            Self::FiveHours => 5 * HOUR_MS,
            Self::Hourly => HOUR_MS,
            Self::Daily => DAY_MS,
            Self::Weekly => 7 * DAY_MS,
            Self::Monthly => 30 * DAY_MS,
        }
    }

    /// The length of one slot.
    pub fn slot_ms(self) -> u64 {
        self.length_ms() / SLOTS
    }

    /// The slot `now` falls into.
    pub fn slot_of(self, now: UnixMillis) -> u64 {
        now / self.slot_ms()
    }
}

/// Consumption over one rolling window: a ring of the newest `SLOTS + 1` slots, and
/// their running sum, so reading the value on every request costs a few operations
/// instead of a pass over the ring.
#[derive(Debug, Clone, PartialEq)]
pub struct SlidingCounter {
    window: Window,
    /// `(slot index, amount)`; entry `i` holds the slot with `index % RING == i`, or a
    /// stale one that reads as zero.
    ring: Box<[(u64, f64)]>,
    /// The newest slot written; `None` before the first write.
    head: Option<u64>,
    /// The sum of slots `head - SLOTS ..= head`.
    sum: f64,
}

impl SlidingCounter {
    pub fn new(window: Window) -> Self {
        Self {
            window,
            ring: vec![(u64::MAX, 0.0); RING].into_boxed_slice(),
            head: None,
            sum: 0.0,
        }
    }

    /// Moves the newest slot forward to `to`, taking the slots that leave
    /// `to - SLOTS ..= to` out of the running sum.
    fn advance(&mut self, to: u64) {
        match self.head {
            Some(head) if to <= head => return,
            Some(head) if to - head <= SLOTS => {
                for s in head.saturating_sub(SLOTS)..to.saturating_sub(SLOTS) {
                    self.sum -= self.entry(s);
                }
            }
            _ => self.sum = 0.0,
        }
        self.head = Some(to);
    }

    pub fn window(&self) -> Window {
        self.window
    }

    /// The amount recorded in `slot` (0 once the ring has moved past it).
    pub fn slot_amount(&self, slot: u64) -> f64 {
        self.entry(slot)
    }

    fn entry(&self, slot: u64) -> f64 {
        let (idx, value) = self.ring[ring_pos(slot)];
        if idx == slot {
            value
        } else {
            0.0
        }
    }

    /// Adds `amount` (negative to take back) to the slot `slot`, if that slot is still
    /// part of a window ending at or after `now`; older slots no longer count anywhere.
    pub fn add_to_slot(&mut self, now: UnixMillis, slot: u64, amount: f64) {
        let current = self.window.slot_of(now);
        if slot + SLOTS < current || slot > current {
            return;
        }
        self.advance(slot);
        let entry = &mut self.ring[ring_pos(slot)];
        if entry.0 != slot {
            *entry = (slot, 0.0);
        }
        entry.1 += amount;
        // A slot older than the newest minus SLOTS is outside the sum's span (it can
        // only be written when `now` lags behind an earlier write).
        if self.head.is_some_and(|h| slot + SLOTS >= h) {
            self.sum += amount;
        }
    }

    /// Records `amount` at `now`.
    pub fn add(&mut self, now: UnixMillis, amount: f64) {
        self.add_to_slot(now, self.window.slot_of(now), amount);
    }

    /// The slots that still count at `now`, oldest first, as `(slot, amount)`.
    pub fn live_slots(&self, now: UnixMillis) -> impl Iterator<Item = (u64, f64)> + '_ {
        let current = self.window.slot_of(now);
        (current.saturating_sub(SLOTS)..=current)
            .map(|s| (s, self.entry(s)))
            .filter(|&(_, v)| v != 0.0)
    }

    /// The consumption in `(now - W, now]`, estimated as the module describes.
    pub fn value(&self, now: UnixMillis) -> f64 {
        let slot_ms = self.window.slot_ms();
        let current = now / slot_ms;
        let elapsed = (now - current * slot_ms) as f64 / slot_ms as f64;
        let Some(head) = self.head else {
            return 0.0;
        };
        // The common case — `now` in the newest slot written or the one after — reads
        // the running sum; anything else (a long idle counter, a clock that stepped
        // back) sums the ring.
        if current >= head && current - head <= 1 && current >= SLOTS {
            let mut live = self.sum;
            if current > head {
                live -= self.entry(head.saturating_sub(SLOTS));
            }
            return live - self.entry(current - SLOTS) * elapsed;
        }
        estimate(
            current,
            elapsed,
            |s| self.entry(s),
            current.saturating_sub(SLOTS),
        )
    }

    /// How long until the value falls to `bound` or below if nothing more is recorded:
    /// `Some(0)` when it already is, `None` when it never will (a negative bound).
    ///
    /// Never more than the window's length: whatever was recorded up to `now` has left
    /// the exact window `(t - W, t]` by `now + W`. The counter phases its straddling slot
    /// out linearly and so would see traffic from the current slot for up to one slot
    /// longer; a client told to come back then would wait longer than it must.
    pub fn time_until_at_most(&self, now: UnixMillis, bound: f64) -> Option<u64> {
        self.time_until_phased_out(now, bound)
            .map(|ms| ms.min(self.window.length_ms()))
    }

    fn time_until_phased_out(&self, now: UnixMillis, bound: f64) -> Option<u64> {
        if bound < 0.0 {
            return None;
        }
        if self.value(now) <= bound {
            return Some(0);
        }
        let slot_ms = self.window.slot_ms();
        let current = now / slot_ms;
        // During slot `current + k` the value is `full_k + oldest_k * (1 - elapsed)`,
        // where `full_k` sums the slots still wholly inside and `oldest_k` is the slot
        // being phased out. It falls linearly inside each slot and steps at boundaries.
        for k in 0..=SLOTS {
            let slot = current + k;
            let oldest = slot.saturating_sub(SLOTS);
            let oldest_v = if slot >= SLOTS {
                self.entry(oldest)
            } else {
                0.0
            };
            let full: f64 = ((oldest + 1)..=current).map(|s| self.entry(s)).sum();
            let start_elapsed = if k == 0 {
                (now - current * slot_ms) as f64 / slot_ms as f64
            } else {
                0.0
            };
            if full + oldest_v * (1.0 - start_elapsed) <= bound {
                return Some((slot * slot_ms).saturating_sub(now));
            }
            if full <= bound {
                // Solve full + oldest_v * (1 - e) = bound for e inside this slot.
                let e = 1.0 - (bound - full) / oldest_v;
                let at = slot * slot_ms + (e * slot_ms as f64).ceil() as u64;
                return Some(at.saturating_sub(now));
            }
        }
        // Every recorded slot has left the window by now.
        Some(((current + SLOTS + 1) * slot_ms).saturating_sub(now))
    }
}

fn ring_pos(slot: u64) -> usize {
    (slot % RING as u64) as usize
}

/// The window estimate from slot amounts. `elapsed` is the fraction of the current slot
/// that has passed; `first` the oldest slot to read. The Redis store's script computes
/// the same quantity from a running sum; the two agree exactly for whole-number amounts
/// (requests, tokens) and to the last bits for fractional ones.
fn estimate(current: u64, elapsed: f64, amount: impl Fn(u64) -> f64, first: u64) -> f64 {
    let mut total = 0.0;
    for slot in first..=current {
        let v = amount(slot);
        if slot + SLOTS == current {
            total += v * (1.0 - elapsed);
        } else {
            total += v;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn every_window_is_a_whole_number_of_slots() {
        for w in Window::ALL {
            assert_eq!(w.length_ms() % SLOTS, 0, "{}", w.as_str());
            assert_eq!(Window::parse(w.as_str()), Some(w));
        }
        assert_eq!(Window::FiveHours.slot_ms(), 140_625);
        assert_eq!(Window::Monthly.length_ms(), 2_592_000_000);
        assert_eq!(Window::parse("yearly"), None);
    }

    #[test]
    fn recent_consumption_counts_in_full() {
        let mut c = SlidingCounter::new(Window::Hourly);
        c.add(T0, 3.0);
        c.add(T0 + 1_000, 4.0);
        assert_eq!(c.value(T0 + 2_000), 7.0);
    }

    #[test]
    fn consumption_leaves_the_window_after_its_length() {
        let w = Window::Hourly;
        let start = w.slot_of(T0) * w.slot_ms();
        let mut c = SlidingCounter::new(w);
        c.add(start, 10.0);
        // Still wholly inside one window length later minus one slot.
        assert_eq!(c.value(start + w.length_ms() - 1), 10.0);
        // 2/5 of the straddling slot has passed: 3/5 of the amount still counts.
        assert_eq!(c.value(start + w.length_ms() + w.slot_ms() * 2 / 5), 6.0);
        assert_eq!(c.value(start + w.length_ms() + w.slot_ms()), 0.0);
    }

    #[test]
    fn settlement_adjusts_the_reserved_slot_and_ignores_expired_ones() {
        let w = Window::Hourly;
        let mut c = SlidingCounter::new(w);
        let slot = w.slot_of(T0);
        c.add(T0, 5.0);
        c.add_to_slot(T0 + 60_000, slot, -3.0);
        assert_eq!(c.value(T0 + 60_000), 2.0);
        let later = T0 + 2 * w.length_ms();
        c.add_to_slot(later, slot, 100.0);
        assert_eq!(c.value(later), 0.0);
        assert_eq!(c.live_slots(later).count(), 0);
    }

    #[test]
    fn time_until_at_most_finds_the_moment_the_value_falls_to_the_bound() {
        let w = Window::Hourly;
        let s = w.slot_ms();
        let start = w.slot_of(T0) * s;
        let mut c = SlidingCounter::new(w);
        c.add(start, 10.0);
        c.add(start + 10 * s, 6.0);
        let now = start + 20 * s;
        assert_eq!(c.value(now), 16.0);
        assert_eq!(c.time_until_at_most(now, 16.0), Some(0));
        // The first 10 phase out during slot start+128: at 4/10 of it, 6 + 6 = 12 remain.
        assert_eq!(
            c.time_until_at_most(now, 12.0),
            Some(start + 128 * s + (s * 4 / 10) - now)
        );
        // Everything is gone once the later slot has phased out as well.
        assert_eq!(c.time_until_at_most(now, 0.0), Some(start + 139 * s - now));
        assert_eq!(c.time_until_at_most(now, -1.0), None);
    }

    #[test]
    fn time_until_at_most_never_exceeds_the_window_at_slot_boundaries() {
        for w in Window::ALL {
            let s = w.slot_ms();
            let start = w.slot_of(T0) * s;
            // Booked at the first and the last millisecond of a slot, asked at the same
            // moment and one slot later.
            for (booked_at, asked_at) in [
                (start, start),
                (start + s - 1, start + s - 1),
                (start, start + s - 1),
                (start + s - 1, start + s),
            ] {
                let mut c = SlidingCounter::new(w);
                c.add(booked_at, 10.0);
                // The counter alone would phase the slot out until up to a slot past that.
                assert!(c.time_until_phased_out(asked_at, 0.0) >= Some(w.length_ms()));
                assert_eq!(
                    c.time_until_at_most(asked_at, 0.0),
                    Some(w.length_ms()),
                    "{w:?} booked {booked_at} asked {asked_at}"
                );
                let half = c.time_until_at_most(asked_at, 5.0).unwrap();
                assert!(half <= w.length_ms(), "{w:?} {half}");
                assert!(half > 0);
            }
        }
    }

    /// The exact sum of amounts recorded in `(now - W, now]`.
    fn exact(events: &[(u64, f64)], w: Window, now: u64) -> f64 {
        events
            .iter()
            .filter(|(t, _)| *t <= now && *t + w.length_ms() > now)
            .map(|(_, a)| a)
            .sum()
    }

    /// What was recorded in the slot the window's start falls into.
    fn straddling(events: &[(u64, f64)], w: Window, now: u64) -> f64 {
        let oldest = w.slot_of(now).saturating_sub(SLOTS);
        events
            .iter()
            .filter(|(t, _)| w.slot_of(*t) == oldest)
            .map(|(_, a)| a)
            .sum()
    }

    #[test]
    fn uniform_traffic_is_counted_exactly() {
        let w = Window::Hourly;
        let mut c = SlidingCounter::new(w);
        let mut events = Vec::new();
        // One unit every 1 125 ms: 25 per slot, evenly spread.
        for i in 0..10_000u64 {
            let t = T0 + i * 1_125;
            c.add(t, 1.0);
            events.push((t, 1.0));
        }
        let now = T0 + 10_000 * 1_125;
        let err = (c.value(now) - exact(&events, w, now)).abs();
        assert!(err <= 1.0, "error {err}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn error_is_bounded_by_the_straddling_slot(
            gaps in proptest::collection::vec((0u64..120_000, 1u32..50), 1..300),
            probe in 0u64..7_200_000,
        ) {
            let w = Window::Hourly;
            let mut c = SlidingCounter::new(w);
            let mut events = Vec::new();
            let mut t = T0;
            for (gap, amount) in gaps {
                t += gap;
                c.add(t, f64::from(amount));
                events.push((t, f64::from(amount)));
            }
            let now = t + probe;
            let est = c.value(now);
            let truth = exact(&events, w, now);
            let bound = straddling(&events, w, now);
            prop_assert!((est - truth).abs() <= bound + 1e-9,
                "estimate {} exact {} bound {}", est, truth, bound);
            // The estimate never undercounts what is wholly inside the window.
            prop_assert!(est + 1e-9 >= truth - bound);
        }

        /// The running sum reads what a full pass over the ring reads, through
        /// reservations, settlements into older slots (also negative) and idle gaps.
        #[test]
        fn the_running_sum_agrees_with_a_full_pass(
            ops in proptest::collection::vec(
                (0u64..4 * 28_125, 0u64..3, -5i32..50, 0u64..200_000),
                1..300,
            ),
        ) {
            let w = Window::Hourly;
            let mut c = SlidingCounter::new(w);
            let mut t = T0;
            for (gap, back, amount, idle) in ops {
                // Mostly steps inside a slot or to the next; sometimes a long idle gap.
                t += if idle > 195_000 { idle * 40 } else { gap };
                let slot = w.slot_of(t).saturating_sub(back);
                c.add_to_slot(t, slot, f64::from(amount));
                for probe in [t, t + gap, t + w.slot_ms()] {
                    let current = w.slot_of(probe);
                    let elapsed = (probe - current * w.slot_ms()) as f64 / w.slot_ms() as f64;
                    let full = estimate(current, elapsed, |s| c.entry(s), current.saturating_sub(SLOTS));
                    // The same arithmetic in another order: equal up to rounding.
                    let fast = c.value(probe);
                    prop_assert!((fast - full).abs() <= 1e-9 * full.abs().max(1.0),
                        "running sum {} full pass {}", fast, full);
                }
            }
        }

        #[test]
        fn time_until_at_most_is_exact_about_the_value(
            amounts in proptest::collection::vec(0u32..20, 1..40),
            bound in 0u32..200,
        ) {
            let w = Window::Hourly;
            let s = w.slot_ms();
            let mut c = SlidingCounter::new(w);
            let mut now = T0;
            for a in amounts {
                c.add(now, f64::from(a));
                now += s * 3 + 17;
            }
            let bound = f64::from(bound);
            let wait = c.time_until_at_most(now, bound);
            prop_assert!(wait.is_some());
            let wait = wait.unwrap_or_default();
            prop_assert!(wait <= w.length_ms());
            // At the window's length everything recorded so far has left the exact
            // window, even where the counter still phases its straddling slot out.
            if wait < w.length_ms() {
                prop_assert!(c.value(now + wait) <= bound + 1e-9);
            }
            if wait > 0 {
                prop_assert!(c.value(now + wait - 1) > bound - 1e-9);
            }
        }
    }
}
