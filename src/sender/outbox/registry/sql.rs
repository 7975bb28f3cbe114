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
