//! Each combo's last good connection (SPEC R19's `lkgp`): set when a request of a combo
//! whose strategy reads it is served, written behind the request path by the `persist`
//! writer, read back at start. Bounded by the configured combos: the configuration
//! install forgets combos and connections that are gone.

use crate::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use switchyard_core::UnixMillis;
use switchyard_store::LastGoodChange;

#[derive(Debug, Default)]
struct Inner {
    by_combo: HashMap<String, (String, UnixMillis)>,
    dirty: HashSet<String>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct LastGood(Mutex<Inner>);

impl LastGood {
    /// The combo's last good connection.
    pub fn get(&self, combo: &str) -> Option<String> {
        lock(&self.0).by_combo.get(combo).map(|(c, _)| c.clone())
    }

    /// `connection` served `combo` at `now`.
    pub fn set(&self, combo: &str, connection: &str, now: UnixMillis) {
        let mut inner = lock(&self.0);
        if inner
            .by_combo
            .get(combo)
            .is_some_and(|(c, _)| c == connection)
        {
            return;
        }
        inner
            .by_combo
            .insert(combo.to_owned(), (connection.to_owned(), now));
        inner.dirty.insert(combo.to_owned());
    }

    /// Keeps only the marks `keep` says yes to, as `(combo, connection)`.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        let mut inner = lock(&self.0);
        let Inner { by_combo, dirty } = &mut *inner;
        by_combo.retain(|combo, (conn, _)| {
            let kept = keep(combo, conn);
            if !kept {
                dirty.insert(combo.clone());
            }
            kept
        });
    }

    /// Puts persisted marks back.
    pub fn load(&self, rows: Vec<(String, String, u64)>) {
        let mut inner = lock(&self.0);
        for (combo, conn, at) in rows {
            inner.by_combo.insert(combo, (conn, at));
        }
    }

    /// The changes to persist.
    pub fn take_dirty(&self) -> Vec<LastGoodChange> {
        let mut inner = lock(&self.0);
        let dirty: Vec<String> = inner.dirty.drain().collect();
        dirty
            .into_iter()
            .map(|combo| {
                let mark = inner.by_combo.get(&combo).cloned();
                (combo, mark)
            })
            .collect()
    }

    /// Gives back changes that could not be written (unless changed since).
    pub fn requeue(&self, changes: Vec<LastGoodChange>) {
        let mut inner = lock(&self.0);
        for (combo, _) in changes {
            inner.dirty.insert(combo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_set_once_per_change_and_forgotten_with_their_combo() {
        let g = LastGood::default();
        g.set("fast", "c1", 1);
        g.set("fast", "c1", 2);
        assert_eq!(g.get("fast").as_deref(), Some("c1"));
        assert_eq!(
            g.take_dirty(),
            vec![("fast".to_owned(), Some(("c1".to_owned(), 1)))]
        );
        assert_eq!(g.take_dirty(), vec![]);
        g.set("fast", "c2", 3);
        g.retain(|combo, _| combo != "fast");
        assert_eq!(g.get("fast"), None);
        assert_eq!(g.take_dirty(), vec![("fast".to_owned(), None)]);
        g.load(vec![("slow".into(), "c9".into(), 4)]);
        assert_eq!(g.get("slow").as_deref(), Some("c9"));
        g.requeue(vec![("slow".into(), None)]);
        assert_eq!(
            g.take_dirty(),
            vec![("slow".to_owned(), Some(("c9".to_owned(), 4)))]
        );
    }
}
