//! One pool's consumption, as a state machine: reserve, then settle (SPEC Q4, Q6).
//!
//! `reserve` decides on every dimension and, when the request is admitted, adds its
//! estimated cost to the key's and the pool's counters in the same step, so two
//! requests can never both pass a check that only one of them fits. `settle` moves a
//! reservation to the actual cost (also partially, as a stream reports usage), and
//! `release` takes it back. Amounts land in the slot the reservation was made in, so a
//! settlement never moves consumption in time.
//!
//! The ledger holds no time source and does no I/O; the SQLite store keeps one per pool
//! behind a mutex and persists its slots, the Redis store runs the same arithmetic in a
//! server-side script.

use super::burn::{BurnRate, BurnReport};
use super::decide::{decide, Decision, DimensionInput, Share};
use super::plan::Dimension;
use super::pool::PerDimension;
use super::window::SlidingCounter;
use crate::{FastMap, UnixMillis};

/// What a reservation holds: per dimension, the slot it was booked into and the amount
/// currently booked there.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    pub key_id: String,
    pub slots: PerDimension<u64>,
    pub booked: PerDimension<f64>,
}

/// One key's counters, one per pool dimension.
#[derive(Debug, Clone)]
struct KeyState {
    counters: Vec<SlidingCounter>,
    burn: Vec<BurnRate>,
}

/// The per-request inputs `reserve` needs besides the counters.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub key_id: &'a str,
    pub share: Share,
    /// Per dimension: the key's cap in that dimension's unit, if any.
    pub caps: &'a [Option<f64>],
    /// Per dimension: estimated cost.
    pub costs: &'a [f64],
    /// Per dimension: a provider's recent used fraction, if any.
    pub signals: &'a [Option<f64>],
    pub saturation_threshold: f64,
    /// A running stream's next increment rather than a new request: dimensions it
    /// does not charge are not judged (see [`DimensionInput::for_growth`]).
    pub growth: bool,
}

/// A persisted slot: `(key id, dimension index, slot, amount)`.
pub type SlotRow = (String, usize, u64, f64);

#[derive(Debug, Clone)]
pub struct PoolLedger {
    dims: Vec<Dimension>,
    keys: FastMap<String, KeyState>,
    totals: Vec<SlidingCounter>,
    /// Slots changed since the last [`PoolLedger::take_dirty`], for write-behind: per
    /// key, `(dimension, slot)` pairs, each once. Marking a key already listed
    /// allocates nothing.
    dirty: FastMap<String, Vec<(usize, u64)>>,
}

impl PoolLedger {
    pub fn new(dims: Vec<Dimension>) -> Self {
        let totals = dims.iter().map(|d| SlidingCounter::new(d.window)).collect();
        Self {
            dims,
            keys: FastMap::default(),
            totals,
            dirty: FastMap::default(),
        }
    }

    pub fn dimensions(&self) -> &[Dimension] {
        &self.dims
    }

    /// Runs `f` on the key's state, made for a key not seen before: a known key's is
    /// found with one lookup, and its owned id is made only when it is new.
    fn with_key<R>(
        keys: &mut FastMap<String, KeyState>,
        dims: &[Dimension],
        key_id: &str,
        f: impl FnOnce(&mut KeyState) -> R,
    ) -> R {
        if let Some(state) = keys.get_mut(key_id) {
            return f(state);
        }
        let mut state = KeyState {
            counters: dims.iter().map(|d| SlidingCounter::new(d.window)).collect(),
            burn: vec![BurnRate::default(); dims.len()],
        };
        let out = f(&mut state);
        keys.insert(key_id.to_owned(), state);
        out
    }

    /// Marks the key's `(dimension, slot)` pairs for writing, with one lookup.
    fn mark(&mut self, key_id: &str, marks: impl IntoIterator<Item = (usize, u64)>) {
        if let Some(marked) = self.dirty.get_mut(key_id) {
            for m in marks {
                if !marked.contains(&m) {
                    marked.push(m);
                }
            }
            return;
        }
        let fresh: Vec<(usize, u64)> = marks.into_iter().collect();
        if !fresh.is_empty() {
            self.dirty.insert(key_id.to_owned(), fresh);
        }
    }

    /// Per dimension: `(key's consumption, pool's consumption)` at `now`.
    pub fn peek(&self, now: UnixMillis, key_id: &str) -> PerDimension<(f64, f64)> {
        let key = self.keys.get(key_id);
        self.totals
            .iter()
            .enumerate()
            .map(|(i, total)| {
                let mine = key.map_or(0.0, |k| k.counters[i].value(now));
                (mine, total.value(now))
            })
            .collect()
    }

