//! The board of provider saturation readings (SPEC Q6): per connection, what its
//! rate-limit headers said lately, each reading valid for [`SIGNAL_TTL_MS`].
//!
//! The board is synchronous: its mutexes are held only within a call, never across an
//! `.await`, and every call takes `now`. Header parsing is done by
//! `switchyard_core::quota::signals`, where the answer is read.

use super::index::PoolRuntime;
use crate::sync::lock;

use smallvec::smallvec;
use std::sync::Mutex;
use switchyard_core::quota::decide::Unit;
use switchyard_core::quota::pool::PerDimension;
use switchyard_core::quota::signals::Signal;
use switchyard_core::quota::window::Window;
use switchyard_core::routing::view::{QuotaWindows, Reading};
use switchyard_core::{FastMap, UnixMillis};

/// How long a provider's saturation reading counts (SPEC Q6): long enough to bridge the
/// gaps between responses, short enough that a stale reading cannot block for long.
pub const SIGNAL_TTL_MS: u64 = 30_000;

/// Per dimension of a pool: the used fraction providers reported, and the reset they
/// announced.
pub type PoolSignals = PerDimension<(Option<f64>, Option<u64>)>;

/// See the module docs. Bounded by the number of connections: expired entries are
/// dropped whenever a new reading arrives.
#[derive(Debug, Default)]
pub struct SignalBoard {
    board: Mutex<FastMap<String, Vec<(Signal, UnixMillis)>>>,
    /// Per (connection, dimension key): the used percentage up to which the rise has
    /// already been charged to some request, so overlapping requests share a rise
    /// instead of each paying all of it.
    charged: Mutex<FastMap<(String, String), f64>>,
}

impl SignalBoard {
    /// Records the saturation readings of a response from `connection_id`.
    pub fn record(&self, connection_id: &str, readings: &[Signal], now: UnixMillis) {
        if readings.is_empty() {
            return;
        }
        let mut board = lock(&self.board);
        board.retain(|_, v| v.iter().any(|(_, exp)| *exp > now));
        lock(&self.charged).retain(|(c, _), _| board.contains_key(c) || c == connection_id);
        let fresh = readings.iter().map(|s| (*s, now + SIGNAL_TTL_MS));
        // The connection's name is copied only for its first reading.
        match board.get_mut(connection_id) {
            Some(entry) => {
                entry.retain(|(s, exp)| {
                    *exp > now
                        && !readings
                            .iter()
                            .any(|r| r.unit == s.unit && r.window == s.window)
                });
                entry.extend(fresh);
            }
            None => {
                board.insert(connection_id.to_owned(), fresh.collect());
            }
        }
    }

    /// The reading of one connection for dimension `dim` of `pool`. A reading without
    /// a window (OpenAI-style per-minute limits) applies to the pool's shortest window
    /// of its unit.
    fn reading(
        board: &FastMap<String, Vec<(Signal, UnixMillis)>>,
        connection_id: &str,
        pool: &PoolRuntime,
        dim: usize,
        now: UnixMillis,
    ) -> Option<Signal> {
        Self::applying(board.get(connection_id)?, pool, dim, now)
    }

    /// Among one connection's `readings`, the one for dimension `dim` of `pool`.
    fn applying(
        readings: &[(Signal, UnixMillis)],
        pool: &PoolRuntime,
        dim: usize,
        now: UnixMillis,
    ) -> Option<Signal> {
        let d = pool.dims[dim];
        readings.iter().find_map(|(s, exp)| {
            let applies = match s.window {
                Some(w) => w == d.window,
                None => pool.shortest[dim],
            };
            (applies && s.unit == d.unit && *exp > now).then_some(*s)
        })
    }

