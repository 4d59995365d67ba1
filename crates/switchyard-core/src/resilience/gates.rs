//! Concurrency gates taken together (SPEC R7): a request needs a slot on several gates
//! at once — global, its provider, its account (connection), its model on that account
//! — and takes all of them or none. One state machine owns every gate, so taking several
//! is one step: no request ever holds some of its gates while waiting for the others,
//! and no two requests can deadlock on each other.
//!
//! Requests that do not fit wait per client key. When slots free up, keys take turns
//! (weighted round robin by the key's share, the deficit scheme of [`crate::quota::drr`]):
//! each turn a key earns its weight in credit and may start its oldest waiter if that
//! waiter's gates all have room. A waiter that does not fit does not hold up waiters of
//! other keys whose gates are free; a newcomer never overtakes a waiter that needs any
//! of the same gates.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// One gate. Ordered global → provider → account → model, the order of SPEC R7.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GateId {
    Global,
    Provider(Arc<str>),
    Account(Arc<str>),
    Model {
        connection: Arc<str>,
        model: Arc<str>,
    },
}

/// A slot a request needs, with the gate's capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub gate: GateId,
    pub capacity: usize,
}

/// Weights below this are raised to it, so a key of weight 0 is still served.
const MIN_WEIGHT: f64 = 0.01;

#[derive(Debug, Clone)]
struct Waiter {
    id: u64,
    needs: Vec<Need>,
}

#[derive(Debug, Clone)]
struct KeyQueue {
    weight: f64,
    credit: f64,
    waiters: VecDeque<Waiter>,
}

/// What an acquisition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every slot taken.
    Granted,
    /// Waiting; `ahead` waiters are queued for the most contended of its gates.
    Queued { ahead: usize },
}

/// Every gate and every waiter.
#[derive(Debug, Clone, Default)]
pub struct Gates {
    used: HashMap<GateId, usize>,
    /// Waiters per gate they need (a waiter counts once on each of its gates).
    queued: HashMap<GateId, usize>,
    queues: HashMap<Arc<str>, KeyQueue>,
    /// Keys with waiters, in turn order.
    ring: VecDeque<Arc<str>>,
    waiting: usize,
}

fn add(map: &mut HashMap<GateId, usize>, needs: &[Need]) {
    for n in needs {
        *map.entry(n.gate.clone()).or_insert(0) += 1;
    }
}

fn sub(map: &mut HashMap<GateId, usize>, needs: &[Need]) {
    for n in needs {
        if let Some(u) = map.get_mut(&n.gate) {
            *u = u.saturating_sub(1);
            if *u == 0 {
                map.remove(&n.gate);
            }
        }
    }
}

impl Gates {
    /// Slots of `gate` held.
    pub fn used(&self, gate: &GateId) -> usize {
        self.used.get(gate).copied().unwrap_or(0)
    }

    /// Requests waiting for `gate` (among others).
    pub fn queued(&self, gate: &GateId) -> usize {
        self.queued.get(gate).copied().unwrap_or(0)
    }

    /// Requests waiting.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Waiters ahead of a newcomer needing `needs`: the longest queue among its gates.
    pub fn ahead(&self, needs: &[Need]) -> usize {
        needs
            .iter()
            .map(|n| self.queued(&n.gate))
            .max()
            .unwrap_or(0)
    }

    /// Whether every gate of `needs` has a free slot.
    pub fn fits(&self, needs: &[Need]) -> bool {
        needs.iter().all(|n| self.used(&n.gate) < n.capacity)
    }

    /// Takes every slot `needs` asks for, or queues the request under `key`.
    pub fn acquire(&mut self, key: &Arc<str>, weight: f64, id: u64, needs: Vec<Need>) -> Outcome {
        let ahead = self.ahead(&needs);
        if ahead == 0 && self.fits(&needs) {
            add(&mut self.used, &needs);
            return Outcome::Granted;
        }
        let q = self
            .queues
            .entry(Arc::clone(key))
            .or_insert_with(|| KeyQueue {
                weight: 0.0,
                credit: 0.0,
                waiters: VecDeque::new(),
            });
        q.weight = weight.max(MIN_WEIGHT);
        if q.waiters.is_empty() {
            self.ring.push_back(Arc::clone(key));
        }
        add(&mut self.queued, &needs);
        q.waiters.push_back(Waiter { id, needs });
        self.waiting += 1;
        Outcome::Queued { ahead }
    }

