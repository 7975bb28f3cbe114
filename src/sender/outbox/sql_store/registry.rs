//! [`EndpointRegistry`] for [`SqlOutbox`]: its `{prefix}_endpoint_configs`
//! table and the version row, bumped in the transaction of every save and
//! removal.

use super::SqlOutbox;
use crate::sender::OutboxError;
use crate::sender::outbox::{EndpointRegistry, SavedEndpoints, validate_endpoint_name};
use crate::store::sql::{SqlDatabase, sql};

/// The registry of a SQL outbox, in its `{prefix}_endpoint_configs` table.
impl<DB: SqlDatabase> EndpointRegistry for SqlOutbox<DB> {
    async fn save_endpoint(&self, name: &str, config: &str) -> Result<u64, OutboxError> {
        validate_endpoint_name(name)?;
        let mut tx = self.pool.begin().await?;
        sql::<DB>(&self.registry.save)
            .bind(name)
            .bind(config)
            .execute(&mut *tx)
            .await?;
        let version: i64 = sql::<DB>(&self.registry.bump)
            .fetch_one_scalar(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(u64::try_from(version).unwrap_or(0))
    }

    async fn remove_endpoint(&self, name: &str) -> Result<bool, OutboxError> {
        let mut tx = self.pool.begin().await?;
        let removed = sql::<DB>(&self.registry.remove)
            .bind(name)
            .execute(&mut *tx)
            .await?
            == 1;
        if removed {
            sql::<DB>(&self.registry.bump).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(removed)
    }

    async fn endpoints_version(&self) -> Result<u64, OutboxError> {
        let version: i64 = sql::<DB>(&self.registry.version)
            .fetch_one_scalar(&self.pool)
            .await?;
        Ok(u64::try_from(version).unwrap_or(0))
    }

    // The version is read first: a save that lands between the two
    // reads shows in the rows under the older version, and the next
    // refresh, seeing the newer one, reads them again.
    async fn saved_endpoints(&self) -> Result<SavedEndpoints, OutboxError> {
        let version = self.endpoints_version().await?;
        let rows: Vec<(String, String)> =
            sql::<DB>(&self.registry.all).fetch_all(&self.pool).await?;
        Ok(SavedEndpoints {
            version,
            endpoints: rows.into_iter().collect(),
        })
    }
}
