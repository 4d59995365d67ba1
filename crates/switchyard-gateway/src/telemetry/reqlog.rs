//! The request log (SPEC G9), written off the request path.
//!
//! Requests hand their row to a bounded channel and never wait: when the buffer is full
//! the row is dropped and counted (`switchyard_request_log_dropped_total`), because
//! slowing client traffic down to protect a log would invert priorities. A background
//! writer drains the channel in batches, one SQLite transaction per batch: after the first
//! row of a batch it lingers briefly so that, under load, one transaction carries hundreds
//! of rows instead of a handful. On shutdown the writer drains what is buffered and exits.
//! A batch the database did not take (PostgreSQL down, a full disk) is kept, in order,
//! and written again once a second until it lands; the rows so kept are bounded
//! ([`BACKLOG_ROWS`]): past it the oldest are dropped and counted with the others.
//! The writer also counts every row into the last hour's per-minute [`MinuteSeries`],
//! which the dashboard's charts read (its lock is shared by the writer and the readers,
//! never by the request path).

use super::series::MinuteSeries;
use crate::sync::lock;
use prometheus_client::metrics::counter::Counter;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_core::routing::trace::{Decision, Fact};
use switchyard_model::{LogRow, RouteStep, RouteTrace, SeriesRow};
use switchyard_store::{LogSink, Unwritten};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Rows buffered between requests and the writer. At 10 000 requests/s this is one
/// second of traffic: enough to ride out a slow disk, small enough (a few MiB) to bound.
pub const BUFFER_ROWS: usize = 10_000;

/// Largest batch per transaction; keeps each write short so management writes that
/// share the database are not starved.
const MAX_BATCH: usize = 512;

/// Rows kept for a retry while the database refuses them: at 5 000 requests/s, ten
/// seconds of an outage (some 25 MiB of rows at most).
pub const BACKLOG_ROWS: usize = 50_000;

/// How long the writer waits before trying the database again after a failed write.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// How long the writer waits for more rows after the first of a batch. Rows become
/// visible at most this much later; in exchange the per-transaction cost (which
/// dominated the writer's CPU at one row per transaction) is shared by the whole batch.
const LINGER: std::time::Duration = std::time::Duration::from_millis(100);

/// A row as the request hands it over: its routing decision is rendered into the
/// row's trace by the writer, off the request path.
type Entry = (LogRow, Option<Decision>);

/// The request side of the log.
#[derive(Debug, Clone)]
pub struct RequestLog {
    tx: mpsc::Sender<Entry>,
    dropped: Counter,
    series: Arc<Mutex<MinuteSeries>>,
}

/// The writer side; `finish` flushes and stops it.
#[derive(Debug)]
pub struct LogWriter {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RequestLog {
    /// Creates the log and starts its writer; `recent` (the stored log's last hour per
    /// minute) seeds the per-minute series.
    pub fn start(
        sink: Arc<dyn LogSink>,
        dropped: Counter,
        recent: &[SeriesRow],
    ) -> (Self, LogWriter) {
        let (tx, rx) = mpsc::channel(BUFFER_ROWS);
        let (stop, stop_rx) = watch::channel(false);
        let mut series = MinuteSeries::default();
        series.seed(recent);
        let series = Arc::new(Mutex::new(series));
        let task = tokio::spawn(write_loop(
            sink,
            Arc::clone(&series),
            dropped.clone(),
            rx,
            stop_rx,
        ));
        (
            Self {
                tx,
                dropped,
                series,
            },
            LogWriter { stop, task },
        )
    }

    /// The per-minute counters from `since_ms` on (see [`MinuteSeries::rows`]).
    pub fn series_since(&self, since_ms: u64) -> Vec<SeriesRow> {
        lock(&self.series).rows(since_ms)
    }

    /// Records a row, with the request's routing decision if it was routed, without
    /// waiting.
    pub fn record(&self, row: LogRow, route: Option<Decision>) {
        if self.tx.try_send((row, route)).is_err() {
            let before = self.dropped.inc();
            if before.is_multiple_of(1000) {
                tracing::warn!(
                    dropped_total = before + 1,
                    "Request-log buffer is full or closed; dropping rows."
                );
            }
        }
    }
}

impl LogWriter {
    /// Flushes every buffered row and stops the writer.
    pub async fn finish(self) {
        self.stop.send_replace(true);
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "Request-log writer task failed.");
        }
    }
}

/// Batches the sink did not take yet, oldest first, bounded by [`BACKLOG_ROWS`].
#[derive(Debug, Default)]
struct Backlog {
    batches: VecDeque<Vec<LogRow>>,
    rows: usize,
}