    /// Frees the slots `needs` held and starts the waiters that now fit; returns their
    /// ids in start order.
    pub fn release(&mut self, needs: &[Need]) -> Vec<u64> {
        sub(&mut self.used, needs);
        self.dispatch()
    }

    fn head_fits(&self, key: &str) -> bool {
        self.queues
            .get(key)
            .and_then(|q| q.waiters.front())
            .is_some_and(|w| self.fits(&w.needs))
    }

    /// Starts waiters while any fits: keys take turns, each turn earning its weight in
    /// credit; a waiter starts when its key has a whole credit and its gates have room.
    pub fn dispatch(&mut self) -> Vec<u64> {
        let mut started = Vec::new();
        while self.ring.iter().any(|k| self.head_fits(k)) {
            for _ in 0..self.ring.len() {
                let Some(key) = self.ring.pop_front() else {
                    break;
                };
                let fits = self.head_fits(&key);
                let Some(q) = self.queues.get_mut(&key) else {
                    continue;
                };
                if fits {
                    q.credit += q.weight;
                    if q.credit >= 1.0 {
                        q.credit -= 1.0;
                        if let Some(w) = q.waiters.pop_front() {
                            let empty = q.waiters.is_empty();
                            self.waiting -= 1;
                            started.push(w.id);
                            sub(&mut self.queued, &w.needs);
                            add(&mut self.used, &w.needs);
                            if empty {
                                self.queues.remove(&key);
                            } else {
                                self.ring.push_back(key);
                            }
                            // The next turn starts at the key after this one.
                            break;
                        }
                    }
                }
                self.ring.push_back(key);
            }
        }
        started
    }

