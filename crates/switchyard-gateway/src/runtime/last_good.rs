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

    /// Every mark, `(combo, connection, since)`, by combo.
    pub fn list(&self) -> Vec<(String, String, UnixMillis)> {
        let mut out: Vec<_> = lock(&self.0)
            .by_combo
            .iter()
            .map(|(combo, (conn, at))| (combo.clone(), conn.clone(), *at))
            .collect();
        out.sort();
        out
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

    /// Takes in the marks every replica wrote (SPEC O6): a newer mark than this
    /// replica's replaces it, unless this replica's own change waits to be written.
    /// Marks of combos or connections this replica does not know, `(combo,
    /// connection)`, are left out.
    pub fn merge(&self, rows: Vec<(String, String, u64)>, known: impl Fn(&str, &str) -> bool) {
        let mut inner = lock(&self.0);
        let Inner { by_combo, dirty } = &mut *inner;
        for (combo, conn, at) in rows {
            if dirty.contains(&combo) || !known(&combo, &conn) {
                continue;
            }
            if by_combo.get(&combo).is_none_or(|(_, mine)| *mine < at) {
                by_combo.insert(combo, (conn, at));
            }
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
    fn other_replicas_newer_marks_replace_this_one_s_unless_it_waits_to_be_written() {
        let g = LastGood::default();
        g.load(vec![("fast".into(), "c1".into(), 10)]);
        let known = |c: &str, _: &str| c != "gone";
        g.merge(
            vec![
                ("fast".into(), "c2".into(), 9),
                ("gone".into(), "c2".into(), 99),
            ],
            known,
        );
        assert_eq!(g.get("fast").as_deref(), Some("c1"));
        assert_eq!(g.get("gone"), None);
        g.merge(vec![("fast".into(), "c2".into(), 11)], known);
        assert_eq!(g.list(), [("fast".to_owned(), "c2".to_owned(), 11)]);
        // Taken in, not written again.
        assert_eq!(g.take_dirty(), vec![]);
        g.set("fast", "c3", 12);
        g.merge(vec![("fast".into(), "c4".into(), 13)], known);
        assert_eq!(g.get("fast").as_deref(), Some("c3"));
    }

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
