//! The receiver a competent user writes instead of using hooklatch, on
//! each store, to measure the example against in the same rounds:
//!
//! - the `standardwebhooks` crate verifies;
//! - SQLite and Postgres: one `INSERT .. ON CONFLICT DO NOTHING` into a
//!   table with a partial index of what is not done (SQLite in WAL mode
//!   with `synchronous=FULL`, as durable as hooklatch's, through sqlx's
//!   pool);
//! - Redis: one Lua script doing `SET NX EX` (the claim, kept a day) and
//!   `XADD`;
//! - a worker taking 256 at a time: `SELECT .. LIMIT 256` then `UPDATE ..
//!   SET done` on SQLite, the same in one transaction with `FOR UPDATE
//!   SKIP LOCKED` on Postgres, `XREADGROUP` then `XACK` + `XDEL` on Redis;
//!   it writes each event's line as the example's worker does (to a sink:
//!   the example's standard output is /dev/null), and waits 5 ms after a
//!   short batch.
//!
//! A 202 means stored on every store, as with hooklatch; a store error is
//! a 503.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use sqlx::{PgPool, SqlitePool};

/// How many events the worker takes at once.
const BATCH: usize = 256;

/// The wait after a batch shorter than [`BATCH`].
const FILL_PAUSE: Duration = Duration::from_millis(5);

const REDIS_STREAM: &str = "hand:events";
const REDIS_GROUP: &str = "workers";

/// Claims the id for a day and appends the event, or says it was seen.
const REDIS_ACCEPT: &str = r"
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', 86400) then
  redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'body', ARGV[2])
  return 1
end
return 0
";

/// Where the hand-rolled receiver keeps its events.
#[derive(Clone)]
pub(crate) enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    Redis {
        connection: redis::aio::MultiplexedConnection,
        client: Box<redis::Client>,
    },
}

impl Store {
    /// A SQLite file at `path`, created with its table.
    pub(crate) async fn sqlite(path: &std::path::Path) -> Self {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Full);
        let pool = SqlitePool::connect_with(options).await.expect("sqlite");
        for statement in [
            "CREATE TABLE IF NOT EXISTS inbox (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, \
             body BLOB NOT NULL, done INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX IF NOT EXISTS inbox_waiting ON inbox (seq) WHERE done = 0",
        ] {
            sqlx::query(statement).execute(&pool).await.expect("schema");
        }
        Self::Sqlite(pool)
    }

    /// The Postgres database at `url`, with its table.
    pub(crate) async fn postgres(url: &str) -> Self {
        let pool = PgPool::connect(url).await.expect("postgres");
        for statement in [
            "CREATE TABLE IF NOT EXISTS inbox (id text PRIMARY KEY, body bytea NOT NULL, \
             done boolean NOT NULL DEFAULT false, received_at timestamptz NOT NULL DEFAULT now())",
            "CREATE INDEX IF NOT EXISTS inbox_waiting ON inbox (received_at) WHERE NOT done",
        ] {
            sqlx::query(statement).execute(&pool).await.expect("schema");
        }
        Self::Postgres(pool)
    }

    /// The Redis server at `url`, with the stream's consumer group.
    pub(crate) async fn redis(url: &str) -> Self {
        let client = redis::Client::open(url).expect("redis url");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg(&["CREATE", REDIS_STREAM, REDIS_GROUP, "$", "MKSTREAM"])
            .query_async(&mut connection)
            .await;
        if let Err(error) = created
            && error.code() != Some("BUSYGROUP")
        {
            panic!("cannot create the consumer group: {error}");
        }
        Self::Redis {
            connection,
            client: Box::new(client),
        }
    }

    /// Stores the event once: true if new, false if seen before.
    async fn accept(&self, id: &str, body: &[u8]) -> Result<bool, String> {
        match self {
            Self::Sqlite(pool) => sqlx::query(
                "INSERT INTO inbox (id, body) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
            )
            .bind(id)
            .bind(body)
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
            .map_err(|error| error.to_string()),
            Self::Postgres(pool) => sqlx::query(
                "INSERT INTO inbox (id, body) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
            )
            .bind(id)
            .bind(body)
            .execute(pool)
            .await
            .map(|done| done.rows_affected() == 1)
            .map_err(|error| error.to_string()),
            Self::Redis { connection, .. } => {
                let mut connection = connection.clone();
                redis::Script::new(REDIS_ACCEPT)
                    .key(format!("hand:seen:{id}"))
                    .key(REDIS_STREAM)
                    .arg(id)
                    .arg(body)
                    .invoke_async::<i64>(&mut connection)
                    .await
                    .map(|added| added == 1)
                    .map_err(|error| error.to_string())
            }
        }
    }

    /// How many events wait for the worker.
    pub(crate) async fn waiting(&self) -> u64 {
        match self {
            Self::Sqlite(pool) => {
                sqlx::query_scalar::<_, i64>("SELECT count(*) FROM inbox WHERE done = 0")
                    .fetch_one(pool)
                    .await
                    .expect("count")
                    .unsigned_abs()
            }
            Self::Postgres(pool) => {
                sqlx::query_scalar::<_, i64>("SELECT count(*) FROM inbox WHERE NOT done")
                    .fetch_one(pool)
                    .await
                    .expect("count")
                    .unsigned_abs()
            }
            Self::Redis { connection, .. } => {
                let mut connection = connection.clone();
                redis::cmd("XLEN")
                    .arg(REDIS_STREAM)
                    .query_async(&mut connection)
                    .await
                    .expect("xlen")
            }
        }
    }
}