    /// Removes a waiter that gave up (timeout, client gone); returns whether it was
    /// waiting. `false` means it was started meanwhile and holds its slots.
    pub fn cancel(&mut self, key: &str, id: u64) -> bool {
        let Some(q) = self.queues.get_mut(key) else {
            return false;
        };
        let Some(pos) = q.waiters.iter().position(|w| w.id == id) else {
            return false;
        };
        let Some(w) = q.waiters.remove(pos) else {
            return false;
        };
        sub(&mut self.queued, &w.needs);
        self.waiting -= 1;
        if q.waiters.is_empty() {
            self.queues.remove(key);
            self.ring.retain(|k| &**k != key);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    fn need(gate: GateId, capacity: usize) -> Need {
        Need { gate, capacity }
    }

    fn account(a: &str) -> GateId {
        GateId::Account(a.into())
    }

    #[test]
    fn all_or_nothing_no_partial_holds() {
        let mut g = Gates::default();
        let b = vec![need(account("b"), 1)];
        assert_eq!(g.acquire(&k("x"), 1.0, 1, b.clone()), Outcome::Granted);
        // Needs a and b; b is full: nothing is taken, not even a.
        let ab = vec![need(account("a"), 1), need(account("b"), 1)];
        assert_eq!(
            g.acquire(&k("y"), 1.0, 2, ab.clone()),
            Outcome::Queued { ahead: 0 }
        );
        assert_eq!(g.used(&account("a")), 0);
        // Freeing b starts the waiter with both.
        assert_eq!(g.release(&b), vec![2]);
        assert_eq!((g.used(&account("a")), g.used(&account("b"))), (1, 1));
        assert_eq!(g.release(&ab), Vec::<u64>::new());
        assert_eq!(g.waiting(), 0);
    }

    #[test]
    fn gates_in_order_global_provider_account_model() {
        let mut ids = vec![
            GateId::Model {
                connection: "c".into(),
                model: "m".into(),
            },
            account("c"),
            GateId::Provider("p".into()),
            GateId::Global,
        ];
        ids.sort();
        assert_eq!(
            ids,
            [
                GateId::Global,
                GateId::Provider("p".into()),
                account("c"),
                GateId::Model {
                    connection: "c".into(),
                    model: "m".into()
                },
            ]
        );
    }

    #[test]
    fn a_waiter_does_not_block_others_on_free_gates_and_newcomers_do_not_overtake() {
        let mut g = Gates::default();
        let a = vec![need(account("a"), 1)];
        let b = vec![need(account("b"), 1)];
        assert_eq!(g.acquire(&k("k1"), 1.0, 1, a.clone()), Outcome::Granted);
        assert_eq!(
            g.acquire(&k("k1"), 1.0, 2, a.clone()),
            Outcome::Queued { ahead: 0 }
        );
        // Another account is free: granted at once.
        assert_eq!(g.acquire(&k("k2"), 1.0, 3, b.clone()), Outcome::Granted);
        // A newcomer for account a waits behind the earlier waiter.
        assert_eq!(
            g.acquire(&k("k3"), 1.0, 4, a.clone()),
            Outcome::Queued { ahead: 1 }
        );
        assert_eq!(g.release(&a), vec![2]);
        assert_eq!(g.release(&a), vec![4]);
    }

    #[test]
    fn keys_take_turns_whatever_their_backlog() {
        let mut g = Gates::default();
        let one = vec![need(account("a"), 1)];
        assert_eq!(
            g.acquire(&k("holder"), 1.0, 0, one.clone()),
            Outcome::Granted
        );
        for i in 1..=6 {
            g.acquire(&k("a"), 1.0, i, one.clone());
        }
        for i in 101..=102 {
            g.acquire(&k("b"), 1.0, i, one.clone());
        }
        let mut order = Vec::new();
        for _ in 0..8 {
            order.extend(g.release(&one));
        }
        assert_eq!(order, [1, 101, 2, 102, 3, 4, 5, 6]);
    }

    #[test]
    fn weights_set_the_proportions() {
        let mut g = Gates::default();
        let one = vec![need(account("a"), 1)];
        g.acquire(&k("holder"), 1.0, 0, one.clone());
        for i in 0..20 {
            g.acquire(&k("heavy"), 0.75, i, one.clone());
            g.acquire(&k("light"), 0.25, 100 + i, one.clone());
        }
        let mut order = Vec::new();
        for _ in 0..16 {
            order.extend(g.release(&one));
        }
        let heavy = order.iter().filter(|id| **id < 100).count();
        assert_eq!(heavy, 12);
    }

    #[test]
    fn cancelled_waiters_leave_the_queue() {
        let mut g = Gates::default();
        let one = vec![need(GateId::Global, 1)];
        g.acquire(&k("k"), 1.0, 1, one.clone());
        g.acquire(&k("k"), 1.0, 2, one.clone());
        g.acquire(&k("j"), 1.0, 3, one.clone());
        assert!(g.cancel("k", 2));
        assert!(!g.cancel("k", 2));
        assert_eq!(g.waiting(), 1);
        assert_eq!(g.release(&one), vec![3]);
    }

    proptest! {
        /// Capacities are never exceeded, and once every holder has released, every
        /// waiter has been started: no deadlock, nobody forgotten.
        #[test]
        fn capacities_hold_and_everyone_is_served(
            requests in proptest::collection::vec(
                (0usize..3, proptest::collection::vec(0usize..4, 1..4), 0u32..4),
                1..40,
            ),
        ) {
            let gate = |i: usize| match i {
                0 => GateId::Global,
                1 => GateId::Provider("p".into()),
                2 => account("a"),
                _ => account("b"),
            };
            let caps = [3usize, 2, 1, 2];
            let mut g = Gates::default();
            let mut needs_of = HashMap::new();
            let mut running: Vec<u64> = Vec::new();
            for (i, (key, gates, w)) in requests.iter().enumerate() {
                let mut ids: Vec<usize> = gates.clone();
                ids.sort_unstable();
                ids.dedup();
                let needs: Vec<Need> = ids.iter().map(|&x| need(gate(x), caps[x])).collect();
                needs_of.insert(i as u64, needs.clone());
                let key: Arc<str> = Arc::from(format!("k{key}"));
                if g.acquire(&key, f64::from(*w) / 4.0, i as u64, needs) == Outcome::Granted {
                    running.push(i as u64);
                }
                for (x, cap) in caps.iter().enumerate() {
                    prop_assert!(g.used(&gate(x)) <= *cap);
                }
            }
            let mut served = running.len();
            while let Some(id) = running.pop() {
                let started = g.release(&needs_of[&id]);
                served += started.len();
                running.extend(started);
                for (x, cap) in caps.iter().enumerate() {
                    prop_assert!(g.used(&gate(x)) <= *cap);
                }
            }
            prop_assert_eq!(served, requests.len());
            prop_assert_eq!(g.waiting(), 0);
        }
    }
}