    /// Decides, and books the estimated cost when admitted; with the counters it
    /// decided on, as [`PoolLedger::peek`] gives them.
    pub fn reserve(
        &mut self,
        now: UnixMillis,
        ask: Ask<'_>,
    ) -> (Decision, Option<Reservation>, PerDimension<(f64, f64)>) {
        let peeked = self.peek(now, ask.key_id);
        let inputs: PerDimension<DimensionInput> = peeked
            .iter()
            .enumerate()
            .map(|(i, &(consumed, total))| DimensionInput {
                limit: self.dims[i].limit,
                consumed,
                total,
                signal: ask.signals.get(i).copied().flatten(),
                cost: ask.costs.get(i).copied().unwrap_or(0.0),
                cap: ask.caps.get(i).copied().flatten(),
            })
            .map(|d| if ask.growth { d.for_growth() } else { d })
            .collect();
        let decision = decide(&inputs, ask.share, ask.saturation_threshold);
        if !decision.admitted() {
            return (decision, None, peeked);
        }
        let slots: PerDimension<u64> = self.dims.iter().map(|d| d.window.slot_of(now)).collect();
        let booked: PerDimension<f64> = inputs.iter().map(|d| d.cost).collect();
        Self::with_key(&mut self.keys, &self.dims, ask.key_id, |key| {
            for ((c, slot), amount) in key.counters.iter_mut().zip(&slots).zip(&booked) {
                c.add_to_slot(now, *slot, *amount);
            }
        });
        for ((t, slot), amount) in self.totals.iter_mut().zip(&slots).zip(&booked) {
            t.add_to_slot(now, *slot, *amount);
        }
        self.mark(ask.key_id, slots.iter().copied().enumerate());
        let reservation = Reservation {
            key_id: ask.key_id.to_owned(),
            slots,
            booked,
        };
        (decision, Some(reservation), peeked)
    }

    /// Moves the reservation to `actual` per dimension. Called with the running total as
    /// usage arrives and once more at the end; each call books only the difference.
    pub fn settle(&mut self, now: UnixMillis, reservation: &mut Reservation, actual: &[f64]) {
        if reservation.slots.len() != self.dims.len() {
            // The pool's dimensions changed since the reservation; its slots belong to
            // counters that no longer exist.
            return;
        }
        let target = |i: usize| actual.get(i).copied().unwrap_or(0.0).max(0.0);
        // The slots whose amount moves are marked before the amounts move.
        let moved = reservation
            .booked
            .iter()
            .zip(&reservation.slots)
            .enumerate()
            .filter(|&(i, (booked, _))| target(i) != *booked)
            .map(|(i, (_, slot))| (i, *slot));
        self.mark(&reservation.key_id, moved);
        let Reservation {
            key_id,
            slots,
            booked,
        } = reservation;
        let totals = &mut self.totals;
        Self::with_key(&mut self.keys, &self.dims, key_id, |key| {
            for (i, (booked, slot)) in booked.iter_mut().zip(slots.iter()).enumerate() {
                let delta = target(i) - *booked;
                *booked = target(i);
                if delta != 0.0 {
                    key.counters[i].add_to_slot(now, *slot, delta);
                    totals[i].add_to_slot(now, *slot, delta);
                }
            }
        });
    }

    /// Feeds a finished request's actual cost into the key's burn rates.
    pub fn observe_burn(&mut self, now: UnixMillis, key_id: &str, actual: &[f64]) {
        Self::with_key(&mut self.keys, &self.dims, key_id, |key| {
            for (burn, amount) in key.burn.iter_mut().zip(actual) {
                burn.observe(now, *amount);
            }
        });
    }

    /// Takes the reservation back entirely (failed request, client gone before usage).
    pub fn release(&mut self, now: UnixMillis, reservation: &mut Reservation) {
        let zeros: PerDimension<f64> = smallvec::smallvec![0.0; reservation.booked.len()];
        self.settle(now, reservation, &zeros);
    }

    /// How long until the key's (or the pool's) counter of dimension `dim` falls to
    /// `bound`.
    pub fn time_until(
        &self,
        now: UnixMillis,
        key_id: Option<&str>,
        dim: usize,
        bound: f64,
    ) -> Option<u64> {
        let counter = match key_id {
            Some(k) => self.keys.get(k).map(|s| &s.counters[dim]),
            None => self.totals.get(dim),
        };
        match counter {
            Some(c) => c.time_until_at_most(now, bound),
            None => Some(0),
        }
    }

