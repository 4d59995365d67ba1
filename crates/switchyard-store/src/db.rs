//! One SQL interface over both databases. The domain modules (`config`, `keys`, `log`,
//! `quota`, `resilience`, `sessions`, `leases`) write their statements once, in the
//! subset SQLite and PostgreSQL share, with `?N` placeholders, and run them through
//! [`Sql`]; a backend binds [`Arg`]s and hands rows back as [`Row`]s of [`Value`]s. The
//! few statements the two databases spell differently ask [`Sql::dialect`].
//!
//! Every call is synchronous and runs on the blocking pool, as SQLite's always did; what
//! crosses this seam is owned and small, since nothing here is on the request path.

use crate::{Result, StoreError};
use std::sync::OnceLock;

/// Which database a statement runs on, for the few statements spelled differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A column's type, for [`Sql::append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Int,
    Text,
}

/// How many rows one statement of SQLite's [`Sql::append`] inserts, largest first: a
/// batch is written in statements of these sizes. Each execution of an INSERT opens a
/// cursor on the table and on every index and updates the AUTOINCREMENT sequence; 32
/// rows a statement cost the request log's writer 37 % less per row than one.
pub(crate) const ROWS_PER_INSERT: [usize; 3] = [32, 8, 1];

/// The columns of a table that [`Sql::append`] writes, in order.
#[derive(Debug)]
pub(crate) struct Table {
    pub name: &'static str,
    pub columns: &'static [(&'static str, Column)],
    /// The text of [`Table::inserts`], made once.
    inserts: OnceLock<[String; ROWS_PER_INSERT.len()]>,
}

impl Table {
    pub(crate) const fn new(
        name: &'static str,
        columns: &'static [(&'static str, Column)],
    ) -> Self {
        Self {
            name,
            columns,
            inserts: OnceLock::new(),
        }
    }

    /// `INSERT INTO <table> (…) VALUES (?, …), …` for each of [`ROWS_PER_INSERT`], with
    /// its number of rows.
    pub(crate) fn inserts(&self) -> impl Iterator<Item = (usize, &str)> {
        let texts = self
            .inserts
            .get_or_init(|| ROWS_PER_INSERT.map(|rows| self.insert(rows)));
        ROWS_PER_INSERT
            .into_iter()
            .zip(texts.iter().map(String::as_str))
    }

    fn insert(&self, rows: usize) -> String {
        let names: Vec<&str> = self.columns.iter().map(|(n, _)| *n).collect();
        let row = format!("({})", vec!["?"; self.columns.len()].join(", "));
        format!(
            "INSERT INTO {} ({}) VALUES {}",
            self.name,
            names.join(", "),
            vec![row; rows].join(", ")
        )
    }
}

/// A bound argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
}

/// What can be bound as an [`Arg`].
pub(crate) trait ToArg {
    fn to_arg(&self) -> Arg<'_>;
}

impl ToArg for str {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for String {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for i64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(*self)
    }
}

/// Stored as a signed integer, saturating at `i64::MAX` (no stored count or time
/// comes near it).
impl ToArg for u64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl ToArg for usize {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl ToArg for $t {
            fn to_arg(&self) -> Arg<'_> {
                Arg::Int(i64::from(*self))
            }
        }
    )*};
}
int_arg!(i32, u32, u16, u8, bool);

impl ToArg for f64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Real(*self)
    }
}

impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Arg<'_> {
        (**self).to_arg()
    }
}

impl<T: ToArg> ToArg for Option<T> {
    fn to_arg(&self) -> Arg<'_> {
        self.as_ref().map_or(Arg::Null, ToArg::to_arg)
    }
}

/// The arguments of a statement: `&args![id, now]`.
macro_rules! args {
    ($($x:expr),* $(,)?) => {
        [$($crate::db::ToArg::to_arg(&$x)),*]
    };
}
pub(crate) use args;

/// A value read back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

/// One result row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row(pub(crate) Vec<Value>);

impl Row {
    /// Column `i` as a `T`; a type this column cannot be read as is an error naming it.
    pub(crate) fn get<T: FromValue>(&self, i: usize) -> Result<T> {
        let v = self.0.get(i).unwrap_or(&Value::Null);
        T::from_value(v).ok_or_else(|| {
            StoreError::Database(format!(
                "column {i} holds {v:?}, which is not {}",
                std::any::type_name::<T>()
            ))
        })
    }
}

/// What a [`Value`] can be read as.
pub(crate) trait FromValue: Sized {
    fn from_value(v: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// Negative stored values (none are written) read as 0.
impl FromValue for u64 {
    fn from_value(v: &Value) -> Option<Self> {
        i64::from_value(v).map(|i| u64::try_from(i).unwrap_or(0))
    }
}

macro_rules! narrow_int {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: &Value) -> Option<Self> {
                i64::from_value(v).and_then(|i| <$t>::try_from(i).ok())
            }
        }
    )*};
}
narrow_int!(i32, u32, u16, usize);

impl FromValue for bool {
    fn from_value(v: &Value) -> Option<Self> {
        i64::from_value(v).map(|i| i != 0)
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Real(r) => Some(*r),
            #[allow(clippy::cast_precision_loss)]
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Null => Some(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// A database connection or transaction the domain modules run statements on.
pub(crate) trait Sql {
    /// Runs a statement; how many rows it changed. A unique or check constraint's
    /// refusal is [`StoreError::Constraint`].
    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<usize>;
    /// Runs a query; every row, materialised.
    fn query(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>>;
    /// Appends rows to `table`: `args` holds each row's values in the table's column
    /// order, row after row. SQLite runs one prepared INSERT per row; PostgreSQL one binary COPY,
    /// which spares the server parsing and planning a statement per chunk of rows.
    fn append(&self, table: &Table, args: &[Arg<'_>]) -> Result<()>;
    /// The database's dialect.
    fn dialect(&self) -> Dialect;
}

impl dyn Sql + '_ {
    /// The first row of a query, if any.
    pub(crate) fn query_opt(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Row>> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    /// The first row of a query that always returns one.
    pub(crate) fn query_one(&self, sql: &str, args: &[Arg<'_>]) -> Result<Row> {
        self.query_opt(sql, args)?
            .ok_or_else(|| StoreError::Database(format!("no row from: {sql}")))
    }

    /// Every row of a query, each mapped by `f`.
    pub(crate) fn query_map<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.query(sql, args)?.iter().map(f).collect()
    }
}
