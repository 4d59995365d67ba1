//! Concurrency gates (SPEC R7, R8, R10): the shell around the pure all-gates state
//! machine ([`switchyard_core::resilience::gates`]) and the pure admission decisions
//! ([`switchyard_core::resilience::admission`]).
//!
//! A request asks for every gate it needs at once — global, provider, account, model —
//! and gets all of them or waits for all of them. Waiters are served fairly across
//! client keys, weighted like their quota allocation. Before a request joins a queue it
//! is admitted: a queue at `maxQueueDepth` refuses it at once, and so does a wait that
//! cannot end within `maxWaitMs` judging by the queue ahead and the service times seen
//! on the connection (with an honest `Retry-After`).
//!
//! Permits are released exactly once, when dropped: on success, on error, when the
//! client disconnects, when a stream ends, and on panic. A waiter that gives up (timeout,
//! client gone) leaves the queue; if its slots were handed over at that very moment, they
//! are passed on rather than leaked.
//!
//! The state sits behind one std mutex, taken for each step and never across an `.await`
//! (a waiter waits on its own channel); nothing here imports `AppState`, the pipeline or
//! the error type.

use crate::clock::Stopwatch;
use crate::sync::lock;
use crate::telemetry::metrics::GateMetrics;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_core::resilience::admission::{self, Limits, Refusal};
use switchyard_core::resilience::gates::{GateId, Gates as Machine, Need, Outcome};
use tokio::sync::oneshot;

/// Weight of the newest service time in the moving average: recent enough to follow a
/// provider that slows down, smooth enough that one odd request does not swing it.
const SERVICE_EMA_ALPHA: f64 = 0.2;

#[derive(Debug)]
struct Waiter {
    tx: oneshot::Sender<()>,
    connection: Arc<str>,
}

#[derive(Debug, Default)]
struct State {
    machine: Machine,
    waiters: HashMap<u64, Waiter>,
    /// Waiters per connection, whichever gates they wait for (SPEC R10's queue).
    by_connection: HashMap<Arc<str>, usize>,
    next_id: u64,
    /// Moving average of how long a permit is held, per connection, in ms.
    service_ms: HashMap<Arc<str>, f64>,
}

impl State {
    fn waiting_on(&self, connection: &str) -> usize {
        self.by_connection.get(connection).copied().unwrap_or(0)
    }
}

/// Every gate of this process. See the module docs.
#[derive(Debug)]
pub struct Gates {
    state: Mutex<State>,
    metrics: GateMetrics,
}

/// How a refused or timed-out wait is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Refusals are errors for the client.
    Strict,
    /// Quota-share dispatch (SPEC R8): on a full queue or a timeout the request goes
    /// ahead without a slot, so no refusal is decided ahead of time.
    FailOpen,
}

/// One request's ask.
#[derive(Debug)]
pub struct Ask<'a> {
    pub key: &'a str,
    /// The key's share, 1.0 without a quota allocation.
    pub weight: f64,
    /// The connection whose queue the request joins (SPEC R10's provider+connection).
    pub connection: &'a str,
    pub needs: Vec<Need>,
    pub limits: Limits,
    /// The hard bound of any one gate's queue.
    pub max_waiters: usize,
    pub mode: Mode,
}

/// Held slots; released on drop.
#[derive(Debug)]
pub struct Permit {
    gates: Arc<Gates>,
    needs: Vec<Need>,
    connection: Arc<str>,
    held: Stopwatch,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let held_ms = self.held.elapsed_ms() as f64;
        let mut st = lock(&self.gates.state);
        let avg = st
            .service_ms
            .entry(Arc::clone(&self.connection))
            .or_insert(held_ms);
        *avg += SERVICE_EMA_ALPHA * (held_ms - *avg);
        let started = st.machine.release(&self.needs);
        self.gates.wake(&mut st, started);
    }
}

