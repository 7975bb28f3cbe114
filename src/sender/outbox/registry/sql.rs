//! The endpoint registry of the SQL outboxes: one row per endpoint and a
//! one-row version, bumped in the transaction of every save and removal.

use sqlx::SqlStr;

use crate::store::sql::{Dialect, Schema, statement};

/// The registry's tables (version 1), a schema component of its own.
pub(crate) fn schema(prefix: &str, dialect: &Dialect) -> Schema {
    let (configs, version) = tables(prefix);
    let int = dialect.int;
    Schema {
        component: format!("endpoint-registry:{prefix}"),
        version: 1,
        statements: vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {configs} \
                 (endpoint TEXT PRIMARY KEY, config TEXT NOT NULL)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {version} \
                 (id {int} PRIMARY KEY, version {int} NOT NULL)"
            ),
            format!(
                "INSERT INTO {version} (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
            ),
        ],
    }
}

fn tables(prefix: &str) -> (String, String) {
    (
        format!("{prefix}_endpoint_configs"),
        format!("{prefix}_endpoint_configs_version"),
    )
}

/// The registry's statements.
#[derive(Debug, Clone)]
pub(crate) struct RegistryStatements {
    /// $1 endpoint, $2 config.
    pub(crate) save: SqlStr,
    /// $1 endpoint.
    pub(crate) remove: SqlStr,
    /// The version after the change.
    pub(crate) bump: SqlStr,
    pub(crate) version: SqlStr,
    pub(crate) all: SqlStr,
}

impl RegistryStatements {
    pub(crate) fn new(prefix: &str) -> Self {
        let (configs, version) = tables(prefix);
        Self {
            save: statement(format!(
                "INSERT INTO {configs} (endpoint, config) VALUES ($1, $2) \
                 ON CONFLICT (endpoint) DO UPDATE SET config = excluded.config"
            )),
            remove: statement(format!("DELETE FROM {configs} WHERE endpoint = $1")),
            bump: statement(format!(
                "UPDATE {version} SET version = version + 1 WHERE id = 1 RETURNING version"
            )),
            version: statement(format!("SELECT version FROM {version} WHERE id = 1")),
            all: statement(format!("SELECT endpoint, config FROM {configs}")),
        }
    }
}

/// Implements [`EndpointRegistry`](crate::sender::outbox::EndpointRegistry) for a
/// SQL outbox with `pool` and `registry` ([`RegistryStatements`]) fields.
macro_rules! sql_endpoint_registry {
    ($store:ty) => {
        impl $crate::sender::outbox::EndpointRegistry for $store {
            async fn save_endpoint(
                &self,
                name: &str,
                config: &str,
            ) -> Result<u64, $crate::sender::OutboxError> {
                $crate::dedup::validate_namespace(name)?;
                let mut tx = self.pool.begin().await?;
                sqlx::query(self.registry.save.clone())
                    .bind(name)
                    .bind(config)
                    .execute(&mut *tx)
                    .await?;
                let version: i64 = sqlx::query_scalar(self.registry.bump.clone())
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(u64::try_from(version).unwrap_or(0))
            }

            async fn remove_endpoint(
                &self,
                name: &str,
            ) -> Result<bool, $crate::sender::OutboxError> {
                let mut tx = self.pool.begin().await?;
                let removed = sqlx::query(self.registry.remove.clone())
                    .bind(name)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                if removed {
                    sqlx::query(self.registry.bump.clone())
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(removed)
            }

            async fn endpoints_version(&self) -> Result<u64, $crate::sender::OutboxError> {
                let version: i64 = sqlx::query_scalar(self.registry.version.clone())
                    .fetch_one(&self.pool)
                    .await?;
                Ok(u64::try_from(version).unwrap_or(0))
            }

            // The version is read first: a save that lands between the two
            // reads shows in the rows under the older version, and the next
            // refresh, seeing the newer one, reads them again.
            async fn saved_endpoints(
                &self,
            ) -> Result<$crate::sender::outbox::SavedEndpoints, $crate::sender::OutboxError> {
                let version = self.endpoints_version().await?;
                let rows: Vec<(String, String)> = sqlx::query_as(self.registry.all.clone())
                    .fetch_all(&self.pool)
                    .await?;
                Ok($crate::sender::outbox::SavedEndpoints {
                    version,
                    endpoints: rows.into_iter().collect(),
                })
            }
        }
    };
}

pub(crate) use sql_endpoint_registry;
