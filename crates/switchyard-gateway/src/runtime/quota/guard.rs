//! The reservation a request holds until its response ends.
//!
//! Settling and releasing never wait (they are plain calls into the engine, and a Redis
//! settlement is queued for its worker), so they are safe in `Drop`; only a stream's next
//! increment is awaited, through a `GrowthRequest`.

use super::engine::{BookedIn, Growth, QuotaEngine};
use super::index::PoolRuntime;
use super::views::QuotaBlock;
use smallvec::{smallvec, SmallVec};
use std::sync::Arc;
use switchyard_core::quota::cost::{self, Estimate, Price, STREAM_STEP_TOKENS};
use switchyard_core::quota::decide::Unit;
use switchyard_core::quota::ledger::Reservation;
use switchyard_core::quota::pool::PerDimension;
use switchyard_core::usage::Usage;
use switchyard_core::UnixMillis;

/// Characters of streamed text per estimated token.
const CHARS_PER_TOKEN: u64 = 4;

/// A reservation held by a request until its response ends. Settled to the actual cost
/// when the response completes, grown as a stream runs past its estimate — each step
/// reserved through the same decision as admission, so a refused step ends the stream —
/// released if the request fails before any answer, and released when dropped
/// unsettled, so no path (panic included) can leak a reservation.
#[derive(Debug)]
pub struct QuotaGuard {
    engine: Arc<QuotaEngine>,
    pool: Arc<PoolRuntime>,
    connection_id: String,
    /// The bookings, each with the store it was booked in (where it settles): the
    /// admission's first, then a stream's increments. In memory, increments into the
    /// same slots are merged, so a stream holds at most one booking per slot it ran
    /// through; in Redis each increment is a booking of its own, under its own
    /// reservation id.
    bookings: Vec<(BookedIn, Reservation)>,
    estimate: Estimate,
    /// The model's USD price, for `usd` dimensions.
    price: Option<Price>,
    /// The saturation threshold the request was admitted under; its increments are
    /// judged under the same.
    threshold: f64,
    /// Per dimension: the connection's used percentage when the request started.
    percent_base: Vec<Option<f64>>,
    streamed_chars: u64,
    done: bool,
}

/// A stream's request for its next increment: everything needed to decide it, owned, so
/// the stream can poll it without borrowing the guard.
#[derive(Debug)]
pub struct GrowthRequest {
    engine: Arc<QuotaEngine>,
    pool: Arc<PoolRuntime>,
    key_id: String,
    costs: Vec<f64>,
    threshold: f64,
    /// The completion tokens the reservation covers once this increment is booked.
    covers: u64,
}

impl GrowthRequest {
    /// Decides and books the increment.
    pub async fn run(self) -> (Growth, u64) {
        let growth = self
            .engine
            .grow(&self.pool, &self.key_id, &self.costs, self.threshold)
            .await;
        (growth, self.covers)
    }
}

impl QuotaGuard {
    pub(super) fn new(
        engine: Arc<QuotaEngine>,
        pool: Arc<PoolRuntime>,
        connection_id: String,
        booking: (BookedIn, Reservation),
        (estimate, price, threshold): (Estimate, Option<Price>, f64),
        percent_base: Vec<Option<f64>>,
    ) -> Self {
        engine.metrics().reservation_opened();
        Self {
            engine,
            pool,
            connection_id,
            bookings: vec![booking],
            estimate,
            price,
            threshold,
            percent_base,
            streamed_chars: 0,
            done: false,
        }
    }

    /// Notes generated completion text (streamed, or of an answer without usage).
    pub fn observe_output(&mut self, chars: usize) {
        self.streamed_chars = self.streamed_chars.saturating_add(chars as u64);
    }

    /// When the streamed text has passed what the reservation covers: the request for
    /// the next increment, which covers what was seen plus one step. `None` while the
    /// reservation suffices, or when no dimension of the pool counts tokens or dollars.
    pub fn growth_request(&self) -> Option<GrowthRequest> {
        let seen = self.streamed_chars.div_ceil(CHARS_PER_TOKEN);
        if self.done || seen <= self.estimate.completion_tokens {
            return None;
        }
        let covers = seen.saturating_add(STREAM_STEP_TOKENS);
        let more = Estimate {
            prompt_tokens: self.estimate.prompt_tokens,
            completion_tokens: covers,
        };
        let costs: Vec<f64> = self
            .pool
            .dims
            .iter()
            .map(|d| match d.unit {
                Unit::Tokens | Unit::Usd => (more.cost(d.unit, self.price)
                    - self.estimate.cost(d.unit, self.price))
                .max(0.0),
                Unit::Requests | Unit::Percent => 0.0,
            })
            .collect();
        if costs.iter().all(|c| *c == 0.0) {
            return None;
        }
        Some(GrowthRequest {
            engine: Arc::clone(&self.engine),
            pool: Arc::clone(&self.pool),
            key_id: self.bookings[0].1.key_id.clone(),
            costs,
            threshold: self.threshold,
            covers,
        })
    }

