//! The PostgreSQL backend (SPEC O6): what several replicas share. A pool of connections
//! runs the domain modules' statements (placeholders `?N` rewritten to `$N`); schema
//! migrations are SQL files applied explicitly ([`migrate`]) under an advisory lock, so
//! two replicas never migrate at once; every configuration change announces its version
//! on the channel [`CONFIG_CHANNEL`] (and lease changes on [`LEASES_CHANNEL`]), and
//! [`Store::listen`] hears them on a connection of
//! its own.
//!
//! The client is `postgres`, the synchronous face of `tokio-postgres` (one maintainer,
//! the field's driver): the store's calls already run on the blocking pool, as SQLite's
//! do, so one statement path serves both backends and no runtime is threaded through
//! the store. Each client drives its socket with a small runtime of its own, which must
//! not be dropped on an async thread: the pool is dropped on a thread of its own.

use crate::db::{Arg, Column, Dialect, Row, Sql, Table, Value};
use crate::secrets::Keyring;
use crate::store::{Db, Store};
use crate::{Result, StoreError};
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, Config, NoTls, Transaction};
use r2d2_postgres::PostgresConnectionManager;
use std::cell::RefCell;
use std::str::FromStr;
use std::time::Duration;

/// The channel configuration versions are announced on.
pub const CONFIG_CHANNEL: &str = "switchyard_config";

/// The channel lease changes are announced on (SPEC R16 across replicas).
pub const LEASES_CHANNEL: &str = "switchyard_leases";

/// The advisory lock migrations run under (an arbitrary constant: "swyd" in ASCII).
const MIGRATION_LOCK: i64 = 0x7377_7964;

/// How long opening a connection may take before the database counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a caller waits for a pooled connection when all are busy or the database is
/// down: an error then, never a hang.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(3);

/// Every statement's limit (`statement_timeout`), and how long one waits for a lock.
const STATEMENT_TIMEOUT_MS: u64 = 15_000;
const LOCK_TIMEOUT_MS: u64 = 5_000;

/// Connections in a replica's pool: writes are batched and reads rare, so few.
const POOL_SIZE: u32 = 6;

/// The migrations, in order; never edit a released one, append.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_schema",
        include_str!("../migrations/postgres/0001_schema.sql"),
    ),
    (
        "0002_dashboard",
        include_str!("../migrations/postgres/0002_dashboard.sql"),
    ),
    (
        "0003_oauth",
        include_str!("../migrations/postgres/0003_oauth.sql"),
    ),
];

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        match e.code() {
            Some(c) if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::CHECK_VIOLATION => {
                Self::Constraint(e.to_string())
            }
            _ => Self::Database(describe(&e)),
        }
    }
}

/// A driver error with the server's message, when there is one (the `Display` of a
/// server error is only "db error").
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> Self {
        Self::Unavailable(format!("no PostgreSQL connection: {e}"))
    }
}

/// The connection settings of `url`, with the gateway's timeouts.
fn config(url: &str) -> Result<Config> {
    let mut c = Config::from_str(url)
        .map_err(|e| StoreError::Database(format!("the PostgreSQL URL is invalid: {e}")))?;
    c.connect_timeout(CONNECT_TIMEOUT)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .application_name("switchyard")
        .options(&format!(
            "-c statement_timeout={STATEMENT_TIMEOUT_MS} -c lock_timeout={LOCK_TIMEOUT_MS}"
        ));
    Ok(c)
}

/// One connection, outside the pool (migrations, the listener).
fn connect(url: &str) -> Result<Client> {
    config(url)?.connect(NoTls).map_err(|e| {
        StoreError::Unavailable(format!("PostgreSQL is unreachable: {}", describe(&e)))
    })
}

/// The pool's own connection errors, at debug level: while the database is down the pool
/// retries continuously, and what callers meet is reported where they meet it.
#[derive(Debug)]
struct Quiet;

