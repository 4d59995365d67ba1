//! Requests per minute of the last hour, per provider, connection and key, kept in
//! memory by the request-log writer (never by the request path) so that the dashboard's
//! charts read a few hundred counters instead of scanning an hour of the log, however
//! busy the gateway is. Seeded from the stored log at start, so a restart keeps the
//! hour's history.

use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use switchyard_core::FastMap;
use switchyard_model::{LogRow, SeriesRow};

/// A minute in milliseconds.
pub const MINUTE_MS: u64 = 60_000;

/// Minutes kept: the last hour and the minute in progress.
pub const MINUTES_KEPT: u64 = 61;

/// Most (provider, connection, key) combinations counted in one minute; rows of further
/// combinations in that minute are left out (and counted in [`MinuteSeries::dropped`]).
pub const MAX_PER_MINUTE: usize = 10_000;

type Labels = (Option<String>, Option<String>, Option<String>);

/// Counts of one minute and combination.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    requests: u64,
    errors: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
}

impl Counts {
    /// One row's.
    fn of(row: &LogRow) -> Self {
        Self {
            requests: 1,
            errors: u64::from(row.status >= 400),
            prompt_tokens: row.prompt_tokens.unwrap_or(0),
            completion_tokens: row.completion_tokens.unwrap_or(0),
        }
    }

    fn add(&mut self, other: Self) {
        self.requests = self.requests.saturating_add(other.requests);
        self.errors = self.errors.saturating_add(other.errors);
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
    }
}

/// Whether two rows are counted under the same combination.
fn same_labels(a: &LogRow, b: &LogRow) -> bool {
    a.provider == b.provider && a.connection_id == b.connection_id && a.key_id == b.key_id
}

/// The counters, by minute (its number since the epoch) and combination.
#[derive(Debug, Default)]
pub struct MinuteSeries {
    minutes: BTreeMap<u64, FastMap<Labels, Counts>>,
    dropped: u64,
}

impl MinuteSeries {
    /// Counts `rows`, in order: a row of a newer minute forgets the minutes more than
    /// [`MINUTES_KEPT`] before it, and a row of a forgotten minute is left out. A run of
    /// rows of one minute and combination (most of a batch, on a gateway with few keys)
    /// is counted at once: one lookup, and its labels copied once.
    pub fn add_all(&mut self, rows: &[LogRow]) {
        let mut run: Option<(&LogRow, u64, Counts)> = None;
        for row in rows {
            let minute = row.ts / MINUTE_MS;
            let counts = Counts::of(row);
            match &mut run {
                Some((first, m, sum)) if *m == minute && same_labels(first, row) => {
                    sum.add(counts);
                }
                _ => {
                    if let Some((first, m, sum)) = run.replace((row, minute, counts)) {
                        self.add_run(first, m, sum);
                    }
                }
            }
        }
        if let Some((first, m, sum)) = run {
            self.add_run(first, m, sum);
        }
    }

    /// Adds `counts` of rows of `minute` with the labels of `row`.
    fn add_run(&mut self, row: &LogRow, minute: u64, counts: Counts) {
        let newest = self.minutes.keys().next_back().copied().unwrap_or(minute);
        if minute.saturating_add(MINUTES_KEPT) <= newest {
            return;
        }
        let labels = (
            row.provider.clone(),
            row.connection_id.clone(),
            row.key_id.clone(),
        );
        if !self.count(minute, labels, counts) {
            self.dropped = self.dropped.saturating_add(counts.requests);
        }
        if minute > newest {
            let keep_from = minute.saturating_sub(MINUTES_KEPT - 1);
            while self
                .minutes
                .first_key_value()
                .is_some_and(|(m, _)| *m < keep_from)
            {
                self.minutes.pop_first();
            }
        }
    }

