//! The one seam between the SQL stores and the two databases: the stores
//! are written once, generic over [`SqlDatabase`], and the few operations
//! that need a concrete sqlx database (binding a value, running a
//! statement, decoding a row, migrating) are implemented here per database.

use sqlx::{Database, Pool, SqlStr};

/// A SQL database the stores run on: sqlx's [`Sqlite`](sqlx::Sqlite) (with
/// the `sqlite` feature) or [`Postgres`](sqlx::Postgres) (with `postgres`).
///
/// The SQL stores are generic over it and named by aliases, such as
/// [`SqliteInbox`](crate::dedup::SqliteInbox) for `SqlInbox<Sqlite>`.
/// Sealed: the stores' statements are written for these two databases
/// only.
pub trait SqlDatabase: sealed::Backend {}

#[cfg(feature = "sqlite")]
impl SqlDatabase for sqlx::Sqlite {}

#[cfg(feature = "postgres")]
impl SqlDatabase for sqlx::Postgres {}

/// What a statement runs on: the pool (a connection for the statement) or
/// a connection the caller holds, such as an open transaction's.
pub enum On<'a, DB: Database> {
    Pool(&'a Pool<DB>),
    Connection(&'a mut DB::Connection),
}

impl<'a, DB: Database> From<&'a Pool<DB>> for On<'a, DB> {
    fn from(pool: &'a Pool<DB>) -> Self {
        Self::Pool(pool)
    }
}

impl<'a, DB: Database> From<&'a mut DB::Connection> for On<'a, DB> {
    fn from(connection: &'a mut DB::Connection) -> Self {
        Self::Connection(connection)
    }
}

/// A statement with its values bound, ready to run on one of the
/// databases: sqlx's query, with binding and decoding that need no bounds
/// beyond [`SqlDatabase`] at the call site.
#[must_use = "a statement does nothing until it runs"]
pub(crate) struct Statement<DB: Database> {
    query: sqlx::query::Query<'static, DB, DB::Arguments>,
}

/// The statement `sql`, with no values bound yet.
pub(crate) fn sql<DB: SqlDatabase>(sql: &SqlStr) -> Statement<DB> {
    Statement {
        query: sqlx::query(sql.clone()),
    }
}

/// A statement built for one call, such as one with a parameter per row.
pub(crate) fn sql_built<DB: SqlDatabase>(sql: impl sqlx::SqlSafeStr) -> Statement<DB> {
    Statement {
        query: sqlx::query(sql),
    }
}

impl<DB: SqlDatabase> Statement<DB> {
    /// Binds the next `$n`.
    pub(crate) fn bind(self, value: impl sealed::Value) -> Self {
        Self {
            query: DB::bind(self.query, value),
        }
    }

    /// Runs it; the number of rows it changed.
    pub(crate) async fn execute<'a>(self, on: impl Into<On<'a, DB>>) -> Result<u64, sqlx::Error> {
        DB::execute(self.query, on.into()).await
    }

    /// Runs it; every row it returned.
    pub(crate) async fn fetch_all<'a, T: sealed::Columns>(
        self,
        on: impl Into<On<'a, DB>>,
    ) -> Result<Vec<T>, sqlx::Error> {
        DB::fetch_all(self.query, on.into()).await
    }

    /// Runs it; every row it returned, undecoded.
    pub(crate) async fn fetch_rows<'a>(
        self,
        on: impl Into<On<'a, DB>>,
    ) -> Result<Vec<DB::Row>, sqlx::Error> {
        DB::fetch_rows(self.query, on.into()).await
    }

    /// Runs it; its first row, if any.
    pub(crate) async fn fetch_optional<'a, T: sealed::Columns>(
        self,
        on: impl Into<On<'a, DB>>,
    ) -> Result<Option<T>, sqlx::Error> {
        DB::fetch_optional(self.query, on.into()).await
    }

    /// Runs it; its first row, which must be there.
    pub(crate) async fn fetch_one<'a, T: sealed::Columns>(
        self,
        on: impl Into<On<'a, DB>>,
    ) -> Result<T, sqlx::Error> {
        self.fetch_optional(on)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    /// Runs it; the first column of its first row, if any.
    pub(crate) async fn fetch_optional_scalar<'a, T: sealed::Column>(
        self,
        on: impl Into<On<'a, DB>>,
    ) -> Result<Option<T>, sqlx::Error>
    where
        (T,): sealed::Columns,
    {
        Ok(self.fetch_optional::<(T,)>(on).await?.map(|(value,)| value))
    }

    /// Runs it; the first column of its first row, which must be there.
    #[cfg_attr(not(feature = "sender"), allow(dead_code))]
    pub(crate) async fn fetch_one_scalar<'a, T: sealed::Column>(
        self,
        on: impl Into<On<'a, DB>>,
    ) -> Result<T, sqlx::Error>
    where
        (T,): sealed::Columns,
    {
        Ok(self.fetch_one::<(T,)>(on).await?.0)
    }

    /// Runs it; the first column of every row.
    #[cfg_attr(not(feature = "sender"), allow(dead_code))]
    pub(crate) async fn fetch_all_scalar<'a, T: sealed::Column>(
        self,
        on: impl Into<On<'a, DB>>,
    ) -> Result<Vec<T>, sqlx::Error>
    where
        (T,): sealed::Columns,
    {
        let rows = self.fetch_all::<(T,)>(on).await?;
        Ok(rows.into_iter().map(|(value,)| value).collect())
    }
}