    /// The key's burn rate in dimension `dim`.
    pub fn burn(&self, now: UnixMillis, key_id: &str, dim: usize, remaining: f64) -> BurnReport {
        self.keys
            .get(key_id)
            .map_or(BurnRate::default(), |k| k.burn[dim])
            .report(now, remaining)
    }

    /// Lists `key_id` among the keys that consumed, without recording an amount (the
    /// Redis driver keeps amounts in Redis and the list of keys here).
    pub fn note_key(&mut self, key_id: &str) {
        Self::with_key(&mut self.keys, &self.dims, key_id, |_| ());
    }

    /// Keys with recorded consumption.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// The slots changed since the last call, with their current amounts.
    pub fn take_dirty(&mut self) -> Vec<SlotRow> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut rows = Vec::with_capacity(dirty.values().map(Vec::len).sum());
        for (key, marked) in dirty {
            let state = self.keys.get(&key);
            for (dim, slot) in marked {
                let amount = state.map_or(0.0, |k| k.counters[dim].slot_amount(slot));
                rows.push((key.clone(), dim, slot, amount));
            }
        }
        rows
    }

    /// Every live slot, for persistence.
    pub fn slots(&self, now: UnixMillis) -> Vec<SlotRow> {
        let mut out = Vec::new();
        for (key, state) in &self.keys {
            for (i, c) in state.counters.iter().enumerate() {
                out.extend(c.live_slots(now).map(|(s, v)| (key.clone(), i, s, v)));
            }
        }
        out
    }

    /// Restores a persisted slot.
    pub fn load_slot(&mut self, now: UnixMillis, key_id: &str, dim: usize, slot: u64, amount: f64) {
        if dim >= self.dims.len() {
            return;
        }
        Self::with_key(&mut self.keys, &self.dims, key_id, |key| {
            key.counters[dim].add_to_slot(now, slot, amount);
        });
        self.totals[dim].add_to_slot(now, slot, amount);
    }

    /// Copies a slot from a ledger of an earlier layout; the copy is marked for writing,
    /// since the earlier ledger's unwritten changes go with it.
    pub fn carry_slot(
        &mut self,
        now: UnixMillis,
        key_id: &str,
        dim: usize,
        slot: u64,
        amount: f64,
    ) {
        self.load_slot(now, key_id, dim, slot, amount);
        if dim < self.dims.len() {
            self.mark(key_id, [(dim, slot)]);
        }
    }

    /// Hands every key's live slots over to another store: returns them and leaves the
    /// counters at zero, marked for writing so that persisted copies are zeroed too (a
    /// later start must not load counts that now live elsewhere). Burn rates stay.
    pub fn hand_over(&mut self, now: UnixMillis) -> Vec<SlotRow> {
        let rows = self.slots(now);
        for (key, dim, slot, amount) in &rows {
            self.carry_slot(now, key, *dim, *slot, -amount);
        }
        rows
    }

    /// Marks a slot for writing again (its last write failed).
    pub fn mark_dirty(&mut self, key_id: &str, dim: usize, slot: u64) {
        if dim < self.dims.len() {
            self.mark(key_id, [(dim, slot)]);
        }
    }

    /// Drops keys that are no longer configured, bounding memory.
    /// The pool's totals keep what a dropped key consumed: it was real use.
    pub fn retain_keys(&mut self, keep: impl Fn(&str) -> bool) {
        self.keys.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::decide::{BlockReason, Policy, Unit};
    use crate::quota::window::Window;

    const T0: u64 = 1_800_000_000_000;

    fn ledger() -> PoolLedger {
        PoolLedger::new(vec![Dimension::new(Unit::Requests, Window::Hourly, 10.0)])
    }

    #[test]
    fn handing_over_returns_the_live_slots_and_zeroes_them_for_writing() {
        let mut l = ledger();
        let slot = Window::Hourly.slot_of(T0);
        l.load_slot(T0, "a", 0, slot, 3.0);
        l.load_slot(T0, "b", 0, slot, 2.0);
        assert!(l.take_dirty().is_empty());
        let mut rows = l.hand_over(T0);
        rows.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            rows,
            vec![
                ("a".to_owned(), 0, slot, 3.0),
                ("b".to_owned(), 0, slot, 2.0)
            ]
        );
        assert_eq!(l.peek(T0, "a")[..], [(0.0, 0.0)]);
        let mut written = l.take_dirty();
        written.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            written,
            vec![
                ("a".to_owned(), 0, slot, 0.0),
                ("b".to_owned(), 0, slot, 0.0)
            ]
        );
    }

    fn ask<'a>(key: &'a str, policy: Policy) -> Ask<'a> {
        Ask {
            key_id: key,
            share: Share {
                weight: 50.0,
                policy,
            },
            caps: &[None],
            costs: &[1.0],
            signals: &[None],
            saturation_threshold: 0.5,
            growth: false,
        }
    }

    #[test]
    fn reserve_books_the_cost_and_the_ceiling_holds() {
        let mut l = ledger();
        let mut admitted = 0;
        for _ in 0..15 {
            if l.reserve(T0, ask("a", Policy::Burst)).1.is_some() {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 10);
        assert_eq!(l.peek(T0, "a")[..], [(10.0, 10.0)]);
        let (d, r, peeked) = l.reserve(T0, ask("b", Policy::Burst));
        assert!(r.is_none());
        assert_eq!(d.dimensions[0].blocked, Some(BlockReason::GlobalLimit));
        // Decided on b's nothing of the pool's ten.
        assert_eq!(peeked[..], [(0.0, 10.0)]);
        // An admission gives the counters from before its booking.
        let mut l = ledger();
        l.reserve(T0, ask("a", Policy::Burst));
        let (_, r, peeked) = l.reserve(T0, ask("a", Policy::Burst));
        assert_eq!(
            (&r.unwrap().booked[..], &peeked[..]),
            (&[1.0][..], &[(1.0, 1.0)][..])
        );
    }

    #[test]
    fn hard_keys_stop_at_their_share_once_strict() {
        let mut l = ledger();
        // Lenient until the pool is half used: a borrows 5, which makes it strict.
        for _ in 0..5 {
            assert!(l.reserve(T0, ask("a", Policy::Hard)).1.is_some());
        }
        let (d, r, _) = l.reserve(T0, ask("a", Policy::Hard));
        assert!(r.is_none());
        assert_eq!(d.dimensions[0].blocked, Some(BlockReason::FairShare));
        // b still gets its share.
        for _ in 0..5 {
            assert!(l.reserve(T0, ask("b", Policy::Hard)).1.is_some());
        }
        assert!(l.reserve(T0, ask("b", Policy::Hard)).1.is_none());
    }

    #[test]
    fn a_growth_is_judged_only_on_the_dimensions_it_charges() {
        let mut l = PoolLedger::new(vec![
            Dimension::new(Unit::Requests, Window::Hourly, 2.0),
            Dimension::new(Unit::Tokens, Window::Hourly, 1_000.0),
        ]);
        let first = Ask {
            caps: &[None, None],
            costs: &[1.0, 400.0],
            signals: &[None, None],
            ..ask("a", Policy::Burst)
        };
        assert!(l.reserve(T0, first).1.is_some());
        assert!(l
            .reserve(
                T0,
                Ask {
                    key_id: "b",
                    ..first
                }
            )
            .1
            .is_some());
        // The request limit is reached: a new request is refused on it...
        let (d, r, _) = l.reserve(T0, first);
        assert_eq!((d.blocked_by, r), (Some(0), None));
        // ...but a running stream's next 150 tokens are judged on tokens alone.
        let grow = Ask {
            costs: &[0.0, 150.0],
            growth: true,
            ..first
        };
        let (d, r, _) = l.reserve(T0, grow);
        assert_eq!(d.blocked_by, None);
        assert_eq!(r.unwrap().booked[..], [0.0, 150.0]);
        assert_eq!(l.peek(T0, "a")[..], [(1.0, 2.0), (550.0, 950.0)]);
        // The global ceiling holds for growth as for admission.
        let (d, r, _) = l.reserve(T0, grow);
        assert_eq!(
            (d.blocked_by, d.dimensions[1].blocked, r),
            (Some(1), Some(BlockReason::GlobalLimit), None)
        );
    }

    #[test]
    fn settle_moves_the_booking_to_the_actual_cost_and_release_takes_it_back() {
        let mut l = PoolLedger::new(vec![Dimension::new(Unit::Tokens, Window::Hourly, 1e6)]);
        let a = Ask {
            costs: &[1_000.0],
            ..ask("a", Policy::Hard)
        };
        let mut r = l.reserve(T0, a).1.unwrap();
        assert_eq!(l.peek(T0, "a")[..], [(1_000.0, 1_000.0)]);
        // Usage arrives in parts during a stream.
        l.settle(T0 + 10, &mut r, &[300.0]);
        assert_eq!(l.peek(T0 + 10, "a")[..], [(300.0, 300.0)]);
        l.settle(T0 + 20, &mut r, &[1_250.0]);
        assert_eq!(l.peek(T0 + 20, "a")[..], [(1_250.0, 1_250.0)]);
        let mut r2 = l.reserve(T0 + 30, a).1.unwrap();
        l.release(T0 + 40, &mut r2);
        assert_eq!(l.peek(T0 + 40, "a")[..], [(1_250.0, 1_250.0)]);
        // Settling again with the same value changes nothing.
        l.settle(T0 + 50, &mut r, &[1_250.0]);
        assert_eq!(l.peek(T0 + 50, "a")[..], [(1_250.0, 1_250.0)]);
    }

    #[test]
    fn settlement_lands_in_the_reserved_slot() {
        let w = Window::Hourly;
        let mut l = ledger();
        let mut r = l.reserve(T0, ask("a", Policy::Hard)).1.unwrap();
        // Settled an hour and a bit later: the reservation's slot has left the window,
        // so the late usage does not count as fresh consumption.
        let late = T0 + w.length_ms() + 2 * w.slot_ms();
        l.settle(late, &mut r, &[3.0]);
        assert_eq!(l.peek(late, "a")[..], [(0.0, 0.0)]);
    }

    #[test]
    fn slots_round_trip_through_persistence() {
        let mut l = ledger();
        for k in ["a", "b", "a"] {
            l.reserve(T0, ask(k, Policy::Burst));
        }
        let rows = l.slots(T0);
        let mut restored = ledger();
        for (k, d, s, v) in &rows {
            restored.load_slot(T0, k, *d, *s, *v);
        }
        assert_eq!(restored.peek(T0, "a")[..], [(2.0, 3.0)]);
        assert_eq!(restored.peek(T0, "b")[..], [(1.0, 3.0)]);
        // Loading is not a change; reserving and settling are.
        assert!(restored.take_dirty().is_empty());
        let mut dirty = l.take_dirty();
        dirty.sort_by(|a, b| a.0.cmp(&b.0));
        let slot = Window::Hourly.slot_of(T0);
        assert_eq!(
            dirty,
            vec![
                ("a".to_owned(), 0, slot, 2.0),
                ("b".to_owned(), 0, slot, 1.0)
            ]
        );
        assert!(l.take_dirty().is_empty());
        restored.load_slot(T0, "a", 7, 0, 1.0);
        assert_eq!(restored.peek(T0, "a")[..], [(2.0, 3.0)]);
    }

    #[test]
    fn time_until_reports_when_the_key_fits_again() {
        let w = Window::Hourly;
        let mut l = ledger();
        for _ in 0..5 {
            l.reserve(T0, ask("a", Policy::Hard));
        }
        let (d, _, _) = l.reserve(T0, ask("a", Policy::Hard));
        let fits_at = d.dimensions[0].fits_at.unwrap();
        assert_eq!(fits_at, 4.0);
        let start = w.slot_of(T0) * w.slot_ms();
        // All five were booked in one slot; 4 remain after 1/5 of it has phased out —
        // but never later than a window from now, when all of them have left it.
        let phased = start + w.length_ms() + w.slot_ms() / 5 - T0;
        assert!(phased > w.length_ms());
        assert_eq!(l.time_until(T0, Some("a"), 0, fits_at), Some(w.length_ms()));
        let later = start + w.slot_ms() / 2;
        assert_eq!(
            l.time_until(later, Some("a"), 0, fits_at),
            Some(start + w.length_ms() + w.slot_ms() / 5 - later)
        );
        assert_eq!(l.time_until(T0, Some("nobody"), 0, 1.0), Some(0));
    }

    #[test]
    fn removed_keys_are_forgotten_but_their_use_still_counts() {
        let mut l = ledger();
        l.reserve(T0, ask("a", Policy::Burst));
        l.reserve(T0, ask("b", Policy::Burst));
        l.retain_keys(|k| k == "b");
        assert_eq!(l.key_ids().collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(l.peek(T0, "a")[..], [(0.0, 2.0)]);
    }
}
