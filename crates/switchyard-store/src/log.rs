//! The request log (SPEC G9): rows written in batches by the gateway's writer, off the
//! request path, and read back for the logs API, the dashboard's charts and request
//! view, the seeding of routing's service stats and the last known egress addresses.

use crate::db::{args, Arg, Column, Dialect, Table, ToArg};
use crate::store::{i64_of, to_json};
use crate::{Result, Store, StoreError, StoreFuture};
use std::collections::BTreeMap;
use std::sync::Arc;
use switchyard_model::{
    FailedAttempt, LogQuery, LogRow, LogSize, OutcomeRow, SeriesRow, StatusFilter,
};

/// Where the request log's batches go, off the request path: the seam the gateway's
/// log writer holds, so the log may live in another database than SQLite.
pub trait LogSink: Send + Sync + std::fmt::Debug {
    /// Writes `rows` in one transaction: all of them or none. Rows not written come
    /// back with the error, so the writer can keep them for a retry.
    fn write_batch(
        self: Arc<Self>,
        rows: Vec<LogRow>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::result::Result<(), Unwritten>> + Send>,
    >;
}

/// A batch the sink did not write, handed back with why.
#[derive(Debug)]
pub struct Unwritten {
    pub error: StoreError,
    /// The rows, in their order; empty when the write's task itself failed.
    pub rows: Vec<LogRow>,
}

/// What the gateway reads from the request log: the logs API and the dashboard's pages,
/// the seeding of the minute series, routing's service stats and the last known
/// egress addresses at start, and the retention's deletes.
pub trait LogQueries: Send + Sync + std::fmt::Debug {
    /// A page of rows, newest first (see [`Store::query_logs`]).
    fn page(self: Arc<Self>, q: LogQuery) -> StoreFuture<Vec<(i64, LogRow)>>;
    /// The log's row count and time span.
    fn size(self: Arc<Self>) -> StoreFuture<LogSize>;
    /// Requests, errors and tokens per bucket since `since_ms`.
    fn series(self: Arc<Self>, since_ms: u64, bucket_ms: u64) -> StoreFuture<Vec<SeriesRow>>;
    /// The newest `limit` outcomes on connections, oldest first.
    fn outcomes(self: Arc<Self>, limit: usize) -> StoreFuture<Vec<OutcomeRow>>;
    /// Each connection's newest egress address since `since_ms`.
    fn egress(self: Arc<Self>, since_ms: u64) -> StoreFuture<Vec<(String, String, u64)>>;
    /// Deletes up to `batch` rows past the retention; how many went.
    fn prune(self: Arc<Self>, older_than_ms: u64, max_rows: u64, batch: u32) -> StoreFuture<usize>;
}

impl Store {
    /// Runs `f` on the blocking pool: SQLite's calls are synchronous.
    fn off_thread<T: Send + 'static>(
        self: Arc<Self>,
        f: impl FnOnce(&Store) -> Result<T> + Send + 'static,
    ) -> StoreFuture<T> {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || f(&self))
                .await
                .map_err(|e| StoreError::Database(format!("the database task failed: {e}")))?
        })
    }
}

impl LogSink for Store {
    fn write_batch(
        self: Arc<Self>,
        rows: Vec<LogRow>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = std::result::Result<(), Unwritten>> + Send>,
    > {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || match self.insert_log_batch(&rows) {
                Ok(()) => Ok(()),
                Err(error) => Err(Unwritten { error, rows }),
            })
            .await
            .unwrap_or_else(|e| {
                Err(Unwritten {
                    error: StoreError::Database(format!("the database task failed: {e}")),
                    rows: Vec::new(),
                })
            })
        })
    }
}

impl LogQueries for Store {
    fn page(self: Arc<Self>, q: LogQuery) -> StoreFuture<Vec<(i64, LogRow)>> {
        self.off_thread(move |s| s.query_logs(&q))
    }

    fn size(self: Arc<Self>) -> StoreFuture<LogSize> {
        self.off_thread(Store::log_size)
    }

    fn series(self: Arc<Self>, since_ms: u64, bucket_ms: u64) -> StoreFuture<Vec<SeriesRow>> {
        self.off_thread(move |s| s.log_series(since_ms, bucket_ms))
    }