    /// Applies a decided increment: a booking joins the reservation (covering `covers`
    /// completion tokens from now on); a refusal is returned and ends the stream; with
    /// the store failing the stream goes on unmetered, covered as if booked.
    pub fn apply_growth(&mut self, (growth, covers): (Growth, u64)) -> Option<Box<QuotaBlock>> {
        match growth {
            Growth::Booked(booked_in, booking) => {
                match self.bookings.last_mut() {
                    Some((BookedIn::Memory, last))
                        if matches!(booked_in, BookedIn::Memory) && last.slots == booking.slots =>
                    {
                        for (b, add) in last.booked.iter_mut().zip(&booking.booked) {
                            *b += add;
                        }
                    }
                    _ => self.bookings.push((booked_in, booking)),
                }
                self.estimate.completion_tokens = covers;
                None
            }
            Growth::Unenforced => {
                self.estimate.completion_tokens = covers;
                None
            }
            Growth::Blocked(block) => Some(block),
        }
    }

    /// Settles to the actual cost: the upstream's usage, or what was seen streaming.
    pub fn settle(mut self, usage: Option<Usage>) {
        let now = self.engine.now();
        let rises = self.engine.signals.claim_rise(
            &self.pool,
            &self.connection_id,
            &self.percent_base,
            now,
        );
        let fallback = Estimate {
            prompt_tokens: self.estimate.prompt_tokens,
            completion_tokens: self.streamed_chars.div_ceil(CHARS_PER_TOKEN),
        };
        let actual: PerDimension<f64> = self
            .pool
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let rise = rises.get(i).copied().flatten();
                cost::actual(d.unit, usage, fallback, self.price, rise)
            })
            .collect();
        self.move_to(&actual, Some(&actual), now);
        self.done = true;
    }

    /// Gives the reservation back (the request failed before any answer).
    pub fn release(mut self) {
        self.release_inner();
    }

    fn release_inner(&mut self) {
        if !self.done {
            self.done = true;
            let zeros: PerDimension<f64> = smallvec![0.0; self.pool.dims.len()];
            self.move_to(&zeros, None, self.engine.now());
        }
    }

    /// Moves the bookings to `total` per dimension: the earlier bookings keep what they
    /// hold as far as the total reaches, the newest takes the rest. A finished request's
    /// actual cost (`burn`) also feeds its key's burn rates.
    fn move_to(&mut self, total: &[f64], burn: Option<&[f64]>, now: UnixMillis) {
        let targets = split(self.bookings.iter().map(|(_, r)| r), total);
        self.engine
            .settle(&self.pool, (&mut self.bookings, &targets), burn, now);
    }
}

/// Per booking, its share of `total` per dimension: in booking order, each keeps at most
/// what it holds until the total is used up; the last takes whatever remains (more than
/// it holds when the answer ran past every booking). Inline for one booking (a request
/// or a stream that did not grow).
fn split<'a>(
    bookings: impl ExactSizeIterator<Item = &'a Reservation>,
    total: &[f64],
) -> SmallVec<[PerDimension<f64>; 1]> {
    let mut left: PerDimension<f64> = total.iter().map(|t| t.max(0.0)).collect();
    let n = bookings.len();
    bookings
        .enumerate()
        .map(|(j, b)| {
            if j + 1 == n {
                // The newest takes what is left: the list itself, not a copy of it.
                return std::mem::take(&mut left);
            }
            left.iter_mut()
                .enumerate()
                .map(|(i, rest)| {
                    let take = b.booked.get(i).copied().unwrap_or(0.0).min(*rest);
                    *rest -= take;
                    take
                })
                .collect()
        })
        .collect()
}

impl Drop for QuotaGuard {
    fn drop(&mut self) {
        self.release_inner();
        self.engine.metrics().reservation_closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn booking(booked: &[f64]) -> Reservation {
        Reservation {
            key_id: "k".into(),
            slots: smallvec![1; booked.len()],
            booked: booked.iter().copied().collect(),
        }
    }

    /// [`split`]'s answer as plain lists.
    fn split_of(bookings: &[Reservation], total: &[f64]) -> Vec<Vec<f64>> {
        split(bookings.iter(), total)
            .iter()
            .map(|part| part.to_vec())
            .collect()
    }

    #[test]
    fn a_total_is_split_over_the_bookings_in_order() {
        let b = [
            booking(&[1.0, 300.0]),
            booking(&[0.0, 256.0]),
            booking(&[0.0, 256.0]),
        ];
        // Less than the first booking: the later ones go to zero.
        assert_eq!(
            split_of(&b, &[1.0, 200.0]),
            vec![vec![1.0, 200.0], vec![0.0, 0.0], vec![0.0, 0.0]]
        );
        // Between: the first keeps its own, the second what is left.
        assert_eq!(
            split_of(&b, &[1.0, 400.0]),
            vec![vec![1.0, 300.0], vec![0.0, 100.0], vec![0.0, 0.0]]
        );
        // More than all: the newest takes the rest.
        assert_eq!(
            split_of(&b, &[1.0, 1_000.0]),
            vec![vec![1.0, 300.0], vec![0.0, 256.0], vec![0.0, 444.0]]
        );
        assert_eq!(split_of(&b[..1], &[0.0, 0.0]), vec![vec![0.0, 0.0]]);
    }
}