    /// Adds what the stored log holds (rows of [`Store::log_series`] per minute).
    ///
    /// [`Store::log_series`]: switchyard_store::Store::log_series
    pub fn seed(&mut self, rows: &[SeriesRow]) {
        for r in rows {
            let labels = (
                r.provider.clone(),
                r.connection_id.clone(),
                r.key_id.clone(),
            );
            let counts = Counts {
                requests: r.requests,
                errors: r.errors,
                prompt_tokens: r.prompt_tokens,
                completion_tokens: r.completion_tokens,
            };
            self.count(r.bucket_ms / MINUTE_MS, labels, counts);
        }
    }

    /// Adds `counts` to `minute`'s `labels`; false (nothing added) when the minute
    /// already counts [`MAX_PER_MINUTE`] other combinations.
    fn count(&mut self, minute: u64, labels: Labels, counts: Counts) -> bool {
        let per = self.minutes.entry(minute).or_default();
        let full = per.len() >= MAX_PER_MINUTE;
        match per.entry(labels) {
            Entry::Occupied(mut kept) => kept.get_mut().add(counts),
            Entry::Vacant(_) if full => return false,
            Entry::Vacant(new) => new.insert(Counts::default()).add(counts),
        }
        true
    }

    /// The counters of the minutes from `since_ms` on, oldest first, as the store's
    /// `log_series` orders them (by minute, then provider, connection and key).
    pub fn rows(&self, since_ms: u64) -> Vec<SeriesRow> {
        let mut out: Vec<SeriesRow> = self
            .minutes
            .range(since_ms / MINUTE_MS..)
            .flat_map(|(minute, per)| {
                per.iter()
                    .map(move |((provider, connection_id, key_id), c)| SeriesRow {
                        bucket_ms: minute * MINUTE_MS,
                        provider: provider.clone(),
                        connection_id: connection_id.clone(),
                        key_id: key_id.clone(),
                        requests: c.requests,
                        errors: c.errors,
                        prompt_tokens: c.prompt_tokens,
                        completion_tokens: c.completion_tokens,
                    })
            })
            .collect();
        out.sort_by(|a, b| {
            (a.bucket_ms, &a.provider, &a.connection_id, &a.key_id).cmp(&(
                b.bucket_ms,
                &b.provider,
                &b.connection_id,
                &b.key_id,
            ))
        });
        out
    }