impl r2d2::HandleError<postgres::Error> for Quiet {
    fn handle_error(&self, error: postgres::Error) {
        tracing::debug!(error = %describe(&error), "A pooled PostgreSQL connection failed.");
    }
}

/// A replica's pool of PostgreSQL connections.
pub(crate) struct Pool {
    inner: Option<r2d2::Pool<PostgresConnectionManager<NoTls>>>,
    /// The connection settings, for the listener's own connection.
    config: Config,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").finish_non_exhaustive()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // A client's runtime cannot be dropped on an async thread.
        if let Some(pool) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                std::thread::spawn(move || drop(pool));
            }
        }
    }
}

impl Pool {
    fn open(url: &str) -> Result<Self> {
        let config = config(url)?;
        let manager = PostgresConnectionManager::new(config.clone(), NoTls);
        let pool = r2d2::Pool::builder()
            .error_handler(Box::new(Quiet))
            .max_size(POOL_SIZE)
            .min_idle(Some(1))
            .connection_timeout(CHECKOUT_TIMEOUT)
            .build(manager)
            .map_err(|e| StoreError::Unavailable(format!("PostgreSQL is unreachable: {e}")))?;
        Ok(Self {
            inner: Some(pool),
            config,
        })
    }

    fn client(&self) -> Result<r2d2::PooledConnection<PostgresConnectionManager<NoTls>>> {
        match &self.inner {
            Some(pool) => Ok(pool.get()?),
            None => Err(StoreError::Unavailable("the pool is closed".to_owned())),
        }
    }

    /// Runs `f` in a read-only transaction.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&dyn Sql) -> Result<T>) -> Result<T> {
        let mut client = self.client()?;
        let mut tx = client.build_transaction().read_only(true).start()?;
        let out = f(&Pg(RefCell::new(&mut tx)))?;
        tx.commit()?;
        Ok(out)
    }

    /// Runs `f` in a read-write transaction: all of it commits, or none.
    pub(crate) fn write<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&dyn Sql) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(StoreError::from)?;
        let out = f(&Pg(RefCell::new(&mut tx)))?;
        tx.commit().map_err(StoreError::from)?;
        Ok(out)
    }
}

/// Announces the configuration version just written, in the transaction `db`; PostgreSQL
/// delivers it to every listener when (and only if) the transaction commits.
pub(crate) fn announce_config(db: &dyn Sql) -> Result<()> {
    db.query(
        "SELECT pg_notify(?1, value) FROM meta WHERE key = 'config_version'",
        &[Arg::Text(CONFIG_CHANNEL)],
    )?;
    Ok(())
}

/// Announces a change on `channel`, delivered at commit.
pub(crate) fn announce(db: &dyn Sql, channel: &str) -> Result<()> {
    db.query("SELECT pg_notify(?1, '')", &[Arg::Text(channel)])?;
    Ok(())
}

/// Statements in a PostgreSQL transaction.
struct Pg<'a, 'b>(RefCell<&'a mut Transaction<'b>>);

/// `?N` and `?` placeholders as PostgreSQL's `$N` (a bare `?` is one more than the
/// highest number so far, as SQLite counts). Quoted text is left alone.
fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let (mut highest, mut quoted) = (0u32, false);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c != '?' || quoted {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let n = match digits.parse::<u32>() {
            Ok(n) => n,
            Err(_) => highest.saturating_add(1),
        };
        highest = highest.max(n);
        out.push('$');
        out.push_str(&n.to_string());
    }
    out
}

impl ToSql for Arg<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Arg::Null => Ok(IsNull::Yes),
            Arg::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                #[allow(clippy::cast_precision_loss)]
                Type::FLOAT8 => (i as f64).to_sql(ty, out),
                _ => i.to_string().as_str().to_sql(ty, out),
            },
            Arg::Real(r) => match *ty {
                Type::FLOAT8 => r.to_sql(ty, out),
                _ => r.to_string().as_str().to_sql(ty, out),
            },
            Arg::Text(s) => s.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// Column `i` of `row` as a [`Value`].
