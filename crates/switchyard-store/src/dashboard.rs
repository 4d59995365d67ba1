//! The dashboard's sign-ins (SPEC O6: any replica serves a signed-in browser): sessions
//! and one-time sign-in links live in the store, never their secrets: a session is
//! kept under the SHA-256 of its id, a link under the SHA-256 of its token. Both tables
//! are bounded: each insert drops the expired rows, and when the table is still full,
//! the rows closest to expiry.

use crate::db::{args, Sql};
use crate::{Result, Store};
use switchyard_model::SessionRow;

/// Deletes the expired rows of `table` and, while it holds `max` or more, the rows
/// closest to expiry, so one more fits.
fn make_room(db: &dyn Sql, table: &str, key: &str, now: u64, max: usize) -> Result<()> {
    db.execute(
        &format!("DELETE FROM {table} WHERE expires_at <= ?1"),
        &args![now],
    )?;
    let held: u64 = db
        .query_one(
            &format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {table}"),
            &[],
        )?
        .get(0)?;
    let max = u64::try_from(max).unwrap_or(u64::MAX).max(1);
    if held >= max {
        db.execute(
            &format!(
                "DELETE FROM {table} WHERE {key} IN
                   (SELECT {key} FROM {table} ORDER BY expires_at, {key} LIMIT ?1)"
            ),
            &args![held - max + 1],
        )?;
    }
    Ok(())
}

impl Store {
    /// Keeps a new session (its id's hash, CSRF token and credential hash) until
    /// `expires_at`, with at most `max` sessions held.
    pub fn open_session(
        &self,
        id_hash: &str,
        csrf: &str,
        credential: &str,
        expires_at: u64,
        now: u64,
        max: usize,
    ) -> Result<()> {
        self.write(|db| {
            make_room(db, "dashboard_sessions", "id_hash", now, max)?;
            db.execute(
                "INSERT INTO dashboard_sessions (id_hash, csrf, credential, notice, expires_at)
                 VALUES (?1, ?2, ?3, NULL, ?4)",
                &args![id_hash, csrf, credential, expires_at],
            )?;
            Ok(())
        })
    }

    /// The session kept under `id_hash`, if it is live at `now`; with `take_notice`
    /// its notice is handed out and cleared in the same transaction.
    pub fn session(
        &self,
        id_hash: &str,
        now: u64,
        take_notice: bool,
    ) -> Result<Option<SessionRow>> {
        let read = |db: &dyn Sql| {
            db.query_opt(
                "SELECT csrf, credential, notice FROM dashboard_sessions
                 WHERE id_hash = ?1 AND expires_at > ?2",
                &args![id_hash, now],
            )?
            .map(|r| {
                Ok(SessionRow {
                    csrf: r.get(0)?,
                    credential: r.get(1)?,
                    notice: r.get(2)?,
                })
            })
            .transpose()
        };
        if !take_notice {
            return self.read(read);
        }
        self.write(|db| {
            let row = read(db)?;
            if row.as_ref().is_some_and(|r| r.notice.is_some()) {
                db.execute(
                    "UPDATE dashboard_sessions SET notice = NULL WHERE id_hash = ?1",
                    &args![id_hash],
                )?;
            }
            Ok(row)
        })
    }

    /// Leaves `notice` for the session's next page (replacing one not shown yet).
    pub fn set_session_notice(&self, id_hash: &str, notice: &str) -> Result<()> {
        self.write(|db| {
            db.execute(
                "UPDATE dashboard_sessions SET notice = ?2 WHERE id_hash = ?1",
                &args![id_hash, notice],
            )?;
            Ok(())
        })
    }

    /// Ends the session kept under `id_hash`.
    pub fn end_session(&self, id_hash: &str) -> Result<()> {
        self.write(|db| {
            db.execute(
                "DELETE FROM dashboard_sessions WHERE id_hash = ?1",
                &args![id_hash],
            )?;
            Ok(())
        })
    }

    /// Keeps a one-time link's token hash until `expires_at`, with at most `max` held.
    pub fn mint_link(&self, token_hash: &str, expires_at: u64, now: u64, max: usize) -> Result<()> {
        self.write(|db| {
            make_room(db, "dashboard_links", "token_hash", now, max)?;
            db.execute(
                "INSERT INTO dashboard_links (token_hash, expires_at) VALUES (?1, ?2)",
                &args![token_hash, expires_at],
            )?;
            Ok(())
        })
    }

    /// Whether the link kept under `token_hash` is live at `now`; it is used up either
    /// way, and only one of two replicas consuming it at once sees it live.
    pub fn consume_link(&self, token_hash: &str, now: u64) -> Result<bool> {
        self.write(|db| {
            let expires: Option<u64> = db
                .query_opt(
                    "DELETE FROM dashboard_links WHERE token_hash = ?1 RETURNING expires_at",
                    &args![token_hash],
                )?
                .map(|r| r.get(0))
                .transpose()?;
            Ok(expires.is_some_and(|e| e > now))
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::testing::each_backend;

    #[test]
    fn sessions_expire_end_and_hand_their_notice_out_once() {
        each_backend(|s| {
            s.open_session("h1", "csrf1", "cred", 1_000, 10, 8).unwrap();
            let live = s.session("h1", 999, false).unwrap().unwrap();
            assert_eq!(
                (live.csrf.as_str(), live.credential.as_str(), live.notice),
                ("csrf1", "cred", None)
            );
            assert_eq!(s.session("h1", 1_000, false).unwrap(), None);
            assert_eq!(s.session("unknown", 10, false).unwrap(), None);
            s.set_session_notice("h1", "saved").unwrap();
            assert_eq!(
                s.session("h1", 20, false)
                    .unwrap()
                    .unwrap()
                    .notice
                    .as_deref(),
                Some("saved")
            );
            assert_eq!(
                s.session("h1", 20, true)
                    .unwrap()
                    .unwrap()
                    .notice
                    .as_deref(),
                Some("saved")
            );
            assert_eq!(s.session("h1", 20, true).unwrap().unwrap().notice, None);
            s.end_session("h1").unwrap();
            assert_eq!(s.session("h1", 20, false).unwrap(), None);
        });
    }

    #[test]
    fn sessions_are_bounded_soonest_to_expire_first() {
        each_backend(|s| {
            for i in 0..3u64 {
                s.open_session(&format!("h{i}"), "c", "k", 100 + i, 1, 3)
                    .unwrap();
            }
            s.open_session("h3", "c", "k", 200, 2, 3).unwrap();
            assert_eq!(s.session("h0", 50, false).unwrap(), None);
            for h in ["h1", "h2", "h3"] {
                assert!(s.session(h, 50, false).unwrap().is_some(), "{h}");
            }
            // Expired sessions make room first.
            s.open_session("h4", "c", "k", 300, 150, 3).unwrap();
            for h in ["h1", "h2"] {
                assert_eq!(s.session(h, 50, false).unwrap(), None, "{h}");
            }
            assert!(s.session("h3", 150, false).unwrap().is_some());
            assert!(s.session("h4", 150, false).unwrap().is_some());
        });
    }

    #[test]
    fn a_link_is_used_up_by_its_first_use_live_or_not() {
        each_backend(|s| {
            s.mint_link("t1", 100, 1, 4).unwrap();
            s.mint_link("t2", 100, 1, 4).unwrap();
            assert!(s.consume_link("t1", 99).unwrap());
            assert!(!s.consume_link("t1", 99).unwrap());
            assert!(!s.consume_link("t2", 100).unwrap());
            assert!(!s.consume_link("t2", 1).unwrap());
            assert!(!s.consume_link("unknown", 1).unwrap());
        });
    }
}
