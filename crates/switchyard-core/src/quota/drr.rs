//! Deficit round robin across client keys (SPEC Q12; the fair queues of R7–R10 reuse it).
//!
//! Waiters queue per key. Keys with waiters take turns; each turn a key's deficit grows
//! by `QUANTUM × weight`, and it may dequeue waiters while their cost fits its deficit.
//! Over time every backlogged key is served in proportion to its weight, whatever the
//! order and number of requests it queued, so one key's batch of a hundred cannot take
//! every slot while another waits. A key whose queue empties forgets its deficit, as in
//! the classic algorithm: credit is not saved up while idle.
//!
//! Pure and synchronous: the shell owns the waiters (their wake-up handles) and asks the
//! scheduler whom to wake next.

use std::collections::{HashMap, VecDeque};

/// Deficit added per turn for a weight of 1: one unit-cost waiter per turn. Callers
/// pass weights as fractions (a 25 % share is 0.25), so keys interleave waiter by
/// waiter; a weight of 50 would let a key take fifty waiters per turn.
const QUANTUM: f64 = 1.0;

/// Weights below this are raised to it, so a key of weight 0 is still served (last).
const MIN_WEIGHT: f64 = 0.01;

#[derive(Debug, Clone)]
struct KeyQueue {
    weight: f64,
    deficit: f64,
    items: VecDeque<(u64, f64)>,
}

/// The scheduler state.
#[derive(Debug, Clone, Default)]
pub struct Drr {
    queues: HashMap<String, KeyQueue>,
    /// Keys with waiters, in turn order; the front key is being served.
    ring: VecDeque<String>,
    /// Whether the front key already received its quantum for the current turn.
    front_credited: bool,
    len: usize,
}

impl Drr {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues waiter `id` of `key` with the given weight (the key's latest weight wins)
    /// and cost.
    pub fn push(&mut self, key: &str, weight: f64, id: u64, cost: f64) {
        let weight = weight.max(MIN_WEIGHT);
        let q = self
            .queues
            .entry(key.to_owned())
            .or_insert_with(|| KeyQueue {
                weight,
                deficit: 0.0,
                items: VecDeque::new(),
            });
        q.weight = weight;
        if q.items.is_empty() {
            self.ring.push_back(key.to_owned());
        }
        q.items.push_back((id, cost.max(0.0)));
        self.len += 1;
    }

    /// Removes a waiter that gave up (timeout, client gone). Returns whether it was queued.
    pub fn remove(&mut self, key: &str, id: u64) -> bool {
        let Some(q) = self.queues.get_mut(key) else {
            return false;
        };
        let Some(pos) = q.items.iter().position(|(i, _)| *i == id) else {
            return false;
        };
        q.items.remove(pos);
        self.len -= 1;
        if q.items.is_empty() {
            self.queues.remove(key);
            if let Some(at) = self.ring.iter().position(|k| k == key) {
                self.ring.remove(at);
                if at == 0 {
                    self.front_credited = false;
                }
            }
        }
        true
    }

    /// The next waiter to serve, as `(key, id)`.
    pub fn pop(&mut self) -> Option<(String, u64)> {
        loop {
            let key = self.ring.front()?.clone();
            let q = self.queues.get_mut(&key)?;
            if !self.front_credited {
                q.deficit += QUANTUM * q.weight;
                self.front_credited = true;
            }
            let &(id, cost) = q.items.front()?;
            if cost <= q.deficit {
                q.items.pop_front();
                q.deficit -= cost;
                self.len -= 1;
                if q.items.is_empty() {
                    self.queues.remove(&key);
                    self.ring.pop_front();
                    self.front_credited = false;
                }
                return Some((key, id));
            }
            // Not enough credit this turn: the next key's turn.
            self.ring.rotate_left(1);
            self.front_credited = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn drain(d: &mut Drr) -> Vec<String> {
        std::iter::from_fn(|| d.pop().map(|(k, _)| k)).collect()
    }

    #[test]
    fn equal_weights_alternate_whatever_the_arrival_order() {
        let mut d = Drr::new();
        for i in 0..6 {
            d.push("a", 1.0, i, 1.0);
        }
        for i in 10..12 {
            d.push("b", 1.0, i, 1.0);
        }
        assert_eq!(d.len(), 8);
        assert_eq!(drain(&mut d), ["a", "b", "a", "b", "a", "a", "a", "a"]);
        assert!(d.is_empty());
    }

    #[test]
    fn weights_set_the_proportions() {
        let mut d = Drr::new();
        for i in 0..30 {
            d.push("heavy", 3.0, i, 1.0);
            d.push("light", 1.0, 100 + i, 1.0);
        }
        let first: Vec<String> = (0..20).filter_map(|_| d.pop().map(|(k, _)| k)).collect();
        let heavy = first.iter().filter(|k| *k == "heavy").count();
        assert_eq!(heavy, 15);
    }

    #[test]
    fn zero_weight_keys_are_served_after_weighted_ones() {
        let mut d = Drr::new();
        d.push("zero", 0.0, 1, 1.0);
        for i in 0..3 {
            d.push("one", 1.0, 10 + i, 1.0);
        }
        let order = drain(&mut d);
        assert_eq!(order, ["one", "one", "one", "zero"]);
    }

    #[test]
    fn removed_waiters_are_skipped_and_fifo_holds_within_a_key() {
        let mut d = Drr::new();
        d.push("a", 1.0, 1, 1.0);
        d.push("a", 1.0, 2, 1.0);
        d.push("b", 1.0, 3, 1.0);
        assert!(d.remove("a", 1));
        assert!(!d.remove("a", 1));
        assert!(d.remove("b", 3));
        assert_eq!(d.pop(), Some(("a".to_owned(), 2)));
        assert_eq!(d.pop(), None);
    }

    #[test]
    fn a_late_key_is_served_within_one_round() {
        let mut d = Drr::new();
        for i in 0..40 {
            d.push("a", 1.0, i, 1.0);
        }
        assert_eq!(d.pop().map(|x| x.0), Some("a".to_owned()));
        for i in 0..4 {
            d.push("b", 1.0, 100 + i, 1.0);
        }
        let next: Vec<String> = (0..8).filter_map(|_| d.pop().map(|(k, _)| k)).collect();
        assert_eq!(next, ["b", "a", "b", "a", "b", "a", "b", "a"]);
    }

    proptest! {
        /// Every waiter is served exactly once, and within a key in arrival order.
        #[test]
        fn every_waiter_is_served_once_in_order_per_key(
            pushes in proptest::collection::vec((0usize..4, 0u32..4), 1..80),
        ) {
            let mut d = Drr::new();
            let keys = ["a", "b", "c", "d"];
            for (n, (k, w)) in pushes.iter().enumerate() {
                d.push(keys[*k], f64::from(*w), n as u64, 1.0);
            }
            let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
            while let Some((k, id)) = d.pop() {
                seen.entry(k).or_default().push(id);
            }
            prop_assert_eq!(seen.values().map(Vec::len).sum::<usize>(), pushes.len());
            for ids in seen.values() {
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
            }
            prop_assert!(d.is_empty());
        }
    }
}