pub(crate) mod sealed {
    //! The operations behind [`SqlDatabase`](super::SqlDatabase), public
    //! only in name: this module is private to the crate.

    use std::future::Future;

    use sqlx::{Database, Pool};

    use super::On;
    use crate::store::sql::{Dialect, Schema};

    type Query<DB> = sqlx::query::Query<'static, DB, <DB as Database>::Arguments>;

    /// What a statement may bind: a type both compiled databases encode.
    pub trait Value: Send + EncodeSqlite + EncodePostgres {}
    impl<T: Send + EncodeSqlite + EncodePostgres> Value for T {}

    /// What a column may decode into: a type both compiled databases
    /// decode.
    pub trait Column: Send + ColumnSqlite + ColumnPostgres {}
    impl<T: Send + ColumnSqlite + ColumnPostgres> Column for T {}

    /// What a row may decode into: a tuple both compiled databases decode.
    pub trait Columns: Send + Unpin + DecodeSqlite + DecodePostgres {}
    impl<T: Send + Unpin + DecodeSqlite + DecodePostgres> Columns for T {}

    #[cfg(feature = "sqlite")]
    mod sqlite_bounds {
        use sqlx::sqlite::SqliteRow;
        use sqlx::{Encode, FromRow, Sqlite, Type};

        pub trait EncodeSqlite: for<'t> Encode<'t, Sqlite> + Type<Sqlite> {}
        impl<T: for<'t> Encode<'t, Sqlite> + Type<Sqlite>> EncodeSqlite for T {}
        pub trait DecodeSqlite: for<'r> FromRow<'r, SqliteRow> {}
        impl<T: for<'r> FromRow<'r, SqliteRow>> DecodeSqlite for T {}
        pub trait ColumnSqlite: for<'r> sqlx::Decode<'r, Sqlite> + Type<Sqlite> {}
        impl<T: for<'r> sqlx::Decode<'r, Sqlite> + Type<Sqlite>> ColumnSqlite for T {}
    }
    #[cfg(not(feature = "sqlite"))]
    mod sqlite_bounds {
        pub trait EncodeSqlite {}
        impl<T> EncodeSqlite for T {}
        pub trait DecodeSqlite {}
        impl<T> DecodeSqlite for T {}
        pub trait ColumnSqlite {}
        impl<T> ColumnSqlite for T {}
    }
    #[cfg(feature = "postgres")]
    mod postgres_bounds {
        use sqlx::postgres::PgRow;
        use sqlx::{Encode, FromRow, Postgres, Type};

        pub trait EncodePostgres: for<'t> Encode<'t, Postgres> + Type<Postgres> {}
        impl<T: for<'t> Encode<'t, Postgres> + Type<Postgres>> EncodePostgres for T {}
        pub trait DecodePostgres: for<'r> FromRow<'r, PgRow> {}
        impl<T: for<'r> FromRow<'r, PgRow>> DecodePostgres for T {}
        pub trait ColumnPostgres: for<'r> sqlx::Decode<'r, Postgres> + Type<Postgres> {}
        impl<T: for<'r> sqlx::Decode<'r, Postgres> + Type<Postgres>> ColumnPostgres for T {}
    }
    #[cfg(not(feature = "postgres"))]
    mod postgres_bounds {
        pub trait EncodePostgres {}
        impl<T> EncodePostgres for T {}
        pub trait DecodePostgres {}
        impl<T> DecodePostgres for T {}
        pub trait ColumnPostgres {}
        impl<T> ColumnPostgres for T {}
    }
    use postgres_bounds::{ColumnPostgres, DecodePostgres, EncodePostgres};
    use sqlite_bounds::{ColumnSqlite, DecodeSqlite, EncodeSqlite};