impl Backlog {
    /// Queues `rows` behind the others; how many of the oldest rows were dropped to
    /// stay within [`BACKLOG_ROWS`].
    fn push(&mut self, rows: Vec<LogRow>) -> usize {
        if rows.is_empty() {
            return 0;
        }
        self.rows += rows.len();
        self.batches.push_back(rows);
        let mut dropped = 0;
        while self.rows > BACKLOG_ROWS {
            match self.batches.pop_front() {
                Some(oldest) => {
                    self.rows -= oldest.len();
                    dropped += oldest.len();
                }
                None => break,
            }
        }
        dropped
    }

    /// Writes the queued batches in order until one fails (which goes back in front).
    /// Whether everything was written.
    async fn drain(&mut self, sink: &Arc<dyn LogSink>) -> Result<(), Unwritten> {
        while let Some(rows) = self.batches.pop_front() {
            self.rows -= rows.len();
            if let Err(mut failed) = Arc::clone(sink).write_batch(rows).await {
                let rows = std::mem::take(&mut failed.rows);
                self.rows += rows.len();
                if !rows.is_empty() {
                    self.batches.push_front(rows);
                }
                return Err(failed);
            }
        }
        Ok(())
    }
}

/// The writer's side of the log: the sink, the series it counts rows into, and what
/// the sink has not taken yet.
struct Writer {
    sink: Arc<dyn LogSink>,
    series: Arc<Mutex<MinuteSeries>>,
    dropped: Counter,
    backlog: Backlog,
    /// While the database refuses rows, no write is tried before this.
    retry_at: Option<tokio::time::Instant>,
}

impl Writer {
    /// Counts `batch` into the series and writes it, behind anything kept from before.
    async fn flush(&mut self, batch: &mut Vec<Entry>) {
        let rows: Vec<LogRow> = batch
            .drain(..)
            .map(|(mut row, route)| {
                row.route = route.as_ref().map(trace);
                row
            })
            .collect();
        lock(&self.series).add_all(&rows);
        let lost = self.backlog.push(rows);
        self.count_lost(lost);
        if self
            .retry_at
            .is_none_or(|at| tokio::time::Instant::now() >= at)
        {
            self.write().await;
        }
        batch.reserve(MAX_BATCH);
    }

    /// Tries to write everything kept.
    async fn write(&mut self) {
        match self.backlog.drain(&self.sink).await {
            Ok(()) => {
                if self.retry_at.take().is_some() {
                    tracing::info!(
                        "The request log is written again; the rows kept meanwhile are in."
                    );
                }
            }
            Err(failed) => {
                if self.retry_at.is_none() {
                    tracing::error!(error = %failed.error, kept = self.backlog.rows, "Failed to write request-log rows; keeping them (at most {BACKLOG_ROWS}) and retrying every second.");
                }
                self.retry_at = Some(tokio::time::Instant::now() + RETRY_AFTER);
            }
        }
    }

    fn count_lost(&self, lost: usize) {
        if lost > 0 {
            let before = self.dropped.inc_by(u64::try_from(lost).unwrap_or(u64::MAX));
            tracing::warn!(
                dropped_total = before.saturating_add(u64::try_from(lost).unwrap_or(0)),
                "The request log's retry backlog is full; dropping its oldest rows."
            );
        }
    }
}

