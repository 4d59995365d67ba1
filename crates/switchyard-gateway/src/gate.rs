//! A concurrency gate with a fair queue: at most `capacity` holders; further requests
//! wait in a bounded queue served by deficit round robin across client keys
//! ([`switchyard_core::quota::drr`]), weighted like their quota allocation.
//!
//! Permits are released exactly once, when dropped: on success, on error, when the
//! client disconnects, when a stream ends, and on panic. A waiter that gives up (timeout,
//! client gone) leaves the queue; if its slot was handed over at that very moment, the
//! slot is passed on rather than leaked.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_core::quota::drr::Drr;
use tokio::sync::oneshot;

#[derive(Debug)]
struct State {
    capacity: usize,
    in_use: usize,
    drr: Drr,
    waiters: HashMap<u64, oneshot::Sender<()>>,
    next_id: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct FairGate {
    state: Mutex<State>,
}

/// How an acquisition ended.
#[derive(Debug)]
pub enum Acquire {
    Granted(GatePermit),
    /// The queue was full.
    QueueFull,
    /// The wait exceeded its bound.
    TimedOut,
}

/// A held slot; released on drop.
#[derive(Debug)]
pub struct GatePermit {
    gate: Arc<FairGate>,
}

impl Drop for GatePermit {
    fn drop(&mut self) {
        self.gate.release();
    }
}

impl FairGate {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                capacity,
                in_use: 0,
                drr: Drr::new(),
                waiters: HashMap::new(),
                next_id: 0,
            }),
        })
    }

    /// Requests running plus requests waiting.
    pub fn load(&self) -> usize {
        let st = lock(&self.state);
        st.in_use + st.drr.len()
    }

    /// Changes the capacity (configuration change), waking waiters if it grew.
    pub fn set_capacity(self: &Arc<Self>, capacity: usize) {
        let mut st = lock(&self.state);
        st.capacity = capacity;
        while st.in_use < st.capacity && Self::hand_over(&mut st) {
            st.in_use += 1;
        }
    }

    /// Gives the next waiter a slot; false when nobody is waiting.
    fn hand_over(st: &mut State) -> bool {
        while let Some((_, id)) = st.drr.pop() {
            if let Some(tx) = st.waiters.remove(&id) {
                if tx.send(()).is_ok() {
                    return true;
                }
            }
        }
        false
    }

    fn release(&self) {
        let mut st = lock(&self.state);
        st.in_use = st.in_use.saturating_sub(1);
        while st.in_use < st.capacity && Self::hand_over(&mut st) {
            st.in_use += 1;
        }
    }

    /// Takes a slot for `key` (weight = its share), waiting at most `wait` in a queue of
    /// at most `max_queue`.
    pub async fn acquire(
        self: &Arc<Self>,
        key: &str,
        weight: f64,
        wait: Duration,
        max_queue: usize,
    ) -> Acquire {
        let (id, rx) = {
            let mut st = lock(&self.state);
            if st.in_use < st.capacity && st.drr.is_empty() {
                st.in_use += 1;
                return Acquire::Granted(GatePermit {
                    gate: Arc::clone(self),
                });
            }
            if st.drr.len() >= max_queue {
                return Acquire::QueueFull;
            }
            let id = st.next_id;
            st.next_id += 1;
            let (tx, rx) = oneshot::channel();
            st.drr.push(key, weight, id, 1.0);
            st.waiters.insert(id, tx);
            (id, rx)
        };
        let mut waiting = Waiting {
            gate: Arc::clone(self),
            key: key.to_owned(),
            id,
            rx,
            armed: true,
        };
        // The receiver stays alive until the waiter has left the queue, so a slot handed
        // over in between is always received (and counted), never lost.
        let granted = matches!(
            tokio::time::timeout(wait, &mut waiting.rx).await,
            Ok(Ok(()))
        );
        waiting.armed = false;
        if granted || !waiting.leave() {
            // Granted, or granted just as the wait ended: the slot is ours.
            return Acquire::Granted(GatePermit {
                gate: Arc::clone(self),
            });
        }
        Acquire::TimedOut
    }
}

