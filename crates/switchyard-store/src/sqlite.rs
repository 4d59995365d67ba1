//! The SQLite backend, the embedded default: opening the database file (owner-only, WAL),
//! its migrations (`PRAGMA user_version`), and [`Lite`], which runs the domain modules'
//! statements on a connection or transaction.

use crate::db::{Arg, Dialect, Row, Sql, Table, Value};
use crate::migrations::MIGRATIONS;
use crate::secrets::Keyring;
use crate::store::{Db, Store};
use crate::{Result, StoreError};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ErrorCode};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How long a writer waits for another process (the CLI) holding the write lock. Config
/// writes are tiny, so five seconds only expires when something is truly stuck.
const BUSY_TIMEOUT_MS: u64 = 5_000;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(ErrorCode::ConstraintViolation) => Self::Constraint(e.to_string()),
            _ => Self::Database(e.to_string()),
        }
    }
}

/// Options that create a file owner-only (0600) whatever the umask.
pub(crate) fn private_file_options() -> std::fs::OpenOptions {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts
}

/// Makes an existing file owner-only (0600) if it is not already.
pub fn make_private(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
        if mode != 0o600 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
            tracing::info!(path = %path.display(), from = format!("{mode:o}"), "Made the file owner-only (0600).");
        }
    }
    Ok(())
}

