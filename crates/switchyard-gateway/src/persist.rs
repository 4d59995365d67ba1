//! Write-behind persistence of runtime state: quota counters (SPEC Q4, Q9), resilience
//! state — breakers and connection health (SPEC R1, R3, R4) — session pins (R15) and
//! combos' last good connections (R19).
//!
//! Every `FLUSH_EVERY` the writer collects what changed and writes it in one
//! transaction each, off the request path. A crash loses at most that interval; a
//! graceful stop flushes everything. Once an hour it deletes quota slots that have left
//! their window and are older than the retention setting. A task of its own prunes the
//! request log to its retention (`requestLog.retentionDays`, `requestLog.maxRows`) at
//! start and every minute, in small batches so neither the log writer nor the flushes
//! are held up.
//!
//! The writer takes the runtime parts, the live configuration (read only) and the store,
//! not `AppState`. Each write runs on the blocking pool after the changed rows have been
//! taken out, so no runtime lock is held while the database works.

use crate::clock::Clock;
use crate::runtime::quota::QuotaEngine;
use crate::runtime::Runtime;
use crate::snapshot::LiveConfig;
use std::sync::Arc;
use std::time::Duration;
use switchyard_store::{LogQueries as _, Store};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often changed counters are written: a second of counting at risk on a crash, and
/// one small transaction per second under load.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// How often expired slots are garbage-collected.
const GC_EVERY: Duration = Duration::from_secs(3_600);

/// How often the request log is pruned to its retention.
const LOG_PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Request-log rows deleted per transaction: a few milliseconds of holding the database.
const LOG_PRUNE_BATCH: u32 = 1_000;

/// Pause between two pruning batches, so the log writer's inserts interleave with them.
const LOG_PRUNE_PAUSE: Duration = Duration::from_millis(10);

const DAY_MS: u64 = 86_400_000;

/// The running writer; `finish` flushes and stops it.
#[derive(Debug)]
pub struct StateWriter {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// The request-log pruner: a task of its own, so a long backlog (a lowered
    /// `requestLog.maxRows`, an upgrade) never holds up the flushes.
    pruner: JoinHandle<()>,
}

/// What the writer reads and writes.
#[derive(Debug)]
struct Parts {
    runtime: Arc<Runtime>,
    config: Arc<LiveConfig>,
    store: Arc<Store>,
    clock: Arc<dyn Clock>,
    /// When other replicas' pins were last read (PostgreSQL only).
    pins_read_at: std::sync::atomic::AtomicU64,
}

impl StateWriter {
    /// Writes `runtime`'s changes to `store`; `config` says which pools exist and how
    /// long consumption is kept.
    pub fn start(
        runtime: Arc<Runtime>,
        config: Arc<LiveConfig>,
        store: Arc<Store>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let pins_read_at = std::sync::atomic::AtomicU64::new(clock.now_ms());
        let parts = Arc::new(Parts {
            runtime,
            config,
            store,
            clock,
            pins_read_at,
        });
        let pruner = tokio::spawn(prune_loop(Arc::clone(&parts), stop_rx.clone()));
        let task = tokio::spawn(write_loop(parts, stop_rx));
        Self { stop, task, pruner }
    }

    pub async fn finish(self) {
        self.stop.send_replace(true);
        for (task, what) in [
            (self.task, "State writer"),
            (self.pruner, "Request-log pruner"),
        ] {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "{what} task failed.");
            }
        }
    }
}

async fn write_loop(state: Arc<Parts>, mut stop: watch::Receiver<bool>) {
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut gc = tokio::time::interval(GC_EVERY);
    gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = flush.tick() => {
                flush_once(&state).await;
                flush_resilience(&state).await;
                flush_pins(&state).await;
                flush_last_good(&state).await;
            }
            _ = gc.tick() => collect_garbage(&state).await,
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
    }
    flush_once(&state).await;
    flush_resilience(&state).await;
    flush_pins(&state).await;
    flush_last_good(&state).await;
}

/// Writes changed last good connections of combos now; on failure they are written
/// again at the next flush. On PostgreSQL, then takes in the marks other replicas wrote
/// (SPEC O6: an `lkgp` combo stays on what worked, whichever replica saw it work).
async fn flush_last_good(state: &Parts) {
    let rows = state.runtime.last_good.take_dirty();
    if !rows.is_empty() {
        if let Some(rows) = write_off_path(state, rows, |s, r| s.save_last_good(r)).await {
            state.runtime.last_good.requeue(rows);
        }
    }
    if !state.store.is_shared() {
        return;
    }
    let store = Arc::clone(&state.store);
    match tokio::task::spawn_blocking(move || store.load_last_good()).await {
        Ok(Ok(rows)) => {
            let snap = state.config.snapshot();
            let known = |combo: &str, conn: &str| {
                snap.catalog.combo(combo).is_some() && snap.catalog.connection(conn).is_some()
            };
            state.runtime.last_good.merge(rows, known);
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "Could not read the last good connections of other replicas; retrying at the next flush.");
        }
        Err(e) => tracing::error!(error = %e, "The last-good read task failed."),
    }
}

