//! [`Keeping`](super::Keeping) for the SQL outboxes: a table of
//! idempotency keys, claimed in the transaction of the enqueue, and the
//! purge of each outcome after its retention, a bounded batch a
//! transaction.

use sqlx::SqlStr;

use crate::sender::outbox::sql::tables;
use crate::store::sql::{Dialect, Schema, statement};

fn keys_table(prefix: &str) -> String {
    format!("{prefix}_send_keys")
}

/// The keys' table and the indexes the per-outcome purge reads by
/// (version 1), a schema component of its own.
pub(crate) fn schema(prefix: &str, dialect: &Dialect) -> Schema {
    let (deliveries, _, _) = tables(prefix);
    let keys = keys_table(prefix);
    let int = dialect.int;
    Schema {
        component: format!("outbox-keep:{prefix}"),
        version: 1,
        statements: vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {keys} (endpoint TEXT NOT NULL, \
                 send_key TEXT NOT NULL, event_id TEXT NOT NULL, expires_at {int} NOT NULL, \
                 PRIMARY KEY (endpoint, send_key))"
            ),
            format!("CREATE INDEX IF NOT EXISTS {keys}_expiry ON {keys} (endpoint, expires_at)"),
            format!(
                "CREATE INDEX IF NOT EXISTS {deliveries}_ended \
                 ON {deliveries} (endpoint, state, finished_at)"
            ),
            format!(
                "CREATE INDEX IF NOT EXISTS {deliveries}_sent \
                 ON {deliveries} (endpoint, state, created_at)"
            ),
        ],
    }
}

/// The statements of [`Keeping`](super::Keeping).
#[derive(Debug, Clone)]
pub(crate) struct KeepStatements {
    /// $1 endpoint, $2 key, $3 id, $4 expires, $5 now: the id, if this
    /// claimed the key (new, or expired by now).
    pub(crate) claim: SqlStr,
    /// $1 endpoint, $2 key: the id the key names.
    pub(crate) known: SqlStr,
    /// $1 endpoint, $2 now, $3 batch size.
    pub(crate) forget: SqlStr,
    /// $1 endpoint, $2 to $5 the cutoffs of delivered, gone, dead and
    /// pending, $6 now, $7 batch size: the deleted rows' endpoint and id.
    pub(crate) purge: SqlStr,
}

impl KeepStatements {
    pub(crate) fn new(prefix: &str, dialect: &Dialect) -> Self {
        let (deliveries, _, _) = tables(prefix);
        let keys = keys_table(prefix);
        let (lock, row_id) = (dialect.lock_rows, dialect.row_id);
        Self {
            // A concurrent claim of the same key waits for this one's
            // transaction, then sees a live key and claims nothing.
            claim: statement(format!(
                "INSERT INTO {keys} (endpoint, send_key, event_id, expires_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (endpoint, send_key) DO UPDATE \
                 SET event_id = excluded.event_id, expires_at = excluded.expires_at \
                 WHERE {keys}.expires_at <= $5 RETURNING event_id"
            )),
            known: statement(format!(
                "SELECT event_id FROM {keys} WHERE endpoint = $1 AND send_key = $2"
            )),
            forget: statement(format!(
                "DELETE FROM {keys} WHERE {}",
                dialect.picked(&format!(
                    "SELECT {row_id} FROM {keys} WHERE endpoint = $1 AND expires_at <= $2 \
                     LIMIT $3{lock}"
                ))
            )),
            purge: statement(format!(
                "DELETE FROM {deliveries} WHERE {} RETURNING endpoint, event_id",
                dialect.picked(&format!(
                    "SELECT {row_id} FROM {deliveries} WHERE endpoint = $1 AND (\
                     (state = 1 AND finished_at < $2) OR (state = 2 AND finished_at < $3) \
                     OR (state = 3 AND finished_at < $4) OR (state = 0 AND created_at < $5 \
                     AND (lease_until IS NULL OR lease_until <= $6))) LIMIT $7{lock}"
                ))
            )),
        }
    }
}