/// The files SQLite keeps beside the database in WAL mode.
fn sidecars(path: &Path) -> [PathBuf; 2] {
    let name = path.as_os_str().to_owned();
    let with = |suffix: &str| {
        let mut n = name.clone();
        n.push(suffix);
        PathBuf::from(n)
    };
    [with("-wal"), with("-shm")]
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path`, applies migrations, and
    /// seals the credentials not yet sealed with the keyring's current key (see
    /// [`Store::over`]).
    ///
    /// The database file and its `-wal` and `-shm` files are made owner-only (0600).
    pub fn open(path: &Path, keys: Keyring) -> Result<Self> {
        // Created owner-only before SQLite opens it, so the database never exists with
        // wider permissions; SQLite gives its -wal and -shm files the same mode.
        private_file_options()
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(path))?;
        make_private(path).map_err(io_err(path))?;
        let store = init(Connection::open(path)?, keys)?;
        for side in sidecars(path) {
            if side.exists() {
                make_private(&side).map_err(io_err(&side))?;
            }
        }
        Ok(store)
    }

    /// A private in-memory database with a throw-away key, for unit tests.
    pub fn open_in_memory() -> Result<Self> {
        init(Connection::open_in_memory()?, Keyring::ephemeral()?)
    }
}

fn init(mut conn: Connection, keys: Keyring) -> Result<Store> {
    conn.busy_timeout(std::time::Duration::from_millis(BUSY_TIMEOUT_MS))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    migrate(&mut conn)?;
    Store::over(Db::Sqlite(Mutex::new(conn)), keys)
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let supported = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if current > supported {
        return Err(StoreError::SchemaTooNew {
            found: current,
            supported,
        });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(i + 1).unwrap_or(i64::MAX),
        )?;
        tx.commit()?;
        tracing::info!(version = i + 1, "Applied database migration.");
    }
    Ok(())
}

/// Statements on a SQLite connection (or a transaction, which derefs to one), prepared
/// once and cached by the connection.
pub(crate) struct Lite<'a>(pub(crate) &'a Connection);

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Arg::Null => ValueRef::Null,
            Arg::Int(i) => ValueRef::Integer(i),
            Arg::Real(r) => ValueRef::Real(r),
            Arg::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

impl Sql for Lite<'_> {
    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<usize> {
        Ok(self
            .0
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(args))?)
    }

    fn query(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>> {
        let mut stmt = self.0.prepare_cached(sql)?;
        let width = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut vals = Vec::with_capacity(width);
            for i in 0..width {
                vals.push(match r.get_ref(i)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(i) => Value::Int(i),
                    ValueRef::Real(f) => Value::Real(f),
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        Value::Text(String::from_utf8_lossy(t).into_owned())
                    }
                });
            }
            out.push(Row(vals));
        }
        Ok(out)
    }

    /// One prepared single-row insert executed per row. Inside the batch's transaction a
    /// row costs SQLite the same either way, and a multi-row statement's text (built,
    /// hashed for the statement cache, bound) cost more than the rows it carried: at a
    /// low rate a batch holds a few rows.
    fn append(&self, table: &Table, args: &[Arg<'_>]) -> Result<()> {
        // Several rows per statement (see `ROWS_PER_INSERT`), each statement's text made
        // once and kept prepared in the statement cache.
        let width = table.columns.len();
        let mut rest = args;
        for (rows, sql) in table.inserts() {
            let statement = rows * width;
            let (these, after) = rest.split_at(rest.len() / statement * statement);
            if these.is_empty() {
                continue;
            }
            let mut insert = self.0.prepare_cached(sql)?;
            for row in these.chunks_exact(statement) {
                insert.execute(rusqlite::params_from_iter(row))?;
            }
            rest = after;
        }
        Ok(())
    }

    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::SecretKey;
    use secrecy::{ExposeSecret, SecretString};
    use switchyard_core::domain::{AuthClass, UpstreamFormat};
    use switchyard_model::{ComboRecord, ConnectionRecord, ProviderRecord, SaveMode, TargetRecord};

    fn provider(id: &str) -> ProviderRecord {
        ProviderRecord {
            id: id.into(),
            format: UpstreamFormat::Openai,
            base_url: "http://x.test".into(),
            models: vec!["m".into()],
            prices: Default::default(),
            max_output_tokens: Default::default(),
            context_windows: Default::default(),
            stream_timeouts: Default::default(),
            max_concurrent: None,
        }
    }

    fn connection(id: &str, provider: &str) -> ConnectionRecord {
        ConnectionRecord {
            id: id.into(),
            provider: provider.into(),
            auth_class: AuthClass::Apikey,
            format: None,
            base_url: None,
            enabled: true,
            max_concurrent: Some(2),
            rate_limit_overrides: None,
            provider_specific_data: None,
            disable_cooling: false,
            has_credential: false,
        }
    }

    fn keys() -> Keyring {
        Keyring::ephemeral().unwrap()
    }

    fn secret(s: &str) -> SecretString {
        SecretString::from(s)
    }

    /// The credential column as stored, read around the store.
    fn raw_credential(path: &Path, id: &str) -> String {
        Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT credential FROM connections WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap()
    }

    fn credential_of(s: &Store, id: &str) -> String {
        let rows = s.load_config().unwrap();
        let (_, cred) = rows.connections.iter().find(|(c, _)| c.id == id).unwrap();
        cred.expose_secret().to_owned()
    }

    #[test]
    fn migrations_are_idempotent_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let k = keys();
        let s = Store::open(&path, k.clone()).unwrap();
        s.save_provider(&provider("p"), SaveMode::Create, 1)
            .unwrap();
        drop(s);
        let s = Store::open(&path, k).unwrap();
        assert_eq!(s.list_providers().unwrap(), vec![provider("p")]);
        assert_eq!(s.config_version().unwrap(), 1);
    }

    #[test]
    fn save_modes_report_conflict_and_not_found() {
        crate::store::testing::each_backend(|s| {
            s.save_provider(&provider("p"), SaveMode::Create, 1)
                .unwrap();
            assert!(matches!(
                s.save_provider(&provider("p"), SaveMode::Create, 2),
                Err(StoreError::Conflict {
                    kind: "provider",
                    ..
                })
            ));
            assert!(matches!(
                s.save_provider(&provider("q"), SaveMode::Update, 2),
                Err(StoreError::NotFound {
                    kind: "provider",
                    ..
                })
            ));
            s.save_provider(&provider("q"), SaveMode::Upsert, 2)
                .unwrap();
            assert_eq!(s.list_providers().unwrap().len(), 2);
        });
    }

    #[test]
    fn credential_is_kept_on_update_without_one_and_never_in_records() {
        crate::store::testing::each_backend(|s| {
            s.save_provider(&provider("p"), SaveMode::Create, 1)
                .unwrap();
            s.save_connection(
                &connection("c", "p"),
                Some(&secret("secret-1")),
                SaveMode::Create,
                1,
            )
            .unwrap();
            let mut c = connection("c", "p");
            c.enabled = false;
            s.save_connection(&c, None, SaveMode::Update, 2).unwrap();
            let rows = s.load_config().unwrap();
            assert_eq!(rows.connections[0].1.expose_secret(), "secret-1");
            assert!(!rows.connections[0].0.enabled);
            let rec = s.get_connection("c").unwrap();
            assert!(rec.has_credential);
            assert!(!serde_json::to_string(&rec).unwrap().contains("secret-1"));
        });
    }

    #[test]
    fn provider_in_use_cannot_be_deleted() {
        crate::store::testing::each_backend(|s| {
            s.save_provider(&provider("p"), SaveMode::Create, 1)
                .unwrap();
            s.save_connection(
                &connection("c", "p"),
                Some(&secret("k")),
                SaveMode::Create,
                1,
            )
            .unwrap();
            assert!(matches!(
                s.delete_provider("p"),
                Err(StoreError::InUse { .. })
            ));
            s.delete_connection("c").unwrap();
            s.save_combo(
                &ComboRecord {
                    name: "combo".into(),
                    strategy: "priority".into(),
                    targets: vec![TargetRecord {
                        model: "p/m".into(),
                        connection: None,
                        weight: 1,
                        cost: None,
                    }],
                },
                SaveMode::Create,
                1,
            )
            .unwrap();
            let err = s.delete_provider("p").unwrap_err().to_string();
            assert_eq!(err, "provider `p` is still used by combos combo");
            s.delete_combo("combo").unwrap();
            s.delete_provider("p").unwrap();
        });
    }

    #[test]
    fn connection_for_unknown_provider_is_rejected_and_nothing_written() {
        crate::store::testing::each_backend(|s| {
            let v0 = s.config_version().unwrap();
            assert!(matches!(
                s.save_connection(&connection("c", "nope"), None, SaveMode::Create, 1),
                Err(StoreError::NotFound {
                    kind: "provider",
                    ..
                })
            ));
            assert_eq!(s.config_version().unwrap(), v0);
            assert!(s.list_connections().unwrap().is_empty());
        });
    }

    /// A database with provider `p` and connection `c` holding `cred`.
    fn with_credential(path: &Path, keys: Keyring, cred: &str) -> Store {
        let s = Store::open(path, keys).unwrap();
        s.save_provider(&provider("p"), SaveMode::Create, 1)
            .unwrap();
        s.save_connection(
            &connection("c", "p"),
            Some(&secret(cred)),
            SaveMode::Create,
            1,
        )
        .unwrap();
        s
    }

    #[test]
    fn credentials_are_sealed_in_the_database_and_opened_by_load_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let k = keys();
        let s = with_credential(&path, k.clone(), "sk-live-plaintext-1");
        let raw = raw_credential(&path, "c");
        assert!(
            raw.starts_with(&format!("enc:v1:{}:", k.current().id())),
            "{raw}"
        );
        assert!(!raw.contains("sk-live-plaintext-1"));
        assert_eq!(credential_of(&s, "c"), "sk-live-plaintext-1");
        // An empty credential clears it, and is stored empty.
        s.save_connection(
            &connection("c", "p"),
            Some(&secret("")),
            SaveMode::Update,
            2,
        )
        .unwrap();
        assert_eq!(raw_credential(&path, "c"), "");
        assert!(!s.get_connection("c").unwrap().has_credential);
        // A sealed value copied to another connection's row does not open there.
        drop(s);
        let s = with_credential(&dir.path().join("b.sqlite"), k.clone(), "x");
        drop(s);
        let db = Connection::open(dir.path().join("b.sqlite")).unwrap();
        db.execute(
            "INSERT INTO connections (id, provider_id, auth_class, credential, created_at, updated_at)
             SELECT 'd', provider_id, auth_class, credential, 1, 1 FROM connections WHERE id = 'c'",
            [],
        )
        .unwrap();
        drop(db);
        let err = Store::open(&dir.path().join("b.sqlite"), k.clone()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the stored credential of connection `d` does not decrypt with secret key {}: \
                 it is damaged or was altered outside switchyard",
                k.current().id()
            )
        );
    }

    #[test]
    fn plaintext_credentials_from_before_are_sealed_at_open_in_one_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let s = with_credential(&path, keys(), "placeholder");
        drop(s);
        // What an earlier version wrote: the credential in plaintext.
        let db = Connection::open(&path).unwrap();
        db.execute(
            "UPDATE connections SET credential = 'sk-old-plaintext' WHERE id = 'c'",
            [],
        )
        .unwrap();
        drop(db);
        let k = keys();
        let s = Store::open(&path, k.clone()).unwrap();
        let raw = raw_credential(&path, "c");
        assert!(
            raw.starts_with(&format!("enc:v1:{}:", k.current().id())),
            "{raw}"
        );
        assert!(!raw.contains("sk-old-plaintext"));
        assert_eq!(credential_of(&s, "c"), "sk-old-plaintext");
    }

    #[test]
    fn a_wrong_key_fails_open_naming_both_keys_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let right = keys();
        drop(with_credential(&path, right.clone(), "sk-1"));
        let before = raw_credential(&path, "c");
        let wrong = keys();
        let err = Store::open(&path, wrong.clone()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the credential of connection `c` is encrypted with secret key {}, but the key given is {}",
                right.current().id(),
                wrong.current().id()
            )
        );
        assert_eq!(raw_credential(&path, "c"), before);
        assert_eq!(
            credential_of(&Store::open(&path, right).unwrap(), "c"),
            "sk-1"
        );
    }

    #[test]
    fn a_previous_key_opens_and_its_credentials_are_resealed_with_the_current() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let old = keys();
        drop(with_credential(&path, old.clone(), "sk-1"));
        let new = SecretKey::generate().unwrap();
        let ring = Keyring::new(new.clone(), vec![old.current().clone()]);
        let s = Store::open(&path, ring).unwrap();
        assert!(raw_credential(&path, "c").starts_with(&format!("enc:v1:{}:", new.id())));
        assert_eq!(credential_of(&s, "c"), "sk-1");
        drop(s);
        // The old key alone no longer opens it.
        assert!(matches!(
            Store::open(&path, old),
            Err(StoreError::UnknownKey { .. })
        ));
    }

    #[test]
    fn rotation_reseals_everything_and_a_process_on_the_key_file_follows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let key_file = dir.path().join("secret-key");
        let (ring, _) = crate::secrets::create_key_file(&key_file).unwrap();
        let old = ring.current().clone();
        // `running` plays a gateway, `cli` the rotation command.
        let running = with_credential(&path, ring, "sk-1");
        let cli = Store::open(&path, Keyring::from_file(&key_file).unwrap()).unwrap();
        let new = SecretKey::generate().unwrap();
        crate::secrets::write_key_file(&key_file, &new, std::slice::from_ref(&old)).unwrap();
        assert_eq!(cli.rotate_key(&new).unwrap(), 1);
        crate::secrets::write_key_file(&key_file, &new, &[]).unwrap();
        assert!(raw_credential(&path, "c").starts_with(&format!("enc:v1:{}:", new.id())));
        assert_eq!(cli.current_key().id(), new.id());
        // The running process re-reads the key file to open and to seal.
        assert_eq!(credential_of(&running, "c"), "sk-1");
        running
            .save_connection(
                &connection("c", "p"),
                Some(&secret("sk-2")),
                SaveMode::Update,
                3,
            )
            .unwrap();
        assert!(raw_credential(&path, "c").starts_with(&format!("enc:v1:{}:", new.id())));
        assert_eq!(credential_of(&cli, "c"), "sk-2");
        drop((running, cli));
        assert_eq!(
            credential_of(&Store::open(&path, Keyring::new(new, vec![])).unwrap(), "c"),
            "sk-2"
        );
    }

    #[test]
    fn a_process_with_fixed_keys_refuses_to_seal_after_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let old = keys();
        let running = with_credential(&path, old.clone(), "sk-1");
        let new = SecretKey::generate().unwrap();
        Store::open(&path, old.clone())
            .unwrap()
            .rotate_key(&new)
            .unwrap();
        let err = running
            .save_connection(
                &connection("c", "p"),
                Some(&secret("sk-2")),
                SaveMode::Update,
                3,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the credentials were re-encrypted with secret key {}, and this process holds {}: restart it with the new key",
                new.id(),
                old.current().id()
            )
        );
        // It writes nothing, and what it does not seal still works.
        assert_eq!(
            credential_of(&Store::open(&path, Keyring::new(new, vec![])).unwrap(), "c"),
            "sk-1"
        );
        running
            .save_provider(&provider("q"), SaveMode::Create, 4)
            .unwrap();
    }

    #[test]
    fn while_nothing_is_sealed_a_process_with_another_key_may_seal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let mine = keys();
        let running = with_credential(&path, mine.clone(), "");
        // Another process (a CLI run without the gateway's key) opened it meanwhile.
        drop(Store::open(&path, keys()).unwrap());
        running
            .save_connection(
                &connection("c", "p"),
                Some(&secret("sk-1")),
                SaveMode::Update,
                2,
            )
            .unwrap();
        assert!(raw_credential(&path, "c").starts_with(&format!("enc:v1:{}:", mine.current().id())));
        assert_eq!(
            credential_of(&Store::open(&path, mine).unwrap(), "c"),
            "sk-1"
        );
    }

    #[test]
    fn the_database_and_its_wal_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let k = keys();
        let s = with_credential(&path, k.clone(), "sk-1");
        let [wal, shm] = sidecars(&path);
        assert_eq!((mode(&path), mode(&wal), mode(&shm)), (0o600, 0o600, 0o600));
        drop(s);
        // Files an earlier version left world-readable are tightened at open.
        for p in [&path, &wal, &shm] {
            if p.exists() {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
        let _s = Store::open(&path, k).unwrap();
        assert_eq!(mode(&path), 0o600);
        for p in [&wal, &shm] {
            if p.exists() {
                assert_eq!(mode(p), 0o600, "{}", p.display());
            }
        }
    }
}