async fn write_loop(
    sink: Arc<dyn LogSink>,
    series: Arc<Mutex<MinuteSeries>>,
    dropped: Counter,
    mut rx: mpsc::Receiver<Entry>,
    mut stop: watch::Receiver<bool>,
) {
    let mut w = Writer {
        sink,
        series,
        dropped,
        backlog: Backlog::default(),
        retry_at: None,
    };
    let mut batch = Vec::with_capacity(MAX_BATCH);
    // A dropped `LogWriter` (its sender gone) counts as a stop request.
    let mut stopping = false;
    while !stopping {
        let retry = w.retry_at;
        tokio::select! {
            n = rx.recv_many(&mut batch, MAX_BATCH) => {
                if n == 0 {
                    break;
                }
                if batch.len() < MAX_BATCH {
                    tokio::select! {
                        () = tokio::time::sleep(LINGER) => {}
                        r = stop.changed() => stopping = r.is_err() || *stop.borrow(),
                    }
                    while batch.len() < MAX_BATCH {
                        match rx.try_recv() {
                            Ok(row) => batch.push(row),
                            Err(_) => break,
                        }
                    }
                }
                w.flush(&mut batch).await;
            }
            () = sleep_until(retry) => w.write().await,
            r = stop.changed() => stopping = r.is_err() || *stop.borrow(),
        }
    }
    rx.close();
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        w.flush(&mut batch).await;
    }
    w.write().await;
    if w.backlog.rows > 0 {
        tracing::error!(
            rows = w.backlog.rows,
            "Stopping with request-log rows the database did not take; they are lost."
        );
        w.count_lost(w.backlog.rows);
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The stored form of a routing decision.
pub fn trace(d: &Decision) -> RouteTrace {
    use serde_json::Value;
    let order = d
        .candidates
        .iter()
        .enumerate()
        .map(|(i, c)| RouteStep {
            provider: c.connection.provider.clone(),
            model: c.upstream_model.clone(),
            connection_id: c.connection.id.clone(),
            facts: d
                .facts_of(i)
                .into_iter()
                .map(|(name, fact)| {
                    let value = match fact {
                        Fact::Count(n) => Value::from(n),
                        Fact::Number(x) => Value::from(x),
                        Fact::Flag(b) => Value::Bool(b),
                        Fact::Unknown => Value::Null,
                    };
                    (name.to_owned(), value)
                })
                .collect(),
        })
        .collect();
    RouteTrace {
        strategy: d.strategy.to_owned(),
        facts: d.read.names().into_iter().map(str::to_owned).collect(),
        draw: d.draw,
        turn: d.turn,
        order,
        first: d.first.map(|f| f.as_str().to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::series::tests::row;
    use switchyard_store::StoreError;

    /// A sink that keeps the ids of each batch it writes, and refuses the first
    /// `failures` writes.
    #[derive(Debug)]
    struct Kept {
        batches: Mutex<Vec<Vec<String>>>,
        failures: Mutex<usize>,
    }

    impl Kept {
        fn failing(failures: usize) -> Arc<Self> {
            Arc::new(Self {
                batches: Mutex::default(),
                failures: Mutex::new(failures),
            })
        }
    }

    impl LogSink for Kept {
        fn write_batch(
            self: Arc<Self>,
            rows: Vec<LogRow>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Unwritten>> + Send>>
        {
            Box::pin(async move {
                {
                    let mut left = lock(&self.failures);
                    if *left > 0 {
                        *left -= 1;
                        return Err(Unwritten {
                            error: StoreError::Unavailable("PostgreSQL is down".into()),
                            rows,
                        });
                    }
                }
                let ids = rows.iter().map(|r| r.request_id.clone()).collect();
                lock(&self.batches).push(ids);
                Ok(())
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_row_reaches_the_sink_once_in_order_even_after_it_refused_them() {
        for failures in [0, 1, 3] {
            let sink = Kept::failing(failures);
            let dropped = Counter::default();
            let (log, writer) = RequestLog::start(Arc::clone(&sink) as _, dropped.clone(), &[]);
            for ts in 1..=3 {
                log.record(row(ts, "p", "k", 200), None);
            }
            // The first batch goes after the linger; refused, it is retried each second.
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(
                lock(&sink.batches).concat(),
                ["r1", "r2", "r3"],
                "failures: {failures}"
            );
            log.record(row(4, "p", "k", 200), None);
            writer.finish().await;
            assert_eq!(
                lock(&sink.batches).concat(),
                ["r1", "r2", "r3", "r4"],
                "failures: {failures}"
            );
            assert_eq!(dropped.get(), 0);
        }
    }

    #[tokio::test]
    async fn rows_a_sink_never_takes_are_counted_as_dropped_at_the_stop() {
        let sink = Kept::failing(usize::MAX);
        let dropped = Counter::default();
        let (log, writer) = RequestLog::start(Arc::clone(&sink) as _, dropped.clone(), &[]);
        for ts in 1..=3 {
            log.record(row(ts, "p", "k", 200), None);
        }
        writer.finish().await;
        assert!(lock(&sink.batches).is_empty());
        assert_eq!(dropped.get(), 3);
    }

    #[test]
    fn the_backlog_keeps_the_newest_rows_within_its_bound() {
        let mut b = Backlog::default();
        let rows = |n: usize| vec![row(1, "p", "k", 200); n];
        assert_eq!(b.push(rows(0)), 0);
        assert_eq!(b.push(rows(BACKLOG_ROWS - 10)), 0);
        assert_eq!(b.push(rows(10)), 0);
        assert_eq!(b.rows, BACKLOG_ROWS);
        // One more row drops the oldest batch, whole.
        assert_eq!(b.push(rows(1)), BACKLOG_ROWS - 10);
        assert_eq!((b.rows, b.batches.len()), (11, 2));
    }
}