/// Writes changed session pins now, deleting those past their time to live; on failure
/// they are written again at the next flush. On PostgreSQL, then takes in the pins other
/// replicas wrote since the last flush (SPEC O6: a session pinned through one replica
/// follows its pin through the others, a flush or two later).
async fn flush_pins(state: &Parts) {
    let rows = state.runtime.affinity.take_dirty();
    let ttl = state.config.snapshot().settings.session_affinity_ttl_ms;
    let now = state.clock.now_ms();
    if !rows.is_empty() {
        let expired_before = now.saturating_sub(ttl);
        let failed = write_off_path(state, rows, move |s, r| s.save_pins(r, expired_before)).await;
        if let Some(rows) = failed {
            state.runtime.affinity.requeue(rows);
        }
    }
    if state.store.is_shared() && ttl > 0 {
        merge_pins(state, now).await;
    }
}

/// How far back each read of other replicas' pins reaches before the previous read: a
/// pin written by a slow flush elsewhere is not missed.
const PINS_OVERLAP_MS: u64 = 5_000;

/// Takes in the pins used since the previous read (less [`PINS_OVERLAP_MS`]).
async fn merge_pins(state: &Parts, now: u64) {
    let since = state
        .pins_read_at
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(PINS_OVERLAP_MS);
    let store = Arc::clone(&state.store);
    let most = switchyard_core::routing::affinity::MAX_PINS;
    match tokio::task::spawn_blocking(move || store.load_pins(since, most)).await {
        Ok(Ok(rows)) => {
            state.runtime.affinity.merge(rows);
            state
                .pins_read_at
                .store(now, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "Could not read the session pins of other replicas; retrying at the next flush.");
        }
        Err(e) => tracing::error!(error = %e, "The pin read task failed."),
    }
}

/// Writes changed breakers and connection health now; on failure they are written again
/// at the next flush.
async fn flush_resilience(state: &Parts) {
    let (breakers, health) = state.runtime.resilience.take_dirty();
    if breakers.is_empty() && health.is_empty() {
        return;
    }
    let now = state.clock.now_ms();
    let rows = (breakers, health);
    let failed = write_off_path(state, rows, move |s, (b, h)| s.save_resilience(b, h, now)).await;
    if let Some((breakers, health)) = failed {
        state.runtime.resilience.requeue(&breakers, &health);
    }
}

/// Writes the changed quota slots now; on failure they are written again at the next
/// flush.
async fn flush_once(state: &Parts) {
    let rows = state
        .runtime
        .quota
        .take_dirty(&state.config.snapshot().quota);
    if rows.is_empty() {
        return;
    }
    if let Some(rows) = write_off_path(state, rows, |s, r| s.save_consumption(r)).await {
        state.runtime.quota.requeue(&rows);
    }
}

/// Runs `write` with `rows` on the blocking pool; gives the rows back when it failed.
async fn write_off_path<R: Send + 'static>(
    state: &Parts,
    rows: R,
    write: impl FnOnce(&Store, &R) -> switchyard_store::Result<()> + Send + 'static,
) -> Option<R> {
    let store = Arc::clone(&state.store);
    match tokio::task::spawn_blocking(move || {
        let result = write(&store, &rows);
        (result, rows)
    })
    .await
    {
        Ok((Ok(()), _)) => None,
        Ok((Err(e), rows)) => {
            tracing::error!(error = %e, "Failed to persist runtime state; will retry.");
            Some(rows)
        }
        Err(e) => {
            tracing::error!(error = %e, "Persistence task failed.");
            None
        }
    }
}

async fn collect_garbage(state: &Parts) {
    let retention_ms = state.config.snapshot().settings.quota.retention_days * DAY_MS;
    let now = QuotaEngine::now(&state.runtime.quota);
    let store = Arc::clone(&state.store);
    match tokio::task::spawn_blocking(move || store.gc_consumption(now, retention_ms)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::info!(deleted = n, "Deleted expired quota consumption slots."),
        Ok(Err(e)) => tracing::warn!(error = %e, "Quota retention cleanup failed."),
        Err(e) => tracing::warn!(error = %e, "Quota retention task failed."),
    }
}

/// Prunes the request log at start and every [`LOG_PRUNE_EVERY`] until stopped.
async fn prune_loop(state: Arc<Parts>, mut stop: watch::Receiver<bool>) {
    let mut prune = tokio::time::interval(LOG_PRUNE_EVERY);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = prune.tick() => prune_request_log(&state, &stop).await,
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

/// Deletes request-log rows past their retention, a batch at a time, until a batch finds
/// less than a whole one to delete or the writer is stopped.
async fn prune_request_log(state: &Parts, stop: &watch::Receiver<bool>) {
    let retention = state.config.snapshot().settings.request_log;
    let older_than = state
        .clock
        .now_ms()
        .saturating_sub(retention.days.saturating_mul(DAY_MS));
    let mut deleted: usize = 0;
    while !*stop.borrow() {
        let batch = Arc::clone(&state.store)
            .prune(older_than, retention.max_rows, LOG_PRUNE_BATCH)
            .await;
        match batch {
            Ok(n) => {
                deleted = deleted.saturating_add(n);
                if n < LOG_PRUNE_BATCH as usize {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "Request-log pruning failed; retrying at the next run.");
                break;
            }
        }
        tokio::time::sleep(LOG_PRUNE_PAUSE).await;
    }
    if deleted > 0 {
        tracing::info!(
            deleted,
            retention_days = retention.days,
            max_rows = retention.max_rows,
            "Pruned the request log to its retention."
        );
    }
}
