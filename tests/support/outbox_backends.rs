//! The delivery stores the outbox tests run on, each opened again as a
//! restarted process would: memory, SQLite (directly and through
//! `AnyOutbox`), Postgres, and Redis on one server and as a cluster. Included with `#[path]` by tests/outbox.rs and
//! tests/endpoint_registry.rs.

#![allow(dead_code, unreachable_pub)]

use hooklatch::sender::outbox::{Keeping, OutboxView};
use hooklatch::sender::{AnyOutbox, MemoryOutbox, PostgresOutbox, RedisOutbox, SqliteOutbox};

use crate::support;

/// Opens the same store again, as a restarted process would.
pub trait Backend: Send + Sync + 'static {
    type Store: OutboxView + Keeping + Clone;
    async fn open(&self) -> Self::Store;
}

pub struct Memory(pub MemoryOutbox);
impl Backend for Memory {
    type Store = MemoryOutbox;
    async fn open(&self) -> MemoryOutbox {
        self.0.clone()
    }
}

pub struct Sqlite(pub support::TempDir);
impl Backend for Sqlite {
    type Store = SqliteOutbox;
    async fn open(&self) -> SqliteOutbox {
        SqliteOutbox::open(self.0.path().join("outbox.db"))
            .await
            .expect("open sqlite")
    }
}

/// SQLite opened by URL through [`AnyOutbox`]: the suite through the
/// type-erased outbox.
pub struct AnySqlite(pub support::TempDir);
impl Backend for AnySqlite {
    type Store = AnyOutbox;
    async fn open(&self) -> AnyOutbox {
        let url = format!("sqlite:{}", self.0.path().join("outbox.db").display());
        let store = AnyOutbox::connect(&url).await.expect("open sqlite by URL");
        assert_eq!(store.kind(), "sqlite");
        store
    }
}

pub struct Postgres {
    pub server: support::Server,
    pub prefix: String,
}
impl Backend for Postgres {
    type Store = PostgresOutbox;
    async fn open(&self) -> PostgresOutbox {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .connect(&self.server.url())
            .await
            .expect("connect to postgres");
        let store = PostgresOutbox::new(pool, &self.prefix).expect("prefix");
        store.migrate().await.expect("migrate");
        store
    }
}

pub struct Redis {
    pub server: support::Server,
    pub prefix: String,
}
impl Backend for Redis {
    type Store = RedisOutbox;
    async fn open(&self) -> RedisOutbox {
        RedisOutbox::connect(&self.server.url())
            .await
            .expect("connect to redis")
            .with_prefix(&self.prefix)
            .expect("prefix")
    }
}

pub fn memory() -> Memory {
    Memory(MemoryOutbox::new())
}

pub fn sqlite() -> Sqlite {
    Sqlite(support::TempDir::new("deliveries"))
}

pub fn any_sqlite() -> AnySqlite {
    AnySqlite(support::TempDir::new("any-deliveries"))
}

pub fn redis() -> Redis {
    Redis {
        server: support::redis(),
        prefix: support::unique("d"),
    }
}

/// Redis as a cluster of three masters and three replicas: every script
/// names its keys, all in one slot.
pub fn redis_cluster() -> Redis {
    Redis {
        server: support::redis_cluster(),
        prefix: support::unique("d"),
    }
}

pub fn postgres() -> Postgres {
    Postgres {
        server: support::postgres(),
        prefix: support::unique("d"),
    }
}

/// A backend as the published outbox checks see it: each check opens its
/// one store, the backend made fresh for it, once.
#[cfg(feature = "testing")]
pub struct Fresh<B>(pub B);

#[cfg(feature = "testing")]
impl<B: Backend> hooklatch::testing::OutboxUnderTest for Fresh<B> {
    type Store = B::Store;

    async fn empty(&self) -> B::Store {
        self.0.open().await
    }

    async fn reopen(&self, _: &B::Store) -> B::Store {
        self.0.open().await
    }
}
