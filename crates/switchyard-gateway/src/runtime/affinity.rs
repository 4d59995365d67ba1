//! Session pins (SPEC R15) as the request path reads and updates them: the core's
//! bounded [`Table`] behind a [`PinStore`] (this process's memory now; a shared store for
//! several replicas is one more implementation, SPEC O6), with write-behind persistence
//! by the `persist` writer and the pins read back at start. The decisions — which id,
//! pinned first, the lifecycle — are core functions
//! ([`switchyard_core::routing::affinity`]).

use crate::sync::lock;
use std::sync::Mutex;
use switchyard_core::routing::affinity::{after, Ending, Pin, SessionKey, Table};
use switchyard_core::UnixMillis;
use switchyard_store::{PinChange, PinRow};

/// Where the pins live. Each call runs `f` on the whole table as one step (never across
/// an `.await`).
pub trait PinStore: Send + Sync {
    fn with<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R;
}

/// The pins in this process's memory.
#[derive(Debug, Default)]
pub struct MemoryPins(Mutex<Table>);

impl PinStore for MemoryPins {
    fn with<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        f(&mut lock(&self.0))
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Affinity<S: PinStore = MemoryPins> {
    store: S,
}

impl<S: PinStore> Affinity<S> {
    /// The session's live pin, if any.
    pub fn pin(&self, key: &SessionKey, ttl_ms: u64, now: UnixMillis) -> Option<Pin> {
        self.store.with(|t| t.get(key, ttl_ms, now))
    }

    /// Applies the lifecycle after a request of `key_id`'s session `key` that read
    /// `pin` and ended as `ending`.
    pub fn settle(
        &self,
        key: SessionKey,
        key_id: &str,
        pin: Option<&Pin>,
        ending: Ending<'_>,
        now: UnixMillis,
    ) {
        let change = after(pin, ending);
        tracing::debug!(session = ?key, change = ?change, "Session pin.");
        self.store.with(|t| t.apply(key, key_id, change, now));
    }

    /// Keeps only the pins `keep` says yes to (the configuration changed).
    pub fn retain(&self, keep: impl Fn(&Pin) -> bool) {
        self.store.with(|t| t.retain(keep));
    }

    /// Removes a session's pin; whether it had one.
    pub fn release(&self, key: &SessionKey) -> bool {
        self.store.with(|t| t.remove(key))
    }

    /// The live pins, most recently used first.
    pub fn live(&self, ttl_ms: u64, now: UnixMillis) -> Vec<(SessionKey, Pin)> {
        self.store.with(|t| t.live(ttl_ms, now))
    }

    /// Puts persisted pins back (rows with a malformed key are skipped).
    pub fn load(&self, rows: Vec<PinRow>) {
        let pins = rows
            .into_iter()
            .filter_map(|r| Some((SessionKey::from_hex(&r.session_key)?, pin_of(r))));
        self.store.with(|t| t.load(pins));
    }

    /// Takes in pins other replicas wrote, where newer (rows with a malformed key are
    /// skipped); see [`Table::merge`].
    pub fn merge(&self, rows: Vec<PinRow>) {
        let pins: Vec<_> = rows
            .into_iter()
            .filter_map(|r| Some((SessionKey::from_hex(&r.session_key)?, pin_of(r))))
            .collect();
        self.store.with(|t| t.merge(pins));
    }

    /// The changes to persist, as rows.
    pub fn take_dirty(&self) -> Vec<PinChange> {
        let changes = self.store.with(Table::take_dirty);
        changes
            .into_iter()
            .map(|(key, pin)| {
                let hex = key.to_hex();
                let row = pin.map(|p| PinRow {
                    session_key: hex.clone(),
                    key_id: p.key_id,
                    connection_id: p.connection,
                    created_at: p.created_ms,
                    last_used_at: p.last_ms,
                });
                (hex, row)
            })
            .collect()
    }

    /// Gives back rows that could not be written.
    pub fn requeue(&self, rows: Vec<PinChange>) {
        let changes = rows
            .into_iter()
            .filter_map(|(hex, row)| Some((SessionKey::from_hex(&hex)?, row.map(pin_of))))
            .collect();
        self.store.with(|t| t.requeue(changes));
    }
}

/// A stored pin as the table holds it.
fn pin_of(r: PinRow) -> Pin {
    Pin {
        connection: r.connection_id,
        key_id: r.key_id,
        created_ms: r.created_at,
        last_ms: r.last_used_at,
    }
}
