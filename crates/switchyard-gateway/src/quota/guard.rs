//! The reservation a request holds until its response ends.

use super::engine::QuotaEngine;
use super::index::PoolRuntime;
use std::sync::Arc;
use switchyard_core::quota::cost::{self, Estimate, Price};
use switchyard_core::quota::decide::Unit;
use switchyard_core::quota::ledger::Reservation;
use switchyard_core::usage::Usage;

/// Completion tokens a stream's reservation grows by once usage passes it, so a long
/// stream re-books every few hundred tokens rather than on every chunk.
const STREAM_GROWTH_TOKENS: u64 = 256;

/// Characters of streamed text per estimated token.
const CHARS_PER_TOKEN: u64 = 4;

/// A reservation held by a request until its response ends. Settled to the actual cost
/// when the response completes, grown as a stream runs past its estimate, released if
/// the request fails before any answer — and released when dropped unsettled, so no
/// path (panic included) can leak a reservation.
#[derive(Debug)]
pub struct QuotaGuard {
    engine: Arc<QuotaEngine>,
    pool: Arc<PoolRuntime>,
    connection_id: String,
    reservation: Reservation,
    estimate: Estimate,
    /// The model's USD price, for `usd` dimensions.
    price: Option<Price>,
    /// Per dimension: the connection's used percentage when the request started.
    percent_base: Vec<Option<f64>>,
    streamed_chars: u64,
    done: bool,
}

impl QuotaGuard {
    pub(super) fn new(
        engine: Arc<QuotaEngine>,
        pool: Arc<PoolRuntime>,
        connection_id: String,
        reservation: Reservation,
        (estimate, price): (Estimate, Option<Price>),
        percent_base: Vec<Option<f64>>,
    ) -> Self {
        Self {
            engine,
            pool,
            connection_id,
            reservation,
            estimate,
            price,
            percent_base,
            streamed_chars: 0,
            done: false,
        }
    }

    /// Notes streamed completion text; grows the token reservation once the text passes
    /// it, so parallel long streams cannot overshoot a window by more than a step.
    pub fn observe_output(&mut self, chars: usize) {
        self.streamed_chars += chars as u64;
        let seen = self.streamed_chars.div_ceil(CHARS_PER_TOKEN);
        if seen <= self.estimate.completion_tokens {
            return;
        }
        self.estimate.completion_tokens = seen + STREAM_GROWTH_TOKENS;
        let costs: Vec<f64> = self
            .pool
            .dims
            .iter()
            .zip(&self.reservation.booked)
            .map(|(d, booked)| match d.unit {
                Unit::Tokens | Unit::Usd => self.estimate.cost(d.unit, self.price),
                _ => *booked,
            })
            .collect();
        self.engine
            .settle(&self.pool, &mut self.reservation, &costs, false);
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
        let actual: Vec<f64> = self
            .pool
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let rise = rises.get(i).copied().flatten();
                cost::actual(d.unit, usage, fallback, self.price, rise)
            })
            .collect();
        self.engine
            .settle(&self.pool, &mut self.reservation, &actual, true);
        self.done = true;
    }

    /// Gives the reservation back (the request failed before any answer).
    pub fn release(mut self) {
        self.release_inner();
    }

    fn release_inner(&mut self) {
        if !self.done {
            self.done = true;
            let zeros = vec![0.0; self.reservation.booked.len()];
            self.engine
                .settle(&self.pool, &mut self.reservation, &zeros, false);
        }
    }
}

impl Drop for QuotaGuard {
    fn drop(&mut self) {
        self.release_inner();
    }
}