    fn outcomes(self: Arc<Self>, limit: usize) -> StoreFuture<Vec<OutcomeRow>> {
        self.off_thread(move |s| s.recent_outcomes(limit))
    }

    fn egress(self: Arc<Self>, since_ms: u64) -> StoreFuture<Vec<(String, String, u64)>> {
        self.off_thread(move |s| s.last_egress(since_ms))
    }

    fn prune(self: Arc<Self>, older_than_ms: u64, max_rows: u64, batch: u32) -> StoreFuture<usize> {
        self.off_thread(move |s| s.prune_logs(older_than_ms, max_rows, batch))
    }
}

impl Store {
    /// Inserts a batch of log rows in one transaction.
    pub fn insert_log_batch(&self, rows: &[LogRow]) -> Result<()> {
        // Each row's JSON columns, rendered before the arguments borrow them.
        let json = rows
            .iter()
            .map(|r| {
                Ok((
                    failed_attempts_json(&r.failed_attempts)?,
                    r.route.as_ref().map(to_json).transpose()?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut args = Vec::with_capacity(rows.len() * LOG.columns.len());
        let int = |v: u64| Arg::Int(i64_of(v));
        let opt = |v: Option<u64>| v.map_or(Arg::Null, int);
        for (r, (failed, route)) in rows.iter().zip(&json) {
            args.extend([
                int(r.ts),
                r.request_id.to_arg(),
                r.key_id.to_arg(),
                r.requested_model.to_arg(),
                r.provider.to_arg(),
                r.connection_id.to_arg(),
                r.model.to_arg(),
                r.status.to_arg(),
                r.error_code.to_arg(),
                r.stream.to_arg(),
                r.attempts.to_arg(),
                int(r.latency_ms),
                opt(r.ttfb_ms),
                opt(r.prompt_tokens),
                opt(r.completion_tokens),
                r.egress_ip.to_arg(),
                r.client_format.to_arg(),
                failed.to_arg(),
                route.to_arg(),
            ]);
        }
        self.write(|db| {
            // A batch whose commit PostgreSQL took but whose answer was lost (the
            // connection broke) comes back as failed and is retried: a batch lands
            // whole or not at all, so its first row says whether it is in already.
            if let (Dialect::Postgres, Some(first)) = (db.dialect(), rows.first()) {
                let landed = db
                    .query_opt(
                        "SELECT 1 FROM request_log WHERE ts = ?1 AND request_id = ?2 LIMIT 1",
                        &args![first.ts, first.request_id],
                    )?
                    .is_some();
                if landed {
                    return Ok(());
                }
            }
            db.append(&LOG, &args)
        })
    }

    /// The newest log rows, newest first.
    pub fn recent_logs(&self, limit: u32, key_id: Option<&str>) -> Result<Vec<LogRow>> {
        let q = LogQuery {
            key_id: key_id.map(str::to_owned),
            limit,
            ..LogQuery::default()
        };
        Ok(self.query_logs(&q)?.into_iter().map(|(_, r)| r).collect())
    }

    /// The newest rows matching `q`, newest first, each with its row id (the cursor
    /// for the next page: pass the last one as `before`).
    pub fn query_logs(&self, q: &LogQuery) -> Result<Vec<(i64, LogRow)>> {
        let (sql, args) = log_query(q);
        self.read(|db| {
            db.query_map(&sql, &args, |r| {
                Ok((
                    r.get(0)?,
                    LogRow {
                        ts: r.get(1)?,
                        request_id: r.get(2)?,
                        key_id: r.get(3)?,
                        requested_model: r.get(4)?,
                        provider: r.get(5)?,
                        connection_id: r.get(6)?,
                        model: r.get(7)?,
                        status: r.get(8)?,
                        error_code: r.get(9)?,
                        stream: r.get(10)?,
                        attempts: r.get(11)?,
                        latency_ms: r.get(12)?,
                        ttfb_ms: r.get(13)?,
                        prompt_tokens: r.get(14)?,
                        completion_tokens: r.get(15)?,
                        egress_ip: r.get(16)?,
                        client_format: r.get(17)?,
                        failed_attempts: failed_attempts_of(r.get(18)?),
                        route: r
                            .get::<Option<String>>(19)?
                            .and_then(|t| serde_json::from_str(&t).ok()),
                    },
                ))
            })
        })
    }

    /// Deletes up to `batch` of the oldest request-log rows that are older than
    /// `older_than_ms` or beyond the newest `max_rows`; returns how many went. Only the
    /// oldest `batch` rows are read (rows are in time order by row id), so a call that
    /// finds nothing to delete costs as little as one that does; call it again while it
    /// deletes a whole batch.
    pub fn prune_logs(&self, older_than_ms: u64, max_rows: u64, batch: u32) -> Result<usize> {
        self.write(|db| {
            let newest: i64 = db
                .query_one("SELECT coalesce(max(id), 0) FROM request_log", &[])?
                .get(0)?;
            // Row ids grow by one per row and only the oldest are ever deleted, so the rows
            // above this id are at most `max_rows`.
            let keep_above = newest.saturating_sub(i64_of(max_rows));
            db.execute(
                "DELETE FROM request_log WHERE id IN (
                   SELECT id FROM (SELECT id, ts FROM request_log ORDER BY id LIMIT ?3) AS oldest
                   WHERE id <= ?1 OR ts < ?2)",
                &args![keep_above, i64_of(older_than_ms), batch],
            )
        })
    }

    /// The request log's size: its rows, the time of the oldest, and the database file's
    /// bytes (the log is most of it).
    pub fn log_size(&self) -> Result<LogSize> {
        self.read(|db| {
            let rows: u64 = db
                .query_one("SELECT CAST(count(*) AS BIGINT) FROM request_log", &[])?
                .get(0)?;
            let oldest: Option<i64> = db
                .query_opt("SELECT ts FROM request_log ORDER BY id LIMIT 1", &[])?
                .map(|r| r.get(0))
                .transpose()?;
            let bytes: i64 = match db.dialect() {
                Dialect::Sqlite => {
                    let pages: i64 = db.query_one("PRAGMA page_count", &[])?.get(0)?;
                    let page_size: i64 = db.query_one("PRAGMA page_size", &[])?.get(0)?;
                    pages.saturating_mul(page_size)
                }
                Dialect::Postgres => db
                    .query_one(
                        "SELECT CAST(pg_total_relation_size('request_log') AS BIGINT)",
                        &[],
                    )?
                    .get(0)?,
            };
            Ok(LogSize {
                rows,
                oldest_ts: oldest.and_then(|t| u64::try_from(t).ok()),
                database_bytes: u64::try_from(bytes).unwrap_or(0),
            })
        })
    }

    /// Requests since `since_ms`, counted per `bucket_ms`-long bucket, provider,
    /// connection and key, oldest bucket first. Only the rows of the window are read:
    /// rows are in time order, so the scan starts after the newest row older than it.
    pub fn log_series(&self, since_ms: u64, bucket_ms: u64) -> Result<Vec<SeriesRow>> {
        let bucket = i64_of(bucket_ms.max(1));
        self.read(|db| {
            db.query_map(
                "SELECT (ts / ?2) * ?2 AS b, provider, connection_id, key_id,
                   CAST(count(*) AS BIGINT),
                   CAST(sum(CASE WHEN status >= 400 THEN 1 ELSE 0 END) AS BIGINT),
                   CAST(coalesce(sum(prompt_tokens), 0) AS BIGINT),
                   CAST(coalesce(sum(completion_tokens), 0) AS BIGINT)
                 FROM request_log
                 WHERE id > coalesce(
                     (SELECT id FROM request_log WHERE ts < ?1 ORDER BY id DESC LIMIT 1), 0)
                   AND ts >= ?1
                 GROUP BY b, provider, connection_id, key_id
                 ORDER BY b, provider, connection_id, key_id",
                &args![i64_of(since_ms), bucket],
                |r| {
                    Ok(SeriesRow {
                        bucket_ms: r.get(0)?,
                        provider: r.get(1)?,
                        connection_id: r.get(2)?,
                        key_id: r.get(3)?,
                        requests: r.get(4)?,
                        errors: r.get(5)?,
                        prompt_tokens: r.get(6)?,
                        completion_tokens: r.get(7)?,
                    })
                },
            )
        })
    }

    /// The newest `limit` logged requests that reached a connection, oldest first: what
    /// routing's service stats are seeded from at start (SPEC R19).
    pub fn recent_outcomes(&self, limit: usize) -> Result<Vec<OutcomeRow>> {
        let mut rows = self.read(|db| {
            db.query_map(
                "SELECT connection_id, model, status, stream, latency_ms, ttfb_ms, ts
                 FROM request_log WHERE connection_id IS NOT NULL AND model IS NOT NULL
                 ORDER BY id DESC LIMIT ?1",
                &args![limit],
                |r| {
                    Ok(OutcomeRow {
                        connection_id: r.get(0)?,
                        model: r.get(1)?,
                        status: u16::try_from(r.get::<i64>(2)?).unwrap_or(0),
                        stream: r.get(3)?,
                        latency_ms: r.get(4)?,
                        ttfb_ms: r.get::<Option<i64>>(5)?.and_then(|v| u64::try_from(v).ok()),
                        ts: r.get(6)?,
                    })
                },
            )
        })?;
        rows.reverse();
        Ok(rows)
    }

    /// Each connection's newest egress address in the request log since `since_ms`:
    /// `(connection_id, egress_ip, ts)` (SPEC R14's last known egress), from answering
    /// and failed attempts alike. Only the rows of the window are read, as in
    /// [`Store::log_series`].
    pub fn last_egress(&self, since_ms: u64) -> Result<Vec<(String, String, u64)>> {
        let rows = self.read(|db| {
            db.query_map(
                "SELECT ts, connection_id, egress_ip, failed_attempts FROM request_log
                 WHERE id > coalesce(
                     (SELECT id FROM request_log WHERE ts < ?1 ORDER BY id DESC LIMIT 1), 0)
                   AND ts >= ?1
                 ORDER BY id",
                &args![i64_of(since_ms)],
                |r| {
                    Ok((
                        r.get::<u64>(0)?,
                        r.get::<Option<String>>(1)?,
                        r.get::<Option<String>>(2)?,
                        failed_attempts_of(r.get(3)?),
                    ))
                },
            )
        })?;
        // Per connection, the address seen at the greatest time; at equal times the one
        // read last (a row's failed attempts came before its answer).
        let mut newest: BTreeMap<String, (String, u64)> = BTreeMap::new();
        let mut see = |connection: String, egress: String, ts: u64| match newest.get(&connection) {
            Some((_, t)) if *t > ts => {}
            _ => {
                newest.insert(connection, (egress, ts));
            }
        };
        for (ts, connection, egress, failed) in rows {
            for f in failed {
                if let Some(egress) = f.egress_ip {
                    see(f.connection_id, egress, ts);
                }
            }
            if let (Some(connection), Some(egress)) = (connection, egress) {
                see(connection, egress, ts);
            }
        }
        Ok(newest
            .into_iter()
            .map(|(connection, (egress, ts))| (connection, egress, ts))
            .collect())
    }
}

/// The request log's columns a batch writes.
static LOG: Table = Table::new(
    "request_log",
    &[
        ("ts", Column::Int),
        ("request_id", Column::Text),
        ("key_id", Column::Text),
        ("requested_model", Column::Text),
        ("provider", Column::Text),
        ("connection_id", Column::Text),
        ("model", Column::Text),
        ("status", Column::Int),
        ("error_code", Column::Text),
        ("stream", Column::Int),
        ("attempts", Column::Int),
        ("latency_ms", Column::Int),
        ("ttfb_ms", Column::Int),
        ("prompt_tokens", Column::Int),
        ("completion_tokens", Column::Int),
        ("egress_ip", Column::Text),
        ("client_format", Column::Text),
        ("failed_attempts", Column::Text),
        ("route", Column::Text),
    ],
);

/// A row's failed attempts as stored: `NULL` when there are none (most rows).
fn failed_attempts_json(attempts: &[FailedAttempt]) -> Result<Option<String>> {
    if attempts.is_empty() {
        return Ok(None);
    }
    Ok(Some(serde_json::to_string(attempts)?))
}

/// A row's failed attempts as read back; a value this build cannot read is shown as none
/// rather than failing the page.
fn failed_attempts_of(text: Option<String>) -> Vec<FailedAttempt> {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// The statement and arguments of [`Store::query_logs`]: only the filters `q` sets are in
/// it (a `? IS NULL OR` branch would keep SQLite from using the filter's index), each
/// equality on a column whose index ends in the row id, so a page is read newest first
/// without a sort. Statements are cached per shape (at most 2^5 shapes).
fn log_query(q: &LogQuery) -> (String, Vec<Arg<'_>>) {
    let mut sql = String::from(
        "SELECT id, ts, request_id, key_id, requested_model, provider, connection_id, model,
           status, error_code, stream, attempts, latency_ms, ttfb_ms, prompt_tokens,
           completion_tokens, egress_ip, client_format, failed_attempts, route
         FROM request_log WHERE id < ?",
    );
    let mut args = vec![Arg::Int(q.before.unwrap_or(i64::MAX))];
    if let Some(key) = &q.key_id {
        sql.push_str(" AND key_id = ?");
        args.push(Arg::Text(key));
    }
    if let Some(provider) = &q.provider {
        sql.push_str(" AND provider = ?");
        args.push(Arg::Text(provider));
    }
    if let Some(model) = &q.model {
        sql.push_str(" AND (requested_model = ? OR model = ?)");
        args.push(Arg::Text(model));
        args.push(Arg::Text(model));
    }
    match q.status {
        Some(StatusFilter::Exact(status)) => {
            sql.push_str(" AND status = ?");
            args.push(Arg::Int(i64::from(status)));
        }
        Some(range) => {
            let (lo, hi) = range.bounds();
            sql.push_str(" AND status BETWEEN ? AND ?");
            args.push(Arg::Int(i64::from(lo)));
            args.push(Arg::Int(i64::from(hi)));
        }
        None => {}
    }
    if q.since_ms.is_some() || q.until_ms.is_some() {
        sql.push_str(" AND ts BETWEEN ? AND ?");
        args.push(Arg::Int(i64_of(q.since_ms.unwrap_or(0))));
        args.push(Arg::Int(i64_of(q.until_ms.unwrap_or(u64::MAX))));
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    args.push(Arg::Int(i64::from(q.limit)));
    (sql, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_rows_round_trip_newest_first() {
        crate::store::testing::each_backend(|s| {
            let row = |i: u64| LogRow {
                ts: i,
                request_id: format!("r{i}"),
                key_id: Some("k".into()),
                requested_model: "p/m".into(),
                provider: Some("p".into()),
                connection_id: Some("c".into()),
                model: Some("m".into()),
                status: 200,
                error_code: None,
                stream: i.is_multiple_of(2),
                client_format: "anthropic".into(),
                attempts: 1,
                latency_ms: 3,
                ttfb_ms: Some(2),
                prompt_tokens: Some(4),
                completion_tokens: Some(5),
                egress_ip: None,
                failed_attempts: Vec::new(),
                route: None,
            };
            s.insert_log_batch(&[row(1), row(2), row(3)]).unwrap();
            let got = s.recent_logs(2, None).unwrap();
            assert_eq!(got, vec![row(3), row(2)]);
            assert_eq!(s.recent_logs(10, Some("other")).unwrap(), vec![]);
            // A batch written in statements of every size (SQLite: 4 x 32, 8 and 5 x 1
            // rows), or one COPY (PostgreSQL), with every optional column set on some rows.
            let full = |i: u64| LogRow {
                error_code: Some(format!("e{i}")),
                egress_ip: Some("10.0.0.1".into()),
                failed_attempts: vec![FailedAttempt {
                    connection_id: format!("c{i}"),
                    outcome: "rate_limited".into(),
                    upstream_status: Some(429),
                    ..FailedAttempt::default()
                }],
                ttfb_ms: None,
                ..row(i)
            };
            let many: Vec<LogRow> = (10..151)
                .map(|i| if i % 3 == 0 { full(i) } else { row(i) })
                .collect();
            s.insert_log_batch(&many).unwrap();
            let mut back = s.recent_logs(141, None).unwrap();
            back.reverse();
            assert_eq!(back, many);
        });
    }

    /// A log row at `ts` for `key` through `provider`/`model` with `status`.
    fn logged(ts: u64, key: &str, provider: &str, model: &str, status: u16) -> LogRow {
        LogRow {
            ts,
            request_id: format!("r{ts}"),
            key_id: Some(key.into()),
            requested_model: format!("{provider}/{model}"),
            provider: Some(provider.into()),
            connection_id: Some(format!("{provider}-1")),
            model: Some(model.into()),
            status,
            error_code: None,
            stream: false,
            client_format: "openai".into(),
            attempts: 1,
            latency_ms: 3,
            ttfb_ms: None,
            prompt_tokens: Some(10),
            completion_tokens: Some(ts),
            egress_ip: None,
            failed_attempts: Vec::new(),
            route: None,
        }
    }

    #[test]
    fn a_batch_retried_after_its_commit_landed_is_not_written_twice_on_postgresql() {
        crate::store::testing::each_backend(|s| {
            let rows: Vec<LogRow> = (1..=3)
                .map(|ts| logged(ts, "k1", "alpha", "m", 200))
                .collect();
            s.insert_log_batch(&rows).unwrap();
            s.insert_log_batch(&rows).unwrap();
            // SQLite's commit is never lost in transit, so a batch is never retried
            // after it landed; PostgreSQL's answer can be.
            let want = if s.is_shared() { 3 } else { 6 };
            assert_eq!(s.log_size().unwrap().rows, want);
        });
    }

    #[test]
    fn pruning_holds_the_row_cap_and_the_age_in_batches_newest_kept() {
        crate::store::testing::each_backend(|s| {
            let rows: Vec<LogRow> = (1..=1_500)
                .map(|ts| logged(ts, "k1", "alpha", "m", 200))
                .collect();
            s.insert_log_batch(&rows).unwrap();
            assert_eq!(s.log_size().unwrap().rows, 1_500);
            // Written in statements of 64 rows and single rows, every row as it was.
            let mut back: Vec<LogRow> = s
                .query_logs(&LogQuery {
                    limit: 2_000,
                    ..LogQuery::default()
                })
                .unwrap()
                .into_iter()
                .map(|(_, r)| r)
                .collect();
            back.reverse();
            assert_eq!(back, rows);
            // A cap of 1 000, in batches of 200: three full batches, then the rest.
            let mut deleted = Vec::new();
            loop {
                let n = s.prune_logs(0, 1_000, 200).unwrap();
                deleted.push(n);
                if n < 200 {
                    break;
                }
            }
            assert_eq!(deleted, [200, 200, 100]);
            assert_eq!(s.prune_logs(0, 1_000, 200).unwrap(), 0);
            let size = s.log_size().unwrap();
            assert_eq!((size.rows, size.oldest_ts), (1_000, Some(501)));
            assert!(size.database_bytes > 0);
            // More rows come: the cap holds at the newest 1 000.
            let more: Vec<LogRow> = (1_501..=1_750)
                .map(|ts| logged(ts, "k1", "alpha", "m", 200))
                .collect();
            s.insert_log_batch(&more).unwrap();
            assert_eq!(s.prune_logs(0, 1_000, 500).unwrap(), 250);
            assert_eq!(s.log_size().unwrap().oldest_ts, Some(751));
            assert_eq!(s.recent_logs(1, None).unwrap()[0].ts, 1_750);
            // By age: everything before 1 200 goes, a batch of 300, then the rest.
            assert_eq!(s.prune_logs(1_200, 1_000, 300).unwrap(), 300);
            assert_eq!(s.prune_logs(1_200, 1_000, 300).unwrap(), 149);
            assert_eq!(s.prune_logs(1_200, 1_000, 300).unwrap(), 0);
            let size = s.log_size().unwrap();
            assert_eq!((size.rows, size.oldest_ts), (551, Some(1_200)));
            // An empty log has nothing to prune and no oldest row.
            let empty = Store::open_in_memory().unwrap();
            assert_eq!(empty.prune_logs(u64::MAX, 1_000, 10).unwrap(), 0);
            assert_eq!(empty.log_size().unwrap().oldest_ts, None);
        });
    }

    #[test]
    fn the_log_queries_use_their_filters_indexes() {
        let s = Store::open_in_memory().unwrap();
        let some = |v: &str| Some(v.to_owned());
        let plan = |q: LogQuery| -> String {
            let (sql, args) = log_query(&q);
            s.read(|db| {
                db.query_map(&format!("EXPLAIN QUERY PLAN {sql}"), &args, |r| {
                    r.get::<String>(3)
                })
            })
            .unwrap()
            .join("; ")
        };
        let base = || LogQuery {
            limit: 50,
            ..LogQuery::default()
        };
        for (q, index) in [
            (
                LogQuery {
                    key_id: some("k1"),
                    ..base()
                },
                "request_log_key",
            ),
            (
                LogQuery {
                    provider: some("alpha"),
                    ..base()
                },
                "request_log_provider",
            ),
            (
                LogQuery {
                    status: Some(StatusFilter::Exact(429)),
                    ..base()
                },
                "request_log_status",
            ),
            (
                LogQuery {
                    model: some("m"),
                    ..base()
                },
                "request_log_requested_model",
            ),
            (
                LogQuery {
                    model: some("m"),
                    ..base()
                },
                "request_log_model",
            ),
        ] {
            let plan = plan(q);
            assert!(plan.contains(index), "{index}: {plan}");
        }
        // A single filter's page needs no sort: its index ends in the row id.
        assert!(!plan(LogQuery {
            key_id: some("k1"),
            ..base()
        })
        .contains("TEMP B-TREE"));
        // No filter: the newest rows by the row id alone.
        assert_eq!(
            plan(base()),
            "SEARCH request_log USING INTEGER PRIMARY KEY (rowid<?)"
        );
    }

    #[test]
    fn log_queries_filter_every_field_and_page_by_cursor() {
        crate::store::testing::each_backend(|s| {
            s.insert_log_batch(&[
                logged(1, "k1", "alpha", "m", 200),
                logged(2, "k2", "alpha", "m", 429),
                logged(3, "k1", "beta", "n", 502),
                logged(4, "k1", "alpha", "n", 200),
                logged(5, "k2", "beta", "m", 201),
            ])
            .unwrap();
            let ids = |q: LogQuery| -> Vec<String> {
                s.query_logs(&LogQuery { limit: 10, ..q })
                    .unwrap()
                    .into_iter()
                    .map(|(_, r)| r.request_id)
                    .collect()
            };
            assert_eq!(ids(LogQuery::default()), ["r5", "r4", "r3", "r2", "r1"]);
            let key = Some("k1".to_owned());
            assert_eq!(
                ids(LogQuery {
                    key_id: key,
                    ..LogQuery::default()
                }),
                ["r4", "r3", "r1"]
            );
            let provider = Some("beta".to_owned());
            assert_eq!(
                ids(LogQuery {
                    provider,
                    ..LogQuery::default()
                }),
                ["r5", "r3"]
            );
            let requested = Some("alpha/m".to_owned());
            assert_eq!(
                ids(LogQuery {
                    model: requested,
                    ..LogQuery::default()
                }),
                ["r2", "r1"]
            );
            let resolved = Some("n".to_owned());
            assert_eq!(
                ids(LogQuery {
                    model: resolved,
                    ..LogQuery::default()
                }),
                ["r4", "r3"]
            );
            let status = |f| {
                ids(LogQuery {
                    status: Some(f),
                    ..LogQuery::default()
                })
            };
            assert_eq!(status(StatusFilter::Exact(200)), ["r4", "r1"]);
            assert_eq!(status(StatusFilter::Class(2)), ["r5", "r4", "r1"]);
            assert_eq!(status(StatusFilter::Class(5)), ["r3"]);
            assert_eq!(status(StatusFilter::Errors), ["r3", "r2"]);
            let window = LogQuery {
                since_ms: Some(2),
                until_ms: Some(4),
                ..LogQuery::default()
            };
            assert_eq!(ids(window), ["r4", "r3", "r2"]);

            let first = s
                .query_logs(&LogQuery {
                    limit: 2,
                    ..LogQuery::default()
                })
                .unwrap();
            assert_eq!(first.len(), 2);
            let cursor = first[1].0;
            let next = LogQuery {
                before: Some(cursor),
                limit: 2,
                ..LogQuery::default()
            };
            let page: Vec<String> = s
                .query_logs(&next)
                .unwrap()
                .into_iter()
                .map(|(_, r)| r.request_id)
                .collect();
            assert_eq!(page, ["r3", "r2"]);
        });
    }

    #[test]
    fn the_series_counts_requests_errors_and_tokens_per_bucket() {
        crate::store::testing::each_backend(|s| {
            s.insert_log_batch(&[
                logged(59_000, "k1", "alpha", "m", 200),
                logged(60_000, "k1", "alpha", "m", 200),
                logged(61_000, "k1", "alpha", "m", 500),
                logged(62_000, "k2", "alpha", "m", 200),
                logged(125_000, "k1", "beta", "m", 429),
            ])
            .unwrap();
            let row =
                |bucket_ms, provider: &str, key: &str, requests, errors, completion| SeriesRow {
                    bucket_ms,
                    provider: Some(provider.into()),
                    connection_id: Some(format!("{provider}-1")),
                    key_id: Some(key.into()),
                    requests,
                    errors,
                    prompt_tokens: requests * 10,
                    completion_tokens: completion,
                };
            assert_eq!(
                s.log_series(60_000, 60_000).unwrap(),
                vec![
                    row(60_000, "alpha", "k1", 2, 1, 121_000),
                    row(60_000, "alpha", "k2", 1, 0, 62_000),
                    row(120_000, "beta", "k1", 1, 1, 125_000),
                ]
            );
            assert_eq!(
                s.log_series(0, 60_000).unwrap()[0],
                row(0, "alpha", "k1", 1, 0, 59_000)
            );
            assert_eq!(s.log_series(200_000, 60_000).unwrap(), vec![]);
        });
    }

    #[test]
    fn the_last_egress_of_each_connection_comes_from_answering_and_failed_attempts() {
        crate::store::testing::each_backend(|s| {
            let via =
                |ts, provider: &str, egress: Option<&str>, failed: Vec<FailedAttempt>| LogRow {
                    egress_ip: egress.map(str::to_owned),
                    failed_attempts: failed,
                    ..logged(ts, "k1", provider, "m", 200)
                };
            let failed_on = |connection: &str, egress: Option<&str>| FailedAttempt {
                provider: "alpha".into(),
                connection_id: connection.into(),
                model: "m".into(),
                outcome: "server_error".into(),
                egress_ip: egress.map(str::to_owned),
                ..FailedAttempt::default()
            };
            s.insert_log_batch(&[
                // Before the window: not read.
                via(1_000, "gamma", Some("10.0.0.9"), vec![]),
                via(5_000, "alpha", Some("10.0.0.1"), vec![]),
                // A newer address for alpha-1, and beta-1 seen only on a failed attempt.
                via(
                    6_000,
                    "alpha",
                    Some("10.0.0.2"),
                    vec![
                        failed_on("beta-1", Some("10.0.0.3")),
                        failed_on("delta-1", None),
                    ],
                ),
                via(7_000, "epsilon", None, vec![]),
            ])
            .unwrap();
            assert_eq!(
                s.last_egress(2_000).unwrap(),
                vec![
                    ("alpha-1".to_owned(), "10.0.0.2".to_owned(), 6_000),
                    ("beta-1".to_owned(), "10.0.0.3".to_owned(), 6_000),
                ]
            );
            assert_eq!(s.last_egress(8_000).unwrap(), vec![]);
        });
    }

    #[test]
    fn status_filters_keep_their_ranges() {
        assert_eq!(StatusFilter::Exact(429).bounds(), (429, 429));
        assert_eq!(StatusFilter::Class(4).bounds(), (400, 499));
        assert_eq!(StatusFilter::Errors.bounds(), (400, u16::MAX));
    }
}