fn value(row: &postgres::Row, i: usize, ty: &Type) -> Result<Value> {
    let v = match *ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)?
            .map(|v| Value::Int(v.into())),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)?
            .map(|v| Value::Int(v.into())),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(i)?
            .map(|v| Value::Int(v.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::Real),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)?
            .map(|v| Value::Real(v.into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            row.try_get::<_, Option<String>>(i)?.map(Value::Text)
        }
        // `pg_notify` and other void results.
        Type::VOID => None,
        ref other => {
            return Err(StoreError::Database(format!(
                "column {i} has type {other}, which the store does not read"
            )))
        }
    };
    Ok(v.unwrap_or(Value::Null))
}

impl Sql for Pg<'_, '_> {
    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<usize> {
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        let n = self
            .0
            .borrow_mut()
            .execute(placeholders(sql).as_str(), &params)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn query(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>> {
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        let rows = self
            .0
            .borrow_mut()
            .query(placeholders(sql).as_str(), &params)?;
        rows.iter()
            .map(|r| {
                r.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| value(r, i, c.type_()))
                    .collect::<Result<Vec<_>>>()
                    .map(Row)
            })
            .collect()
    }

    fn append(&self, table: &Table, args: &[Arg<'_>]) -> Result<()> {
        let names: Vec<&str> = table.columns.iter().map(|(n, _)| *n).collect();
        let types: Vec<Type> = table
            .columns
            .iter()
            .map(|(_, c)| match c {
                Column::Int => Type::INT8,
                Column::Text => Type::TEXT,
            })
            .collect();
        let copy = format!(
            "COPY {} ({}) FROM STDIN (FORMAT binary)",
            table.name,
            names.join(", ")
        );
        let mut tx = self.0.borrow_mut();
        let mut writer = BinaryCopyInWriter::new(tx.copy_in(copy.as_str())?, &types);
        for row in args.chunks(types.len()) {
            let values: Vec<&(dyn ToSql + Sync)> = row.iter().map(|a| a as _).collect();
            writer.write(&values)?;
        }
        writer.finish()?;
        Ok(())
    }

    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
}

/// What [`migrate`] did or would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    /// Migrations already applied, by name.
    pub applied: Vec<String>,
    /// Migrations this binary would apply, by name.
    pub pending: Vec<String>,
}

/// The migrations applied to the database at `url` and those still pending.
pub fn migration_status(url: &str) -> Result<MigrationStatus> {
    let mut client = connect(url)?;
    status(&mut client)
}

fn status(client: &mut Client) -> Result<MigrationStatus> {
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])?
        .try_get(0)?;
    let done: Vec<String> = if exists {
        client
            .query("SELECT name FROM schema_migrations ORDER BY version", &[])?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<_, _>>()?
    } else {
        Vec::new()
    };
    let supported = MIGRATIONS.len();
    if done.len() > supported {
        return Err(StoreError::SchemaTooNew {
            found: i64::try_from(done.len()).unwrap_or(i64::MAX),
            supported: i64::try_from(supported).unwrap_or(i64::MAX),
        });
    }
    Ok(MigrationStatus {
        pending: MIGRATIONS[done.len()..]
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .collect(),
        applied: done,
    })
}

/// Applies the pending migrations to the database at `url`, each in its own
/// transaction, holding an advisory lock so that replicas started together migrate one
/// at a time (the second finds nothing left to do). Returns the names applied.
pub fn migrate(url: &str) -> Result<Vec<String>> {
    let mut client = connect(url)?;
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])?;
    let applied = apply_pending(&mut client);
    // Released on disconnect as well; an explicit unlock keeps the order clear.
    client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])?;
    applied
}

