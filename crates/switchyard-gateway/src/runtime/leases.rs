//! Exclusive session leases (SPEC R16) as the gateway holds them: the core's [`Table`]
//! published for the request path to read without a lock, and every change written
//! through to the store before it is published, so the store's unique indexes on the
//! active owner and the active connection decide a race (SPEC R16; the same rule holds
//! across replicas, O6). Unlike pins, leases are not written behind: a lease the store
//! did not take is not granted. The decisions are the core's
//! ([`switchyard_core::routing::lease`]).

use crate::sync::lock;
use arc_swap::{ArcSwap, Guard};
use std::sync::{Arc, Mutex};
use switchyard_core::routing::lease::{Ended, Lease, OwnerHash, Refusal, Table, Write};
use switchyard_core::UnixMillis;
use switchyard_store::{Store, StoreError};

/// Why a lease change did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("the lease store failed: {0}")]
    Store(#[from] StoreError),
    #[error("the lease task failed: {0}")]
    Task(String),
}

/// A decision's answer and the writes that make it so.
pub type Decided<T> = Result<(T, Vec<Write>), Refusal>;

/// See the module docs.
#[derive(Debug)]
pub struct Leases {
    store: Arc<Store>,
    published: ArcSwap<Table>,
    /// Serializes this process's changes (held in a blocking task, never across an
    /// `.await`); readers never take it.
    writing: Mutex<()>,
}

impl Leases {
    pub fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            published: ArcSwap::from_pointee(Table::default()),
            writing: Mutex::new(()),
        }
    }

    /// The leases now: what routing and the fence read.
    pub fn table(&self) -> Guard<Arc<Table>> {
        self.published.load()
    }

    /// Reads the active leases back from the store, between this process's own changes:
    /// when another replica announced a change of its own.
    pub fn refresh(&self, now: UnixMillis) -> Result<(), StoreError> {
        let _writing = lock(&self.writing);
        self.reload(now)
    }

    /// Reads the active leases back from the store (at start, and after the store
    /// refused a write because another process holds what this one thought free).
    pub fn reload(&self, now: UnixMillis) -> Result<(), StoreError> {
        let leases = self.store.load_leases(now)?;
        self.published.store(Arc::new(Table::of(leases)));
        Ok(())
    }

    /// Runs `decide` on the current table and persists the writes it returns (with the
    /// lapsed leases' ends) in one transaction, then publishes them; its answer comes
    /// back. `decide` gets the next generation of `owner` from the store's history (0
    /// when no owner is named). When the store refuses the write as a conflict, the
    /// table is read again from the store and `decide` runs once more on it.
    pub async fn change<T: Send + 'static>(
        self: &Arc<Self>,
        now: UnixMillis,
        owner: Option<OwnerHash>,
        decide: impl Fn(&Table, u64) -> Decided<T> + Send + 'static,
    ) -> Result<T, LeaseError> {
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.change_now(now, owner, decide))
            .await
            .map_err(|e| LeaseError::Task(e.to_string()))?
    }

    fn change_now<T>(
        &self,
        now: UnixMillis,
        owner: Option<OwnerHash>,
        decide: impl Fn(&Table, u64) -> Decided<T>,
    ) -> Result<T, LeaseError> {
        let _writing = lock(&self.writing);
        let next = match owner {
            Some(o) => self.store.lease_generation(&o)?.saturating_add(1),
            None => 0,
        };
        let decide = |t: &Table| decide(t, next);
        match self.try_change(now, &decide) {
            Err(LeaseError::Store(StoreError::Conflict { kind, id })) => {
                tracing::info!(%kind, %id, "Another process holds a lease this one did not know of; reading the leases again.");
                self.reload(now)?;
                self.try_change(now, &decide)
            }
            other => other,
        }
    }

    fn try_change<T>(
        &self,
        now: UnixMillis,
        decide: &impl Fn(&Table) -> Decided<T>,
    ) -> Result<T, LeaseError> {
        let current = self.published.load_full();
        let (answer, writes) = decide(&current)?;
        let mut all = current.lapsed(now);
        all.extend(writes);
        if all.is_empty() {
            return Ok(answer);
        }
        self.store.write_leases(&all, now)?;
        let mut next = Table::clone(&current);
        for w in &all {
            next.apply(w);
        }
        self.published.store(Arc::new(next));
        Ok(answer)
    }

    /// Ends the leases `gone` says yes to (the configuration took their key, its
    /// permission or their connection away), in a task of its own: the configuration
    /// install that calls this does not wait on the store.
    pub fn invalidate(self: &Arc<Self>, now: UnixMillis, gone: impl Fn(&Lease) -> bool) {
        let owners: Vec<OwnerHash> = self
            .table()
            .live(now)
            .into_iter()
            .filter(|l| gone(l))
            .map(|l| l.owner)
            .collect();
        if owners.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = Arc::clone(self);
        runtime.spawn(async move {
            let ended = this
                .change(now, None, move |t, _| {
                    let writes = owners
                        .iter()
                        .filter(|o| t.of_owner(o, now).is_some())
                        .map(|&owner| Write::End {
                            owner,
                            how: Ended::Invalidated,
                        })
                        .collect::<Vec<_>>();
                    Ok((writes.len(), writes))
                })
                .await;
            match ended {
                Ok(n) => tracing::info!(leases = n, "Ended the leases whose key or connection the configuration took away."),
                Err(e) => tracing::warn!(error = %e, "Could not end the leases whose key or connection the configuration took away."),
            }
        });
    }

    /// The live leases, most recently acquired first.
    pub fn live(&self, now: UnixMillis) -> Vec<Lease> {
        self.table().live(now)
    }
}