impl Gates {
    pub fn new(metrics: GateMetrics) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            metrics,
        })
    }

    /// Requests running on `connection`'s account gate plus requests waiting for it.
    pub fn load(&self, connection: &str) -> usize {
        let gate = GateId::Account(Arc::from(connection));
        let st = lock(&self.state);
        st.machine.used(&gate) + st.waiting_on(connection)
    }

    /// Requests waiting for slots, over every gate.
    pub fn waiting(&self) -> usize {
        lock(&self.state).machine.waiting()
    }

    /// Forgets the service times of connections that no longer exist.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        lock(&self.state).service_ms.retain(|c, _| live(c));
    }

    /// Hands slots to the waiters the state machine started.
    fn wake(&self, st: &mut State, started: Vec<u64>) {
        for id in started {
            if let Some(w) = st.waiters.remove(&id) {
                self.left_queue(st, &w.connection);
                // A receiver that is gone belongs to a waiter whose guard passes the
                // slots on when it drops.
                let _ = w.tx.send(());
            }
        }
    }

    fn left_queue(&self, st: &mut State, connection: &Arc<str>) {
        let n = st.by_connection.get(connection).map_or(0, |n| n - 1);
        if n == 0 {
            st.by_connection.remove(connection);
        } else {
            st.by_connection.insert(Arc::clone(connection), n);
        }
        self.metrics.queue_depth(connection).set(gauge_value(n));
    }

    /// Counts a refusal the client sees (fail-open waits go ahead instead).
    fn refuse(&self, connection: &str, mode: Mode, refusal: Refusal) -> Refusal {
        if mode == Mode::Strict {
            self.metrics.rejected(connection, refusal.code());
        }
        refusal
    }

    fn permit(self: &Arc<Self>, needs: Vec<Need>, connection: Arc<str>) -> Permit {
        Permit {
            gates: Arc::clone(self),
            needs,
            connection,
            held: Stopwatch::start(),
        }
    }

    /// Takes every slot `ask.needs` lists if that needs no wait; `None` when it would
    /// have to queue (the caller may try another candidate first).
    pub fn try_acquire(self: &Arc<Self>, ask: &Ask<'_>) -> Option<Option<Permit>> {
        if ask.needs.is_empty() {
            return Some(None);
        }
        let mut st = lock(&self.state);
        if st.machine.ahead(&ask.needs) > 0 || !st.machine.fits(&ask.needs) {
            return None;
        }
        let id = st.next_id;
        st.next_id += 1;
        let key: Arc<str> = Arc::from(ask.key);
        let (outcome, started) = st.machine.acquire(&key, ask.weight, id, ask.needs.clone());
        self.wake(&mut st, started);
        (outcome == Outcome::Granted)
            .then(|| Some(self.permit(ask.needs.clone(), Arc::from(ask.connection))))
    }

    /// Takes every slot `ask.needs` lists, waiting at most `ask.limits.max_wait_ms`.
    /// `Ok(None)` when the ask has no gates (nothing to hold).
    pub async fn acquire(self: &Arc<Self>, ask: Ask<'_>) -> Result<Option<Permit>, Refusal> {
        if ask.needs.is_empty() {
            return Ok(None);
        }
        let connection: Arc<str> = Arc::from(ask.connection);
        let key: Arc<str> = Arc::from(ask.key);
        let (id, rx) = {
            let mut st = lock(&self.state);
            let ahead = st.machine.ahead(&ask.needs);
            let at_once = ahead == 0 && st.machine.fits(&ask.needs);
            if !at_once {
                let depth = st.waiting_on(ask.connection);
                if let Err(r) = admission::admit(&ask.limits, depth as u64) {
                    return Err(self.refuse(ask.connection, ask.mode, r));
                }
                if ahead >= ask.max_waiters {
                    return Err(self.refuse(ask.connection, ask.mode, Refusal::GateQueueFull));
                }
                if ask.mode == Mode::Strict {
                    let capacity = ask.needs.iter().map(|n| n.capacity).min().unwrap_or(1);
                    let position = st.machine.position(ask.key, &ask.needs);
                    let service = st.service_ms.get(&connection).map(|ms| *ms as u64);
                    if let Err(r) = admission::judge_wait(
                        &ask.limits,
                        position as u64,
                        capacity as u64,
                        service,
                    ) {
                        return Err(self.refuse(ask.connection, ask.mode, r));
                    }
                }
            }
            let id = st.next_id;
            st.next_id += 1;
            let (outcome, started) = st.machine.acquire(&key, ask.weight, id, ask.needs.clone());
            self.wake(&mut st, started);
            if outcome == Outcome::Granted {
                return Ok(Some(self.permit(ask.needs, connection)));
            }
            let (tx, rx) = oneshot::channel();
            st.waiters.insert(
                id,
                Waiter {
                    tx,
                    connection: Arc::clone(&connection),
                },
            );
            let n = st.waiting_on(ask.connection) + 1;
            st.by_connection.insert(Arc::clone(&connection), n);
            self.metrics.queue_depth(ask.connection).set(gauge_value(n));
            (id, rx)
        };
        let waited = Stopwatch::start();
        let mut waiting = Waiting {
            gates: Arc::clone(self),
            key,
            id,
            needs: ask.needs,
            rx,
            armed: true,
        };
        // The receiver stays alive until the waiter has left the queue, so slots handed
        // over in between are always received (and counted), never lost.
        let wait = Duration::from_millis(ask.limits.max_wait_ms);
        let _ = tokio::time::timeout(wait, &mut waiting.rx).await;
        waiting.armed = false;
        // Still queued after the wait: timed out. Otherwise the slots were handed over,
        // before the wait ended or just as it did: they are ours.
        let timed_out = waiting.leave();
        self.metrics
            .wait_seconds(ask.connection)
            .observe(waited.elapsed().as_secs_f64());
        if timed_out {
            return Err(self.refuse(ask.connection, ask.mode, Refusal::QueueTimeout));
        }
        Ok(Some(
            self.permit(std::mem::take(&mut waiting.needs), connection),
        ))
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A queued waiter; leaves the queue when its future is dropped (client gone).
struct Waiting {
    gates: Arc<Gates>,
    key: Arc<str>,
    id: u64,
    needs: Vec<Need>,
    /// Dropped only after `leave`, when the struct's fields drop.
    rx: oneshot::Receiver<()>,
    armed: bool,
}

impl Waiting {
    /// Leaves the queue; false when the slots had already been handed over.
    fn leave(&self) -> bool {
        let mut st = lock(&self.gates.state);
        let Some(started) = st.machine.cancel(&self.key, self.id) else {
            return false;
        };
        if let Some(w) = st.waiters.remove(&self.id) {
            self.gates.left_queue(&mut st, &w.connection);
        }
        self.gates.wake(&mut st, started);
        true
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.armed && !self.leave() {
            // The slots were handed to this waiter, which is gone: pass them on.
            let mut st = lock(&self.gates.state);
            let started = st.machine.release(&self.needs);
            self.gates.wake(&mut st, started);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::metrics::Metrics;
    use switchyard_core::resilience::admission::DEFAULTS;

    const LONG_MS: u64 = 10_000;

    fn gates() -> Arc<Gates> {
        Gates::new(Metrics::new().gates)
    }

    fn account(capacity: usize) -> Vec<Need> {
        vec![Need {
            gate: GateId::Account(Arc::from("c")),
            capacity,
        }]
    }

    fn ask(key: &str, capacity: usize, wait_ms: u64) -> Ask<'_> {
        Ask {
            key,
            weight: 1.0,
            connection: "c",
            needs: account(capacity),
            limits: Limits {
                max_wait_ms: wait_ms,
                ..DEFAULTS
            },
            max_waiters: 1_000,
            mode: Mode::Strict,
        }
    }

    #[tokio::test]
    async fn capacity_holders_at_most_and_release_on_drop() {
        let g = gates();
        let a = g.acquire(ask("k", 2, LONG_MS)).await.unwrap();
        let b = g.acquire(ask("k", 2, LONG_MS)).await.unwrap();
        assert_eq!(g.load("c"), 2);
        assert_eq!(
            g.acquire(ask("k", 2, 20)).await.err(),
            Some(Refusal::QueueTimeout)
        );
        assert_eq!(g.load("c"), 2);
        drop(a);
        assert_eq!(g.load("c"), 1);
        let d = g.acquire(ask("k", 2, LONG_MS)).await.unwrap();
        drop((b, d));
        assert_eq!(g.load("c"), 0);
    }

    #[tokio::test]
    async fn waiting_counts_the_queued_requests_only() {
        let g = gates();
        let held = g.acquire(ask("k", 1, LONG_MS)).await.unwrap();
        assert_eq!(g.waiting(), 0);
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let g = Arc::clone(&g);
                tokio::spawn(async move { g.acquire(ask("k", 1, LONG_MS)).await.is_ok() })
            })
            .collect();
        while g.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(g.waiting(), 2);
        drop(held);
        for w in waiters {
            assert!(w.await.unwrap());
        }
        assert_eq!(g.waiting(), 0);
    }

    #[tokio::test]
    async fn no_gates_means_nothing_to_hold() {
        let g = gates();
        let mut a = ask("k", 1, LONG_MS);
        a.needs.clear();
        assert!(g.acquire(a).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_panicking_holder_gives_its_slot_back() {
        let g = gates();
        let held = Arc::clone(&g);
        let task = tokio::spawn(async move {
            let _permit = held.acquire(ask("k", 1, LONG_MS)).await;
            panic!("handler bug");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(g.load("c"), 0);
        assert!(g.acquire(ask("k", 1, 20)).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_hard_bound_of_a_gate_queue_is_said_at_once() {
        let g = gates();
        let held = g.acquire(ask("k", 1, LONG_MS)).await.unwrap();
        let waiter = {
            let g = Arc::clone(&g);
            tokio::spawn(async move {
                let mut a = ask("k", 1, LONG_MS);
                a.max_waiters = 1;
                g.acquire(a).await.map(|p| p.is_some())
            })
        };
        while g.load("c") < 2 {
            tokio::task::yield_now().await;
        }
        let mut a = ask("k", 1, LONG_MS);
        a.max_waiters = 1;
        assert_eq!(g.acquire(a).await.err(), Some(Refusal::GateQueueFull));
        drop(held);
        assert_eq!(waiter.await.unwrap(), Ok(true));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn timeouts_racing_releases_never_leak_or_exceed_a_slot() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let g = gates();
        let holders = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                let (g, holders, peak) = (Arc::clone(&g), Arc::clone(&holders), Arc::clone(&peak));
                tokio::spawn(async move {
                    for j in 0..40u64 {
                        // Waits so short that many end exactly as slots are handed over.
                        let wait_ms = 1 + (i * 7 + j * 13) % 3;
                        if let Ok(Some(p)) = g.acquire(ask("k", 2, wait_ms)).await {
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
        assert_eq!(g.load("c"), 0);
        // Full capacity is still there.
        let a = g.acquire(ask("k", 2, LONG_MS)).await.unwrap();
        let b = g.acquire(ask("k", 2, LONG_MS)).await.unwrap();
        assert!(a.is_some() && b.is_some());
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_the_queue() {
        let g = gates();
        let held = g.acquire(ask("k", 1, LONG_MS)).await.unwrap();
        let waiter = {
            let g = Arc::clone(&g);
            tokio::spawn(async move { g.acquire(ask("k", 1, LONG_MS)).await.is_ok() })
        };
        while g.load("c") < 2 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(g.load("c"), 1);
        drop(held);
        assert_eq!(g.load("c"), 0);
    }
}