fn apply_pending(client: &mut Client) -> Result<Vec<String>> {
    client.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    BIGINT PRIMARY KEY,
             name       TEXT NOT NULL,
             applied_at BIGINT NOT NULL
         )",
    )?;
    let pending = status(client)?.pending;
    let first = MIGRATIONS.len() - pending.len();
    for (i, (name, sql)) in MIGRATIONS.iter().enumerate().skip(first) {
        let version = i64::try_from(i + 1).unwrap_or(i64::MAX);
        let mut tx = client.transaction()?;
        tx.batch_execute(sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at)
             VALUES ($1, $2, (extract(epoch FROM now()) * 1000)::BIGINT)",
            &[&version, name],
        )?;
        tx.commit()?;
        tracing::info!(migration = name, "Applied PostgreSQL migration.");
    }
    Ok(pending)
}

impl Store {
    /// Opens the PostgreSQL database at `url`. Its schema must be current: with pending
    /// migrations the open fails naming them and the command that applies them
    /// ([`StoreError::PendingMigrations`]) unless `migrate` is set, in which case they
    /// are applied first (under the migration lock). Then credentials are sealed as on
    /// SQLite (see [`Store::over`]).
    pub fn open_postgres(url: &str, keys: Keyring, migrate_first: bool) -> Result<Self> {
        if migrate_first {
            migrate(url)?;
        } else {
            let pending = migration_status(url)?.pending;
            if !pending.is_empty() {
                return Err(StoreError::PendingMigrations { pending });
            }
        }
        Store::over(Db::Postgres(Pool::open(url)?), keys)
    }
}

/// What a replica hears from the others: each receiver changes on every announcement
/// of its kind, and both on every reconnection (announcements made while disconnected
/// are lost; the gateway then compares what it holds with the database).
#[derive(Debug)]
pub struct Heard {
    /// Configuration versions ([`CONFIG_CHANNEL`]).
    pub config: tokio::sync::watch::Receiver<u64>,
    /// Lease changes ([`LEASES_CHANNEL`]).
    pub leases: tokio::sync::watch::Receiver<u64>,
}

/// The sending side of [`Heard`].
struct Wake {
    config: tokio::sync::watch::Sender<u64>,
    leases: tokio::sync::watch::Sender<u64>,
}

impl Wake {
    fn closed(&self) -> bool {
        self.config.is_closed() && self.leases.is_closed()
    }
}

fn bump(tx: &tokio::sync::watch::Sender<u64>) {
    tx.send_modify(|n| *n = n.wrapping_add(1));
}

impl Store {
    /// Hears what other replicas announce (`LISTEN`, PostgreSQL only: `None` on SQLite),
    /// on a connection of its own, in a thread of its own, which ends soon after both
    /// receivers are dropped.
    pub fn listen(&self) -> Result<Option<Heard>> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(None);
        };
        let config = pool.config.clone();
        let (config_tx, config_rx) = tokio::sync::watch::channel(0u64);
        let (leases_tx, leases_rx) = tokio::sync::watch::channel(0u64);
        let wake = Wake {
            config: config_tx,
            leases: leases_tx,
        };
        std::thread::Builder::new()
            .name("switchyard-listen".to_owned())
            .spawn(move || listen(&config, &wake))
            .map_err(|e| StoreError::Database(format!("cannot start the listener: {e}")))?;
        Ok(Some(Heard {
            config: config_rx,
            leases: leases_rx,
        }))
    }
}

/// How long the listener waits between checks that the gateway still wants it, and
/// between reconnection attempts.
const LISTEN_TICK: Duration = Duration::from_millis(500);

