//! One write to an inbox's tables, owned so that it can wait in a queue:
//! a statement, its arguments and what its caller wants back. The Postgres
//! store runs a write on its pool at once; the SQLite store hands every
//! write to its one writer, which commits what queued together in one
//! transaction (see `SqliteInbox`).

use sqlx::SqlStr;

use crate::store::sql::{On, SqlDatabase, Statement, sql};

/// An argument of a [`Write`], bound in order.
#[derive(Debug, Clone)]
// Bodies and timestamps are bound by SQLite's accept only.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) enum Arg {
    Int(i64),
    Text(String),
    OptText(Option<String>),
    OptInt(Option<i64>),
    Bytes(Vec<u8>),
}

/// What the caller of a [`Write`] wants back.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Want {
    /// How many rows it changed.
    Affected,
    /// The rows it returned.
    Rows,
}

/// One statement to run, with its arguments.
#[derive(Debug, Clone)]
pub struct Write {
    pub(crate) statement: SqlStr,
    pub(crate) args: Vec<Arg>,
    pub(crate) want: Want,
    /// An accept (namespace, id, retention, body, signed at, meta), which
    /// a writer may run together with the accepts next to it.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) accept: bool,
}

/// What a [`Write`] gave back.
#[derive(Debug)]
pub enum Written<R> {
    Affected(u64),
    Rows(Vec<R>),
}

impl Write {
    pub(crate) fn new(statement: SqlStr, want: Want) -> Self {
        Self {
            statement,
            args: Vec::with_capacity(6),
            want,
            accept: false,
        }
    }

    /// An accept: `statement` claims and enqueues one event, and the
    /// arguments follow.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn accept(statement: SqlStr) -> Self {
        Self {
            accept: true,
            ..Self::new(statement, Want::Affected)
        }
    }

    pub(crate) fn int(mut self, value: i64) -> Self {
        self.args.push(Arg::Int(value));
        self
    }

    pub(crate) fn text(mut self, value: &str) -> Self {
        self.args.push(Arg::Text(value.to_owned()));
        self
    }

    pub(crate) fn opt_text(mut self, value: Option<&str>) -> Self {
        self.args.push(Arg::OptText(value.map(str::to_owned)));
        self
    }

    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn opt_int(mut self, value: Option<i64>) -> Self {
        self.args.push(Arg::OptInt(value));
        self
    }

    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn bytes(mut self, value: &[u8]) -> Self {
        self.args.push(Arg::Bytes(value.to_vec()));
        self
    }
}

impl<R> Written<R> {
    /// The rows changed (0 for a write that wanted rows).
    pub(crate) fn affected(self) -> u64 {
        match self {
            Self::Affected(count) => count,
            Self::Rows(_) => 0,
        }
    }

    /// The rows returned (none for a write that wanted a count).
    pub(crate) fn rows(self) -> Vec<R> {
        match self {
            Self::Rows(rows) => rows,
            Self::Affected(_) => Vec::new(),
        }
    }
}

/// Runs `write` on `on`, binding its arguments by reference.
pub(crate) async fn run_write<DB: SqlDatabase>(
    write: &Write,
    on: On<'_, DB>,
) -> Result<Written<DB::Row>, sqlx::Error> {
    run_write_as(write, sql::<DB>(&write.statement), on).await
}

/// Runs `statement`, which carries `write`'s statement (with others around
/// it that take no arguments), with `write`'s arguments.
pub(crate) async fn run_write_as<DB: SqlDatabase>(
    write: &Write,
    mut statement: Statement<DB>,
    on: On<'_, DB>,
) -> Result<Written<DB::Row>, sqlx::Error> {
    for arg in &write.args {
        statement = match arg {
            Arg::Int(value) => statement.bind(*value),
            Arg::Text(value) => statement.bind(value.as_str()),
            // sqlx copies a `&str` into its arguments but encodes an
            // `Option<&str>` only for `'static`: bind the text or a typed
            // NULL, so the metadata is not cloned first.
            Arg::OptText(Some(value)) => statement.bind(value.as_str()),
            Arg::OptText(None) => statement.bind(None::<String>),
            Arg::OptInt(value) => statement.bind(*value),
            Arg::Bytes(value) => statement.bind(&value[..]),
        };
    }
    Ok(match write.want {
        Want::Affected => Written::Affected(statement.execute(on).await?),
        Want::Rows => Written::Rows(statement.fetch_rows(on).await?),
    })
}