    /// Rows left out because their minute already counted [`MAX_PER_MINUTE`]
    /// combinations.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    impl MinuteSeries {
        /// Counts one row, as the writer counts a batch of one.
        fn add(&mut self, row: &LogRow) {
            self.add_all(std::slice::from_ref(row));
        }
    }

    /// A row of `provider`'s connection and `key` at `ts` (id `r<ts>`).
    pub(crate) fn row(ts: u64, provider: &str, key: &str, status: u16) -> LogRow {
        LogRow {
            ts,
            request_id: format!("r{ts}"),
            key_id: Some(key.into()),
            requested_model: "m".into(),
            provider: Some(provider.into()),
            connection_id: Some(format!("{provider}-1")),
            model: Some("m".into()),
            status,
            error_code: None,
            stream: false,
            client_format: "openai".into(),
            attempts: 1,
            latency_ms: 1,
            ttfb_ms: None,
            prompt_tokens: Some(10),
            completion_tokens: Some(ts % 7),
            egress_ip: None,
            failed_attempts: Vec::new(),
            route: None,
        }
    }

    fn series(minute: u64, provider: &str, key: &str, counts: [u64; 4]) -> SeriesRow {
        SeriesRow {
            bucket_ms: minute * MINUTE_MS,
            provider: Some(provider.into()),
            connection_id: Some(format!("{provider}-1")),
            key_id: Some(key.into()),
            requests: counts[0],
            errors: counts[1],
            prompt_tokens: counts[2],
            completion_tokens: counts[3],
        }
    }

    #[test]
    fn rows_are_counted_per_minute_and_combination_as_the_store_counts_them() {
        let mut s = MinuteSeries::default();
        for r in [
            row(60_000, "alpha", "k1", 200),
            row(61_000, "alpha", "k1", 500),
            row(62_000, "beta", "k1", 200),
            row(125_000, "alpha", "k2", 429),
        ] {
            s.add(&r);
        }
        assert_eq!(
            s.rows(0),
            vec![
                series(1, "alpha", "k1", [2, 1, 20, 60_000 % 7 + 61_000 % 7]),
                series(1, "beta", "k1", [1, 0, 10, 62_000 % 7]),
                series(2, "alpha", "k2", [1, 1, 10, 125_000 % 7]),
            ]
        );
        assert_eq!(
            s.rows(120_000),
            vec![series(2, "alpha", "k2", [1, 1, 10, 125_000 % 7])]
        );
        assert_eq!(s.rows(180_000), vec![]);
    }

    #[test]
    fn a_batch_counts_as_its_rows_one_by_one() {
        let batch: Vec<LogRow> = [
            (60_000, "alpha", "k1", 200),
            (61_000, "alpha", "k1", 500),
            (62_000, "alpha", "k2", 200),
            (63_000, "alpha", "k1", 200),
            (125_000, "alpha", "k1", 429),
            (126_000, "alpha", "k1", 200),
            (60 * MINUTE_MS + 1, "beta", "k1", 200),
            (61 * MINUTE_MS, "beta", "k1", 200),
            // Of a minute the row before them forgot: left out; the next one counts.
            (0, "alpha", "k1", 200),
            (0, "alpha", "k1", 200),
            (61 * MINUTE_MS + 5, "alpha", "k2", 200),
        ]
        .iter()
        .map(|&(ts, p, k, status)| row(ts, p, k, status))
        .collect();
        let mut one_by_one = MinuteSeries::default();
        for r in &batch {
            one_by_one.add(r);
        }
        let mut at_once = MinuteSeries::default();
        at_once.add_all(&batch);
        assert_eq!(at_once.rows(0), one_by_one.rows(0));
        assert_eq!(at_once.rows(0).len(), 6);
        assert_eq!(at_once.dropped(), 0);
        // Rows of a combination past a full minute are dropped, a run at a time.
        let mut full = MinuteSeries::default();
        for i in 0..MAX_PER_MINUTE {
            full.add(&row(0, "p", &format!("k{i}"), 200));
        }
        full.add_all(&[row(1, "p", "new", 200), row(2, "p", "new", 200)]);
        assert_eq!(full.dropped(), 2);
    }

    #[test]
    fn only_the_last_hour_is_kept() {
        let mut s = MinuteSeries::default();
        s.add(&row(0, "alpha", "k1", 200));
        s.add(&row(60 * MINUTE_MS, "alpha", "k1", 200));
        assert_eq!(
            s.rows(0).len(),
            2,
            "minute 0 is 60 minutes before minute 60"
        );
        s.add(&row(61 * MINUTE_MS, "alpha", "k1", 200));
        assert_eq!(s.rows(0).first().map(|r| r.bucket_ms), Some(MINUTE_MS * 60));
        // A late row of a forgotten minute is not counted again.
        s.add(&row(0, "alpha", "k1", 200));
        assert_eq!(s.rows(0).len(), 2);
        assert_eq!(s.minutes.len(), 2);
    }

    #[test]
    fn a_minute_counts_a_bounded_number_of_combinations() {
        let mut s = MinuteSeries::default();
        for i in 0..=MAX_PER_MINUTE {
            s.add(&row(0, "p", &format!("k{i}"), 200));
        }
        s.add(&row(1, "p", "k0", 200));
        assert_eq!(s.rows(0).len(), MAX_PER_MINUTE);
        assert_eq!(s.dropped(), 1);
        assert_eq!(
            s.rows(0).iter().map(|r| r.requests).sum::<u64>(),
            MAX_PER_MINUTE as u64 + 1
        );
    }

    #[test]
    fn seeding_adds_the_stored_counts() {
        let mut s = MinuteSeries::default();
        s.seed(&[series(1, "alpha", "k1", [3, 1, 30, 9])]);
        s.add(&row(60_500, "alpha", "k1", 200));
        assert_eq!(
            s.rows(0),
            vec![series(1, "alpha", "k1", [4, 1, 40, 9 + 60_500 % 7])]
        );
    }
}