/// A queued waiter; leaves the queue when its future is dropped (client gone).
struct Waiting {
    gate: Arc<FairGate>,
    key: String,
    id: u64,
    /// Dropped only after `leave`, when the struct's fields drop.
    rx: oneshot::Receiver<()>,
    armed: bool,
}

impl Waiting {
    /// Leaves the queue; false when the slot had already been handed over.
    fn leave(&self) -> bool {
        let mut st = lock(&self.gate.state);
        st.waiters.remove(&self.id);
        st.drr.remove(&self.key, self.id)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.armed && !self.leave() {
            // The slot was handed to this waiter, which is gone: pass it on.
            self.gate.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn capacity_holders_at_most_and_release_on_drop() {
        let gate = FairGate::new(2);
        let a = gate.acquire("k", 1.0, LONG, 10).await;
        let b = gate.acquire("k", 1.0, LONG, 10).await;
        assert!(matches!(a, Acquire::Granted(_)) && matches!(b, Acquire::Granted(_)));
        assert_eq!(gate.load(), 2);
        let c = gate.acquire("k", 1.0, Duration::from_millis(20), 10).await;
        assert!(matches!(c, Acquire::TimedOut));
        assert_eq!(gate.load(), 2);
        drop(a);
        assert_eq!(gate.load(), 1);
        let d = gate.acquire("k", 1.0, LONG, 10).await;
        assert!(matches!(d, Acquire::Granted(_)));
        drop((b, d));
        assert_eq!(gate.load(), 0);
    }

    #[tokio::test]
    async fn a_full_queue_is_said_at_once() {
        let gate = FairGate::new(1);
        let held = gate.acquire("k", 1.0, LONG, 1).await;
        let g = Arc::clone(&gate);
        let waiter = tokio::spawn(async move {
            matches!(g.acquire("k", 1.0, LONG, 1).await, Acquire::Granted(_))
        });
        tokio::task::yield_now().await;
        while gate.load() < 2 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(
            gate.acquire("k", 1.0, LONG, 1).await,
            Acquire::QueueFull
        ));
        drop(held);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn waiters_are_served_fairly_across_keys() {
        let gate = FairGate::new(1);
        let held = gate.acquire("a", 1.0, LONG, 100).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (key, n) in [("a", 6), ("b", 2)] {
            for _ in 0..n {
                let (g, o) = (Arc::clone(&gate), Arc::clone(&order));
                tasks.push(tokio::spawn(async move {
                    if let Acquire::Granted(p) = g.acquire(key, 1.0, LONG, 100).await {
                        o.lock().unwrap().push(key);
                        tokio::task::yield_now().await;
                        drop(p);
                    }
                }));
                while gate.load() < 1 + tasks.len() {
                    tokio::task::yield_now().await;
                }
            }
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            vec!["a", "b", "a", "b", "a", "a", "a", "a"]
        );
        assert_eq!(gate.load(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn timeouts_racing_releases_never_leak_or_exceed_a_slot() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let gate = FairGate::new(2);
        let holders = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let (gate, holders, peak) =
                    (Arc::clone(&gate), Arc::clone(&holders), Arc::clone(&peak));
                tokio::spawn(async move {
                    for j in 0..40u64 {
                        // Waits so short that many end exactly as a slot is handed over.
                        let wait = Duration::from_micros((i * 7 + j * 13) % 300);
                        if let Acquire::Granted(p) = gate.acquire("k", 1.0, wait, 1_000).await {
                            let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            holders.fetch_sub(1, Ordering::SeqCst);
                            drop(p);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 2);
        assert_eq!(gate.load(), 0);
        // Full capacity is still there.
        let a = gate.acquire("k", 1.0, LONG, 10).await;
        let b = gate.acquire("k", 1.0, LONG, 10).await;
        assert!(matches!((a, b), (Acquire::Granted(_), Acquire::Granted(_))));
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_the_queue() {
        let gate = FairGate::new(1);
        let held = gate.acquire("k", 1.0, LONG, 10).await;
        let g = Arc::clone(&gate);
        let waiter = tokio::spawn(async move { g.acquire("k", 1.0, LONG, 10).await });
        while gate.load() < 2 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(gate.load(), 1);
        drop(held);
        assert_eq!(gate.load(), 0);
    }
}
