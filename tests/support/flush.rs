//! A Postgres that flushes its WAL lazily, to catch a commit answered
//! before its flush: for the tests of durable writes on Postgres. Included
//! by the tests that use it (`#[path = "support/flush.rs"] mod flush;`),
//! next to `mod support;`.

/// A private Postgres whose WAL writer waits 10 s between flushes, a pool
/// on it whose commits wait for their flush (for setup and checks), and
/// the options of a pool whose commits do not (`synchronous_commit =
/// off`): a commit through such a pool that returns unflushed leaves the
/// WAL unflushed for seconds, long enough for [`wal_flushed`] to see it.
pub(crate) async fn postgres_with_lazy_wal_writer() -> (
    crate::support::Postgres,
    sqlx::PgPool,
    sqlx::postgres::PgConnectOptions,
) {
    let server = crate::support::Postgres::start();
    let admin = sqlx::PgPool::connect(&server.url()).await.unwrap();
    for statement in [
        "ALTER SYSTEM SET wal_writer_delay = '10s'",
        "SELECT pg_reload_conf()",
    ] {
        sqlx::query(statement).execute(&admin).await.unwrap();
    }
    let options: sqlx::postgres::PgConnectOptions = server.url().parse().unwrap();
    let unflushed = options.options([("synchronous_commit", "off")]);
    (server, admin, unflushed)
}

/// Whether the server `admin` is on has flushed all the WAL it wrote.
pub(crate) async fn wal_flushed(admin: &sqlx::PgPool) -> bool {
    let (flushed,): (bool,) =
        sqlx::query_as("SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn()")
            .fetch_one(admin)
            .await
            .unwrap();
    flushed
}