    /// Per dimension: the pool's used fraction from provider readings (the mean over
    /// its connections that reported one), and the latest reset they announced.
    pub fn for_pool(&self, pool: &PoolRuntime, now: UnixMillis) -> PoolSignals {
        let n = pool.dims.len();
        // Per dimension, summed as read (each admission asks, so no list of readings is
        // made): the used fractions, how many connections reported, the latest reset.
        let mut sums: PerDimension<(f64, u32, Option<UnixMillis>)> = smallvec![(0.0, 0, None); n];
        let board = lock(&self.board);
        for c in &pool.pool.connection_ids {
            let Some(readings) = board.get(c.as_str()) else {
                continue;
            };
            for (dim, (sum, count, reset)) in sums.iter_mut().enumerate() {
                if let Some(s) = Self::applying(readings, pool, dim, now) {
                    *sum += s.used;
                    *count += 1;
                    *reset = (*reset).max(s.reset_at);
                }
            }
        }
        drop(board);
        sums.into_iter()
            .map(|(sum, count, reset)| match count {
                0 => (None, None),
                _ => (Some(sum / f64::from(count)), reset),
            })
            .collect()
    }

    /// `connection_id`'s live readings by window, for the routing strategies that read
    /// them (SPEC R19: headroom, reset-window, reset-aware).
    pub fn windows(&self, connection_id: &str, now: UnixMillis) -> QuotaWindows {
        let board = lock(&self.board);
        let mut out = QuotaWindows::default();
        let Some(readings) = board.get(connection_id) else {
            return out;
        };
        for (s, _) in readings.iter().filter(|(_, exp)| *exp > now) {
            let reading = Reading {
                used: s.used,
                reset_in_ms: s.reset_at.map(|at| at.saturating_sub(now)),
            };
            match s.window {
                Some(Window::FiveHours) => out.five_hours = Some(reading),
                Some(Window::Weekly) => out.weekly = Some(reading),
                _ => {}
            }
            out.used_max = Some(out.used_max.map_or(s.used, |m: f64| m.max(s.used)));
        }
        out
    }

    /// The highest used fraction `connection_id` reported for any dimension of `pool`.
    pub fn connection_used(
        &self,
        pool: &PoolRuntime,
        connection_id: &str,
        now: UnixMillis,
    ) -> Option<f64> {
        let board = lock(&self.board);
        (0..pool.dims.len())
            .filter_map(|dim| Self::reading(&board, connection_id, pool, dim, now))
            .map(|s| s.used)
            .reduce(f64::max)
    }

    /// Per dimension of `pool`: the rise in the used percentage `connection_id` reported
    /// that this request is charged — from where the previous charge stopped (or from
    /// `base`, the reading when this request started, if nothing was charged yet) to the
    /// current reading. Each rise is charged once. Empty for a pool with no percent
    /// dimension.
    pub fn claim_rise(
        &self,
        pool: &PoolRuntime,
        connection_id: &str,
        base: &[Option<f64>],
        now: UnixMillis,
    ) -> Vec<Option<f64>> {
        let readings = self.percent_readings(pool, connection_id, now);
        if readings.is_empty() {
            return readings;
        }
        let mut charged = lock(&self.charged);
        readings
            .iter()
            .enumerate()
            .map(|(i, reading)| {
                let after = (*reading)?;
                let slot = (connection_id.to_owned(), pool.dims[i].key());
                let before = charged
                    .get(&slot)
                    .copied()
                    .or(base.get(i).copied().flatten())?;
                charged.insert(slot, after);
                Some((after - before).max(0.0))
            })
            .collect()
    }

    /// Per dimension of `pool`: the used percentage `connection_id` reported for
    /// percent dimensions (the base a request's percent cost is measured from). Empty
    /// for a pool with no percent dimension: most pools, asked on every request.
    pub fn percent_readings(
        &self,
        pool: &PoolRuntime,
        connection_id: &str,
        now: UnixMillis,
    ) -> Vec<Option<f64>> {
        if !pool.dims.iter().any(|d| d.unit == Unit::Percent) {
            return Vec::new();
        }
        let board = lock(&self.board);
        (0..pool.dims.len())
            .map(|dim| {
                (pool.dims[dim].unit == Unit::Percent)
                    .then(|| Self::reading(&board, connection_id, pool, dim, now))
                    .flatten()
                    .map(|s| s.used * 100.0)
            })
            .collect()
    }
}