    /// The outbox's side of a database, where the sender is compiled.
    #[cfg(feature = "sender")]
    pub trait OutboxPart: crate::sender::outbox::OutboxBackend {}
    #[cfg(feature = "sender")]
    impl<T: crate::sender::outbox::OutboxBackend> OutboxPart for T {}
    #[cfg(not(feature = "sender"))]
    pub trait OutboxPart {}
    #[cfg(not(feature = "sender"))]
    impl<T> OutboxPart for T {}

    /// One database's side of the stores' shared code.
    pub trait Backend: Database + crate::dedup::sql::InboxBackend + OutboxPart {
        /// How its statements are written.
        const DIALECT: Dialect;

        /// Brings `schema` up to date on `pool`.
        fn migrate(
            pool: &Pool<Self>,
            schema: &Schema,
        ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

        fn bind(query: Query<Self>, value: impl Value) -> Query<Self>;

        fn execute(
            query: Query<Self>,
            on: On<'_, Self>,
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

        fn fetch_all<T: Columns>(
            query: Query<Self>,
            on: On<'_, Self>,
        ) -> impl Future<Output = Result<Vec<T>, sqlx::Error>> + Send;

        fn fetch_rows(
            query: Query<Self>,
            on: On<'_, Self>,
        ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send;

        /// Decodes a row a statement returned.
        fn decode<T: Columns>(row: &Self::Row) -> Result<T, sqlx::Error>;

        /// Decodes one column of a row, by position.
        fn get<T: Column>(row: &Self::Row, index: usize) -> Result<T, sqlx::Error>;

        fn fetch_optional<T: Columns>(
            query: Query<Self>,
            on: On<'_, Self>,
        ) -> impl Future<Output = Result<Option<T>, sqlx::Error>> + Send;
    }

    /// Implements [`Backend`] for one database: the same sqlx calls, made
    /// where the database's concrete types are known.
    macro_rules! backend {
        ($database:ty, $row:ty, $dialect:expr, $migrate:path) => {
            impl Backend for $database {
                const DIALECT: Dialect = $dialect;

                fn migrate(
                    pool: &Pool<Self>,
                    schema: &Schema,
                ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
                    $migrate(pool, schema)
                }

                fn bind(query: Query<Self>, value: impl Value) -> Query<Self> {
                    query.bind(value)
                }

                async fn execute(query: Query<Self>, on: On<'_, Self>) -> Result<u64, sqlx::Error> {
                    let done = match on {
                        On::Pool(pool) => query.execute(pool).await?,
                        On::Connection(connection) => query.execute(connection).await?,
                    };
                    Ok(done.rows_affected())
                }

                async fn fetch_all<T: Columns>(
                    query: Query<Self>,
                    on: On<'_, Self>,
                ) -> Result<Vec<T>, sqlx::Error> {
                    let rows = match on {
                        On::Pool(pool) => query.fetch_all(pool).await?,
                        On::Connection(connection) => query.fetch_all(connection).await?,
                    };
                    rows.iter()
                        .map(<T as sqlx::FromRow<'_, $row>>::from_row)
                        .collect()
                }

                async fn fetch_rows(
                    query: Query<Self>,
                    on: On<'_, Self>,
                ) -> Result<Vec<$row>, sqlx::Error> {
                    match on {
                        On::Pool(pool) => query.fetch_all(pool).await,
                        On::Connection(connection) => query.fetch_all(connection).await,
                    }
                }

                fn decode<T: Columns>(row: &$row) -> Result<T, sqlx::Error> {
                    <T as sqlx::FromRow<'_, $row>>::from_row(row)
                }

                fn get<T: Column>(row: &$row, index: usize) -> Result<T, sqlx::Error> {
                    sqlx::Row::try_get(row, index)
                }

                async fn fetch_optional<T: Columns>(
                    query: Query<Self>,
                    on: On<'_, Self>,
                ) -> Result<Option<T>, sqlx::Error> {
                    let row = match on {
                        On::Pool(pool) => query.fetch_optional(pool).await?,
                        On::Connection(connection) => query.fetch_optional(connection).await?,
                    };
                    row.as_ref()
                        .map(<T as sqlx::FromRow<'_, $row>>::from_row)
                        .transpose()
                }
            }
        };
    }

    #[cfg(feature = "sqlite")]
    backend!(
        sqlx::Sqlite,
        sqlx::sqlite::SqliteRow,
        super::super::SQLITE,
        super::super::migrate_sqlite
    );
    #[cfg(feature = "postgres")]
    backend!(
        sqlx::Postgres,
        sqlx::postgres::PgRow,
        super::super::POSTGRES,
        super::super::migrate_postgres
    );
}
