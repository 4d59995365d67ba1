//! Concurrency gates taken together (SPEC R7): a request needs a slot on several gates
//! at once — global, its provider, its account (connection), its model on that account
//! — and takes all of them or none. One state machine owns every gate, so taking several
//! is one step: no request ever holds some of its gates while waiting for the others,
//! and no two requests can deadlock on each other.
//!
//! Requests that do not fit wait per client key. When slots free up, keys take turns by
//! deficit round robin: each turn a key earns its weight (its share) in credit, and with
//! a whole credit starts its oldest waiter whose gates all have room. No waiter holds up
//! one whose gates have room, of its own key or another; a newcomer does not jump ahead
//! of waiters for its gates, but joins the queue and the dispatch round decides.
//!
//! The machine only counts slots and orders waiters; it never blocks or wakes anyone.
//! `acquire`, `release` and `dispatch` return the ids of the waiters to start, and the
//! shell (`runtime::gate`) wakes them.

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

/// How deep into a key's queue a dispatch turn looks for a waiter that fits: deep
/// enough that a key's requests for other accounts are not stuck behind one for a full
/// account, bounded so a turn costs the same however long the queue.
const SCAN: usize = 32;

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

    /// Takes every slot `needs` asks for, or queues the request under `key`. A newcomer
    /// whose gates have no waiters and room is granted at once; otherwise it joins its
    /// key's queue and a dispatch round runs, which may start it (its gates had room
    /// after all) and others. The started ids besides the newcomer's are returned.
    pub fn acquire(
        &mut self,
        key: &Arc<str>,
        weight: f64,
        id: u64,
        needs: Vec<Need>,
    ) -> (Outcome, Vec<u64>) {
        let ahead = self.ahead(&needs);
        if ahead == 0 && self.fits(&needs) {
            add(&mut self.used, &needs);
            return (Outcome::Granted, Vec::new());
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
        let mut started = self.dispatch();
        match started.iter().position(|s| *s == id) {
            Some(i) => {
                started.remove(i);
                (Outcome::Granted, started)
            }
            None => (Outcome::Queued { ahead }, started),
        }
    }

    /// Frees the slots `needs` held and starts the waiters that now fit; returns their
    /// ids in start order.
    pub fn release(&mut self, needs: &[Need]) -> Vec<u64> {
        sub(&mut self.used, needs);
        self.dispatch()
    }

    /// The oldest of `key`'s first [`SCAN`] waiters whose gates all have room.
    fn first_fit(&self, key: &str) -> Option<usize> {
        self.queues
            .get(key)?
            .waiters
            .iter()
            .take(SCAN)
            .position(|w| self.fits(&w.needs))
    }

    /// Starts waiters while any fits: keys take turns, each turn earning its weight in
    /// credit; a key with a whole credit starts its oldest waiter whose gates have room
    /// (a waiter for a full gate does not hold up the same key's waiters for free ones).
    pub fn dispatch(&mut self) -> Vec<u64> {
        let mut started = Vec::new();
        while self.ring.iter().any(|k| self.first_fit(k).is_some()) {
            for _ in 0..self.ring.len() {
                let Some(key) = self.ring.pop_front() else {
                    break;
                };
                let fit = self.first_fit(&key);
                let Some(q) = self.queues.get_mut(&key) else {
                    continue;
                };
                if let Some(i) = fit {
                    q.credit += q.weight;
                    if q.credit >= 1.0 {
                        q.credit -= 1.0;
                        if let Some(w) = q.waiters.remove(i) {
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

    /// Removes a waiter that gave up (timeout, client gone). `None` when it was not
    /// waiting: it was started meanwhile and holds its slots. Otherwise the waiters its
    /// leaving lets start (it may have held up its key's turn).
    pub fn cancel(&mut self, key: &str, id: u64) -> Option<Vec<u64>> {
        let q = self.queues.get_mut(key)?;
        let pos = q.waiters.iter().position(|w| w.id == id)?;
        let w = q.waiters.remove(pos)?;
        sub(&mut self.queued, &w.needs);
        self.waiting -= 1;
        if q.waiters.is_empty() {
            self.queues.remove(key);
            self.ring.retain(|k| &**k != key);
        }
        Some(self.dispatch())
    }

    /// Where a newcomer of `key` needing `needs` would stand: the waiters that share a
    /// gate with it and would, taking turns by key, start before it — all of its own
    /// key's, and of every other key at most as many as its own key's plus one.
    pub fn position(&self, key: &str, needs: &[Need]) -> usize {
        let sharing = |q: &KeyQueue| {
            q.waiters
                .iter()
                .filter(|w| shares_gate(&w.needs, needs))
                .count()
        };
        let own = self.queues.get(key).map_or(0, sharing);
        own + self
            .queues
            .iter()
            .filter(|(k, _)| &***k != key)
            .map(|(_, q)| sharing(q).min(own + 1))
            .sum::<usize>()
    }
}

fn shares_gate(a: &[Need], b: &[Need]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.gate == y.gate))
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

    impl Gates {
        /// A waiter that fits but was not started: the state machine stalled.
        fn stalled(&self) -> bool {
            self.ring.iter().any(|k| self.first_fit(k).is_some())
        }
    }

    fn account(a: &str) -> GateId {
        GateId::Account(a.into())
    }

    #[test]
    fn all_or_nothing_no_partial_holds() {
        let mut g = Gates::default();
        let b = vec![need(account("b"), 1)];
        assert_eq!(g.acquire(&k("x"), 1.0, 1, b.clone()).0, Outcome::Granted);
        // Needs a and b; b is full: nothing is taken, not even a.
        let ab = vec![need(account("a"), 1), need(account("b"), 1)];
        assert_eq!(
            g.acquire(&k("y"), 1.0, 2, ab.clone()).0,
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
        assert_eq!(g.acquire(&k("k1"), 1.0, 1, a.clone()).0, Outcome::Granted);
        assert_eq!(
            g.acquire(&k("k1"), 1.0, 2, a.clone()).0,
            Outcome::Queued { ahead: 0 }
        );
        // Another account is free: granted at once.
        assert_eq!(g.acquire(&k("k2"), 1.0, 3, b.clone()).0, Outcome::Granted);
        // A newcomer for account a waits behind the earlier waiter.
        assert_eq!(
            g.acquire(&k("k3"), 1.0, 4, a.clone()).0,
            Outcome::Queued { ahead: 1 }
        );
        assert_eq!(g.release(&a), vec![2]);
        assert_eq!(g.release(&a), vec![4]);
    }

    #[test]
    fn a_newcomer_with_room_is_not_held_up_by_a_waiter_for_a_full_gate() {
        let mut g = Gates::default();
        let m1 = GateId::Model {
            connection: "c".into(),
            model: "m1".into(),
        };
        let for_m1 = vec![need(account("c"), 2), need(m1, 1)];
        assert_eq!(
            g.acquire(&k("x"), 1.0, 1, for_m1.clone()).0,
            Outcome::Granted
        );
        // Waits for m1 (full), though the account has room.
        assert_eq!(
            g.acquire(&k("x"), 1.0, 2, for_m1.clone()).0,
            Outcome::Queued { ahead: 0 }
        );
        // m2 on the same account: the account has room, so it starts at once.
        assert_eq!(
            g.acquire(&k("y"), 1.0, 3, vec![need(account("c"), 2)]),
            (Outcome::Granted, vec![])
        );
        assert_eq!(g.used(&account("c")), 2);
        assert!(!g.stalled());
    }

    #[test]
    fn a_keys_waiter_for_a_full_gate_does_not_block_its_waiters_for_free_ones() {
        let mut g = Gates::default();
        let via = |a: &str| vec![need(GateId::Global, 10), need(account(a), 1)];
        assert_eq!(g.acquire(&k("k"), 1.0, 1, via("a")).0, Outcome::Granted);
        assert_eq!(
            g.acquire(&k("k"), 1.0, 2, via("a")).0,
            Outcome::Queued { ahead: 0 }
        );
        // Account b is free; the global gate has a waiter, so the newcomer queues — and
        // the dispatch round starts it at once.
        assert_eq!(g.acquire(&k("k"), 1.0, 3, via("b")).0, Outcome::Granted);
        assert_eq!(g.release(&via("a")), vec![2]);
    }

    #[test]
    fn a_cancelled_waiter_lets_the_ones_behind_it_start() {
        let mut g = Gates::default();
        let a = vec![need(account("a"), 1)];
        let ab = vec![need(account("a"), 1), need(account("b"), 1)];
        assert_eq!(g.acquire(&k("k"), 1.0, 1, a.clone()).0, Outcome::Granted);
        g.acquire(&k("k"), 1.0, 2, ab.clone());
        // Needs only b (free), but the same key's queue holds 2 — it starts anyway.
        assert_eq!(
            g.acquire(&k("k"), 1.0, 3, vec![need(account("b"), 1)]).0,
            Outcome::Granted
        );
        g.release(&[need(account("b"), 1)]);
        // 2 is still waiting on a; cancelling it starts nobody (nobody else waits).
        assert_eq!(g.cancel("k", 2), Some(vec![]));
        assert_eq!(g.waiting(), 0);
    }

    #[test]
    fn position_counts_turns_taken_by_key() {
        let mut g = Gates::default();
        let one = vec![need(account("a"), 1)];
        g.acquire(&k("holder"), 1.0, 0, one.clone());
        for i in 1..=10 {
            g.acquire(&k("heavy"), 1.0, i, one.clone());
        }
        // A light key's first request goes right after one of heavy's.
        assert_eq!(g.position("light", &one), 1);
        g.acquire(&k("light"), 1.0, 100, one.clone());
        assert_eq!(g.position("light", &one), 3);
        // heavy's next waits behind all its own and light's one.
        assert_eq!(g.position("heavy", &one), 11);
        // Waiters for other gates do not count.
        assert_eq!(g.position("light", &[need(account("b"), 1)]), 0);
    }

    #[test]
    fn keys_take_turns_whatever_their_backlog() {
        let mut g = Gates::default();
        let one = vec![need(account("a"), 1)];
        assert_eq!(
            g.acquire(&k("holder"), 1.0, 0, one.clone()).0,
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
        assert_eq!(g.cancel("k", 2), Some(vec![]));
        assert_eq!(g.cancel("k", 2), None);
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
                let (outcome, started) = g.acquire(&key, f64::from(*w) / 4.0, i as u64, needs);
                if outcome == Outcome::Granted {
                    running.push(i as u64);
                }
                running.extend(started);
                prop_assert!(!g.stalled());
                for (x, cap) in caps.iter().enumerate() {
                    prop_assert!(g.used(&gate(x)) <= *cap);
                }
            }
            let mut served = running.len();
            // Everything granted so far, at once or by a dispatch round, is running.
            while let Some(id) = running.pop() {
                let started = g.release(&needs_of[&id]);
                served += started.len();
                running.extend(started);
                prop_assert!(!g.stalled());
                for (x, cap) in caps.iter().enumerate() {
                    prop_assert!(g.used(&gate(x)) <= *cap);
                }
            }
            prop_assert_eq!(served, requests.len());
            prop_assert_eq!(g.waiting(), 0);
        }
    }
}
