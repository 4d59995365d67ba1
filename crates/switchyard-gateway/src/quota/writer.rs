//! Write-behind persistence of quota counters, and retention (SPEC Q4, Q9).
//!
//! Every [`FLUSH_EVERY`] the writer collects the slots that changed and upserts their
//! absolute values in one transaction, off the request path. A crash loses at most that
//! interval of counting; a graceful stop flushes everything. Once an hour it deletes
//! slots that have left their window and are older than the retention setting.

use super::QuotaEngine;
use crate::state::AppState;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often changed counters are written: a second of counting at risk on a crash, and
/// one small transaction per second under load.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// How often expired slots are garbage-collected.
const GC_EVERY: Duration = Duration::from_secs(3_600);

const DAY_MS: u64 = 86_400_000;

/// The running writer; `finish` flushes and stops it.
#[derive(Debug)]
pub struct QuotaWriter {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl QuotaWriter {
    pub fn start(state: Arc<AppState>) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(write_loop(state, stop_rx));
        Self { stop, task }
    }

    pub async fn finish(self) {
        self.stop.send_replace(true);
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "Quota writer task failed.");
        }
    }
}

async fn write_loop(state: Arc<AppState>, mut stop: watch::Receiver<bool>) {
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut gc = tokio::time::interval(GC_EVERY);
    gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = flush.tick() => flush_once(&state).await,
            _ = gc.tick() => collect_garbage(&state).await,
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
    }
    flush_once(&state).await;
}

/// Writes the changed slots now.
pub async fn flush_once(state: &Arc<AppState>) {
    let rows = state.quota.take_dirty(&state.snapshot().quota);
    if rows.is_empty() {
        return;
    }
    let count = rows.len();
    let store = Arc::clone(&state.store);
    match tokio::task::spawn_blocking(move || store.save_consumption(&rows)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, rows = count, "Failed to persist quota counters.")
        }
        Err(e) => tracing::error!(error = %e, "Quota persistence task failed."),
    }
}

async fn collect_garbage(state: &Arc<AppState>) {
    let retention_ms = state.snapshot().settings.quota.retention_days * DAY_MS;
    let now = QuotaEngine::now(&state.quota);
    let store = Arc::clone(&state.store);
    match tokio::task::spawn_blocking(move || store.gc_consumption(now, retention_ms)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::info!(deleted = n, "Deleted expired quota consumption slots."),
        Ok(Err(e)) => tracing::warn!(error = %e, "Quota retention cleanup failed."),
        Err(e) => tracing::warn!(error = %e, "Quota retention task failed."),
    }
}