/// Writes each event's line, as the example's worker does.
fn handle<'a>(events: impl Iterator<Item = (&'a str, &'a [u8])>) {
    let mut lines = Vec::new();
    for (id, body) in events {
        let _ = writeln!(
            lines,
            "event {id} (attempt 1): {}",
            String::from_utf8_lossy(body)
        );
    }
    let _ = std::io::sink().write_all(std::hint::black_box(&lines));
}

/// The worker: takes up to [`BATCH`], handles them, marks them done;
/// waits [`FILL_PAUSE`] after a short batch (on Redis the read itself
/// waits up to 5 ms for an event).
async fn work(store: Store) {
    let mut blocking = match &store {
        // Its own connection: a blocking read holds up a connection.
        Store::Redis { client, .. } => Some(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("redis"),
        ),
        Store::Sqlite(_) | Store::Postgres(_) => None,
    };
    loop {
        let taken = match (&store, blocking.as_mut()) {
            (Store::Sqlite(pool), _) => work_sqlite(pool).await.map_err(|error| error.to_string()),
            (Store::Postgres(pool), _) => {
                work_postgres(pool).await.map_err(|error| error.to_string())
            }
            (Store::Redis { .. }, Some(connection)) => work_redis(connection)
                .await
                .map_err(|error| error.to_string()),
            (Store::Redis { .. }, None) => Err("no connection for the worker".to_owned()),
        };
        match taken {
            Ok(taken) if taken == BATCH || blocking.is_some() => {}
            Ok(_) => tokio::time::sleep(FILL_PAUSE).await,
            Err(error) => {
                eprintln!("hand-rolled worker: {error}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn work_sqlite(pool: &SqlitePool) -> Result<usize, sqlx::Error> {
    let rows: Vec<(i64, String, Vec<u8>)> =
        sqlx::query_as("SELECT seq, id, body FROM inbox WHERE done = 0 ORDER BY seq LIMIT ?")
            .bind(BATCH as i64)
            .fetch_all(pool)
            .await?;
    if rows.is_empty() {
        return Ok(0);
    }
    handle(
        rows.iter()
            .map(|(_, id, body)| (id.as_str(), body.as_slice())),
    );
    let last = rows.last().map_or(0, |(seq, _, _)| *seq);
    let first = rows.first().map_or(0, |(seq, _, _)| *seq);
    // One worker: what it read is all the not-done rows in that range.
    sqlx::query("UPDATE inbox SET done = 1 WHERE done = 0 AND seq BETWEEN ? AND ?")
        .bind(first)
        .bind(last)
        .execute(pool)
        .await?;
    Ok(rows.len())
}

async fn work_postgres(pool: &PgPool) -> Result<usize, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(
        "SELECT id, body FROM inbox WHERE NOT done ORDER BY received_at LIMIT $1 \
         FOR UPDATE SKIP LOCKED",
    )
    .bind(BATCH as i64)
    .fetch_all(&mut *transaction)
    .await?;
    if rows.is_empty() {
        transaction.rollback().await?;
        return Ok(0);
    }
    handle(rows.iter().map(|(id, body)| (id.as_str(), body.as_slice())));
    let ids: Vec<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
    sqlx::query("UPDATE inbox SET done = true WHERE id = ANY($1)")
        .bind(&ids)
        .execute(&mut *transaction)
        .await?;
    transaction.commit().await?;
    Ok(rows.len())
}

async fn work_redis(
    connection: &mut redis::aio::MultiplexedConnection,
) -> Result<usize, redis::RedisError> {
    let options = redis::streams::StreamReadOptions::default()
        .group(REDIS_GROUP, "worker")
        .count(BATCH)
        .block(5);
    let reply: redis::streams::StreamReadReply =
        redis::AsyncCommands::xread_options(connection, &[REDIS_STREAM], &[">"], &options).await?;
    let entries: Vec<redis::streams::StreamId> =
        reply.keys.into_iter().flat_map(|key| key.ids).collect();
    if entries.is_empty() {
        return Ok(0);
    }
    let fields: Vec<(String, Vec<u8>)> = entries
        .iter()
        .map(|entry| {
            (
                entry.get("id").unwrap_or_default(),
                entry.get("body").unwrap_or_default(),
            )
        })
        .collect();
    handle(
        fields
            .iter()
            .map(|(id, body)| (id.as_str(), body.as_slice())),
    );
    let ids: Vec<&str> = entries.iter().map(|entry| entry.id.as_str()).collect();
    let _: () = redis::pipe()
        .atomic()
        .cmd("XACK")
        .arg(REDIS_STREAM)
        .arg(REDIS_GROUP)
        .arg(&ids)
        .ignore()
        .cmd("XDEL")
        .arg(REDIS_STREAM)
        .arg(&ids)
        .ignore()
        .query_async(connection)
        .await?;
    Ok(entries.len())
}

struct App {
    webhook: standardwebhooks::Webhook,
    store: Store,
}

async fn receive(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    if app.webhook.verify(&body, &headers).is_err() {
        return StatusCode::UNAUTHORIZED;
    }
    let Some(id) = headers.get("webhook-id").and_then(|id| id.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    match app.store.accept(id, &body).await {
        Ok(true) => StatusCode::ACCEPTED,
        Ok(false) => StatusCode::OK,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// Serves the hand-rolled receiver on `port` with its worker, on this
/// runtime, until both handles are aborted.
pub(crate) async fn serve(
    store: Store,
    secret: &str,
    port: u16,
) -> [tokio::task::JoinHandle<()>; 2] {
    let app = Arc::new(App {
        webhook: standardwebhooks::Webhook::new(secret).expect("secret"),
        store: store.clone(),
    });
    let router = Router::new()
        .route("/webhooks", post(receive))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind");
    [
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        }),
        tokio::spawn(work(store)),
    ]
}
