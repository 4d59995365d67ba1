//! Each combo's own turn (SPEC R19): how many of its requests came before, and a seed
//! drawn once for it, for the strategies that rotate or deal per combo (`round-robin`,
//! `strict-random`). Kept in this process's memory: a replica rotates its own traffic,
//! which keeps each replica fair and the whole fair on average. Bounded by the
//! configured combos: the configuration install drops the turns of combos that are
//! gone.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Turns(Mutex<HashMap<String, (u64, u64)>>);

impl Turns {
    /// The combo's count before this request and its seed; counts this request.
    pub fn next(&self, combo: &str) -> (u64, u64) {
        let mut turns = lock(&self.0);
        if let Some((count, seed)) = turns.get_mut(combo) {
            let before = *count;
            *count = count.wrapping_add(1);
            return (before, *seed);
        }
        let seed = rand::random();
        turns.insert(combo.to_owned(), (1, seed));
        (0, seed)
    }

    /// Keeps only the turns of the combos `keep` says yes to.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        lock(&self.0).retain(|name, _| keep(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_combo_counts_its_own_requests_with_one_seed() {
        let t = Turns::default();
        let (a0, seed) = t.next("a");
        assert_eq!(a0, 0);
        assert_eq!(t.next("a"), (1, seed));
        assert_eq!(t.next("b").0, 0);
        assert_eq!(t.next("a"), (2, seed));
        t.retain(|name| name == "b");
        assert_eq!(t.next("b").0, 1);
        assert_eq!(t.next("a").0, 0);
    }
}