fn listen(config: &Config, wake: &Wake) {
    let mut failures: u32 = 0;
    while !wake.closed() {
        let mut client = match config.connect(NoTls) {
            Ok(c) => c,
            Err(e) => {
                failures = failures.saturating_add(1);
                if failures.is_power_of_two() {
                    tracing::warn!(error = %describe(&e), attempts = failures, "Cannot listen for configuration changes on PostgreSQL; the version is still polled. Retrying.");
                }
                std::thread::sleep(LISTEN_TICK);
                continue;
            }
        };
        if let Err(e) =
            client.batch_execute(&format!("LISTEN {CONFIG_CHANNEL}; LISTEN {LEASES_CHANNEL}"))
        {
            tracing::warn!(error = %describe(&e), "LISTEN failed; retrying.");
            std::thread::sleep(LISTEN_TICK);
            continue;
        }
        if failures > 0 {
            tracing::info!("Listening for configuration changes on PostgreSQL again.");
        }
        failures = 0;
        // Whatever was announced while this connection was down is caught up now.
        bump(&wake.config);
        bump(&wake.leases);
        loop {
            if wake.closed() {
                return;
            }
            let heard = client.notifications().timeout_iter(LISTEN_TICK).next();
            match heard {
                Ok(Some(n)) if n.channel() == LEASES_CHANNEL => bump(&wake.leases),
                Ok(Some(_)) => bump(&wake.config),
                Ok(None) if !client.is_closed() => {}
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %describe(&e), "Lost the PostgreSQL connection that listens for configuration changes; reconnecting.");
                    break;
                }
            }
        }
    }
}

/// Throwaway PostgreSQL databases, for tests: each test creates its own (migrated)
/// database on the server at `SWITCHYARD_TEST_POSTGRES_URL` (default the local one, as
/// user `postgres`) and drops it when done, so tests never see one another's rows.
pub mod scratch {
    use super::{connect, migrate};
    use crate::Result;

    /// The test server's URL.
    pub fn server_url() -> String {
        std::env::var("SWITCHYARD_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
    }

    /// A database of a test's own, dropped (with its connections) on drop.
    #[derive(Debug)]
    pub struct Database {
        server: String,
        name: String,
        url: String,
    }

    impl Database {
        /// A new, empty database on the test server.
        pub fn create() -> Result<Self> {
            let server = server_url();
            let name = format!("sytest_{:016x}", rand_u64());
            let mut admin = connect(&server)?;
            admin.batch_execute(&format!("CREATE DATABASE {name}"))?;
            let url = with_database(&server, &name);
            Ok(Self { server, name, url })
        }

        /// A new database on the test server with this binary's schema applied.
        pub fn migrated() -> Result<Self> {
            let db = Self::create()?;
            migrate(&db.url)?;
            Ok(db)
        }

        /// The database's URL.
        pub fn url(&self) -> &str {
            &self.url
        }
    }

    impl Drop for Database {
        fn drop(&mut self) {
            let (server, name) = (self.server.clone(), self.name.clone());
            // The synchronous client cannot run on an async thread.
            let dropped = std::thread::spawn(move || {
                connect(&server)?
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
                Ok::<_, crate::StoreError>(())
            })
            .join();
            if !matches!(dropped, Ok(Ok(()))) {
                tracing::warn!(database = %self.name, "Could not drop a test database.");
            }
        }
    }

    /// `server` (a URL) with its database replaced by `name`.
    fn with_database(server: &str, name: &str) -> String {
        let (base, query) = match server.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (server, None),
        };
        // After the scheme's `//`, the first `/` starts the database name.
        let after_scheme = base.find("//").map_or(0, |i| i + 2);
        let host_end = base[after_scheme..]
            .find('/')
            .map_or(base.len(), |i| after_scheme + i);
        let mut url = format!("{}/{name}", &base[..host_end]);
        if let Some(q) = query {
            url.push('?');
            url.push_str(q);
        }
        url
    }

    fn rand_u64() -> u64 {
        let bytes = ring::rand::generate::<[u8; 8]>(&ring::rand::SystemRandom::new())
            .map_or([0; 8], |b| b.expose());
        u64::from_le_bytes(bytes)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_database_name_replaces_the_servers() {
            assert_eq!(
                super::with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
                "postgres://postgres@127.0.0.1:5432/x"
            );
            assert_eq!(
                super::with_database("postgres://u:p@h/db?sslmode=disable", "x"),
                "postgres://u:p@h/x?sslmode=disable"
            );
            assert_eq!(super::with_database("postgres://h", "x"), "postgres://h/x");
        }
    }
}
