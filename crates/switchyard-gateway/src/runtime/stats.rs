//! Each connection × model's remembered service (SPEC R19's facts for `p2c` and
//! `least-used`): the core's [`Stat`] per pair, fed every attempt's outcome and every
//! request sent, and seeded from the request log at start, so a restart does not forget
//! which account is slow. In this process's memory, bounded: pairs of connections the
//! configuration dropped go with it, and past [`MAX_PAIRS`] new pairs are not
//! remembered.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use switchyard_core::routing::stats::{Observation, Stat};
use switchyard_core::UnixMillis;
use switchyard_model::OutcomeRow;

/// Connection × model pairs remembered.
pub const MAX_PAIRS: usize = 20_000;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Stats(Mutex<Pairs>);

/// By connection, then model: a lookup of a known pair allocates nothing.
#[derive(Debug, Default)]
struct Pairs {
    by_connection: HashMap<String, HashMap<String, Stat>>,
    len: usize,
}

impl Stats {
    fn with(&self, connection: &str, model: &str, f: impl FnOnce(&mut Stat)) {
        let mut pairs = lock(&self.0);
        let Pairs { by_connection, len } = &mut *pairs;
        if let Some(s) = by_connection
            .get_mut(connection)
            .and_then(|m| m.get_mut(model))
        {
            f(s);
        } else if *len < MAX_PAIRS {
            *len += 1;
            let models = by_connection.entry(connection.to_owned()).or_default();
            f(models.entry(model.to_owned()).or_default());
        }
    }

    /// An attempt's outcome.
    pub fn observe(&self, connection: &str, model: &str, o: Observation) {
        self.with(connection, model, |s| s.observe(o));
    }

    /// A request sent at `now`.
    pub fn sent(&self, connection: &str, model: &str, now: UnixMillis) {
        self.with(connection, model, |s| s.sent(now));
    }

    /// The pair's stat (the default when nothing is known).
    pub fn get(&self, connection: &str, model: &str) -> Stat {
        lock(&self.0)
            .by_connection
            .get(connection)
            .and_then(|m| m.get(model))
            .copied()
            .unwrap_or_default()
    }

    /// Seeds the stats from logged requests, oldest first (see
    /// `Store::recent_outcomes`): a 5xx, 408 or 429 counts as a failure, anything else
    /// as served.
    pub fn seed(&self, rows: &[OutcomeRow]) {
        for r in rows {
            let ok = !(r.status >= 500 || r.status == 408 || r.status == 429);
            let header_ms = if r.stream {
                r.ttfb_ms
            } else {
                Some(r.latency_ms)
            };
            let o = Observation {
                ok,
                header_ms,
                stream: r.stream,
            };
            self.observe(&r.connection_id, &r.model, o);
            self.sent(&r.connection_id, &r.model, r.ts);
        }
    }

    /// Keeps only the pairs of the connections `keep` says yes to.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut pairs = lock(&self.0);
        pairs.by_connection.retain(|conn, _| keep(conn));
        pairs.len = pairs.by_connection.values().map(HashMap::len).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(conn: &str, status: u16, ts: u64) -> OutcomeRow {
        OutcomeRow {
            connection_id: conn.into(),
            model: "m".into(),
            status,
            stream: false,
            latency_ms: 100,
            ttfb_ms: None,
            ts,
        }
    }

    #[test]
    fn seeded_outcomes_count_failures_and_sends_and_go_with_their_connection() {
        let s = Stats::default();
        s.seed(&[
            row("a", 502, 10),
            row("a", 200, 20),
            row("b", 429, 30),
            row("b", 400, 40),
        ]);
        let a = s.get("a", "m");
        assert!((a.success - 0.79).abs() < 1e-12, "{a:?}");
        assert_eq!(a.latency_ms, Some(100.0));
        assert!((a.used_at(20) - 2.0).abs() < 1e-4, "{a:?}");
        // 429 fails, a client's 400 is served.
        assert!((s.get("b", "m").success - 0.79).abs() < 1e-12);
        assert_eq!(s.get("c", "m"), Stat::default());
        s.retain(|c| c == "b");
        assert_eq!(s.get("a", "m"), Stat::default());
        assert_eq!(lock(&s.0).len, 1);
    }

    #[test]
    fn it_remembers_at_most_max_pairs() {
        let s = Stats::default();
        for i in 0..MAX_PAIRS + 5 {
            s.sent("c", &i.to_string(), 1);
        }
        assert_eq!(lock(&s.0).len, MAX_PAIRS);
        assert_eq!(s.get("c", &MAX_PAIRS.to_string()), Stat::default());
        // A known pair still counts.
        s.sent("c", "0", 1);
        assert!((s.get("c", "0").used_at(1) - 2.0).abs() < 1e-9);
    }
}
