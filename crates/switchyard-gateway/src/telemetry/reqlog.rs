//! The request log (SPEC G9), written off the request path.
//!
//! Requests hand their row to a bounded channel and never wait: when the buffer is full
//! the row is dropped and counted (`switchyard_request_log_dropped_total`), because
//! slowing client traffic down to protect a log would invert priorities. A background
//! writer drains the channel in batches, one SQLite transaction per batch: after the first
//! row of a batch it lingers briefly so that, under load, one transaction carries hundreds
//! of rows instead of a handful. On shutdown the writer drains what is buffered and exits.
//! The writer also counts every row into the last hour's per-minute [`MinuteSeries`],
//! which the dashboard's charts read (its lock is shared by the writer and the readers,
//! never by the request path).

use super::series::MinuteSeries;
use crate::sync::lock;
use prometheus_client::metrics::counter::Counter;
use std::sync::{Arc, Mutex};
use switchyard_core::routing::trace::{Decision, Fact};
use switchyard_store::{LogRow, LogSink, RouteStep, RouteTrace, SeriesRow};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Rows buffered between requests and the writer. At 10 000 requests/s this is one
/// second of traffic: enough to ride out a slow disk, small enough (a few MiB) to bound.
pub const BUFFER_ROWS: usize = 10_000;

/// Largest batch per transaction; keeps each write short so management writes that
/// share the database are not starved.
const MAX_BATCH: usize = 512;

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
        let task = tokio::spawn(write_loop(sink, Arc::clone(&series), rx, stop_rx));
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

async fn write_loop(
    sink: Arc<dyn LogSink>,
    series: Arc<Mutex<MinuteSeries>>,
    mut rx: mpsc::Receiver<Entry>,
    mut stop: watch::Receiver<bool>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    // A dropped `LogWriter` (its sender gone) counts as a stop request.
    let mut stopping = false;
    while !stopping {
        tokio::select! {
            n = rx.recv_many(&mut batch, MAX_BATCH) => {
                if n == 0 {
                    return;
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
                flush(&sink, &series, &mut batch).await;
            }
            r = stop.changed() => stopping = r.is_err() || *stop.borrow(),
        }
    }
    rx.close();
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        flush(&sink, &series, &mut batch).await;
    }
}

async fn flush(sink: &Arc<dyn LogSink>, series: &Mutex<MinuteSeries>, batch: &mut Vec<Entry>) {
    let rows: Vec<LogRow> = batch
        .drain(..)
        .map(|(mut row, route)| {
            row.route = route.as_ref().map(trace);
            row
        })
        .collect();
    {
        let mut s = lock(series);
        for row in &rows {
            s.add(row);
        }
    }
    let count = rows.len();
    if let Err(e) = Arc::clone(sink).write_batch(rows).await {
        tracing::error!(error = %e, rows = count, "Failed to write request-log rows.");
    }
    batch.reserve(MAX_BATCH);
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
    use switchyard_store::{StoreError, StoreFuture};

    /// A sink that keeps the ids of each batch it is given, and fails when told to.
    #[derive(Debug)]
    struct Kept {
        batches: Mutex<Vec<Vec<String>>>,
        fail: bool,
    }

    impl LogSink for Kept {
        fn write_batch(self: Arc<Self>, rows: Vec<LogRow>) -> StoreFuture<()> {
            Box::pin(async move {
                let ids = rows.iter().map(|r| r.request_id.clone()).collect();
                lock(&self.batches).push(ids);
                if self.fail {
                    return Err(StoreError::Database("the disk is full".into()));
                }
                Ok(())
            })
        }
    }

    #[tokio::test]
    async fn every_row_reaches_the_sink_once_in_order_and_a_failing_sink_stops_nothing() {
        for fail in [false, true] {
            let sink = Arc::new(Kept {
                batches: Mutex::default(),
                fail,
            });
            let (log, writer) = RequestLog::start(Arc::clone(&sink) as _, Counter::default(), &[]);
            for ts in 1..=3 {
                log.record(row(ts, "p", "k", 200), None);
            }
            writer.finish().await;
            assert_eq!(
                lock(&sink.batches).concat(),
                ["r1", "r2", "r3"],
                "fail: {fail}"
            );
        }
    }
}
