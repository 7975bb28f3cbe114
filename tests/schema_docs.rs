//! The `# Schema` blocks in the SQL stores' docs are the tables `migrate`
//! really makes: each block is run in an empty database, the store
//! migrates another, and the two catalogs (columns with their types,
//! nullability, defaults and keys; indexes with their columns and
//! conditions; constraints; on SQLite also AUTOINCREMENT and CHECK) must be
//! the same, and every table `migrate` makes but the shared versions table
//! must be documented.

mod support;

use std::collections::BTreeMap;

use hooklatch::dedup::{PostgresInbox, SqliteInbox};
use sqlx::{AssertSqlSafe, Row};

/// The SQL in the ```sql block under `# Schema` of a store's doc comment,
/// `--` comments cut.
fn documented_schema(source: &str) -> String {
    let mut lines = source
        .lines()
        .map(str::trim_start)
        .skip_while(|line| *line != "/// # Schema")
        .skip_while(|line| *line != "/// ```sql")
        .skip(1);
    let mut sql = String::new();
    for line in lines.by_ref() {
        if line == "/// ```" {
            return sql;
        }
        let text = line.trim_start_matches("///");
        let code = text.split("--").next().unwrap_or_default();
        sql.push_str(code);
        sql.push('\n');
    }
    panic!("no ```sql block under `# Schema`");
}

/// The documented tables: every `CREATE TABLE` name in `sql`.
fn documented_tables(sql: &str) -> Vec<String> {
    sql.split("CREATE TABLE")
        .skip(1)
        .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
        .collect()
}

/// Each trigger `migrate` makes is named in the store's docs, in full or
/// by its suffix after the first (`_removed`).
fn documented_triggers(source: &str, triggers: &[String]) {
    for trigger in triggers {
        let suffix = trigger.trim_start_matches("hooklatch_inbox");
        assert!(
            source.contains(&format!("`{trigger}`")) || source.contains(&format!("`{suffix}`")),
            "the trigger {trigger} is not documented"
        );
    }
}

/// A table's columns and indexes, in a form both sides can be compared in.
type Catalog = BTreeMap<String, (Vec<String>, Vec<String>)>;

fn normalized(sql: &str) -> String {
    sql.replace("IF NOT EXISTS ", "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(")
        .replace(" )", ")")
        .to_lowercase()
}

async fn sqlite_catalog(pool: &sqlx::SqlitePool, tables: &[String]) -> Catalog {
    let mut catalog = Catalog::new();
    for table in tables {
        let columns = sqlx::query(AssertSqlSafe(format!("PRAGMA table_info({table})")))
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|row| {
                let name: String = row.get("name");
                let kind: String = row.get("type");
                let not_null: i64 = row.get("notnull");
                let default: Option<String> = row.get("dflt_value");
                let key: i64 = row.get("pk");
                format!("{name} {kind} not_null={not_null} default={default:?} key={key}")
            })
            .collect();
        let mut indexes: Vec<String> = sqlx::query(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        // Indexes SQLite makes itself (for a key or `UNIQUE`) have
        // no SQL: their name stands for them.
        .map(|row| match row.get::<Option<String>, _>("sql") {
            Some(sql) => normalized(&sql),
            None => row.get("name"),
        })
        .collect();
        for row in sqlx::query(AssertSqlSafe(format!("PRAGMA foreign_key_list({table})")))
            .fetch_all(pool)
            .await
            .unwrap()
        {
            let (to, from): (String, String) = (row.get("table"), row.get("from"));
            indexes.push(format!("references {to} from {from}"));
        }
        // What `table_info` does not show: AUTOINCREMENT and CHECK.
        let sql: String = sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE name = ?")
            .bind(table)
            .fetch_one(pool)
            .await
            .unwrap();
        let sql = sql.to_uppercase();
        for keyword in ["AUTOINCREMENT", "CHECK", "UNIQUE", "REFERENCES", "COLLATE"] {
            indexes.push(format!("{keyword} x{}", sql.matches(keyword).count()));
        }
        indexes.sort();
        catalog.insert(table.clone(), (columns, indexes));
    }
    catalog
}

async fn postgres_catalog(pool: &sqlx::PgPool, tables: &[String]) -> Catalog {
    let mut catalog = Catalog::new();
    for table in tables {
        let columns = sqlx::query(
            "SELECT column_name::text AS name, data_type::text AS kind, is_nullable::text AS nullable, \
             column_default::text AS fallback FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|row| {
            let name: String = row.get("name");
            let kind: String = row.get("kind");
            let nullable: String = row.get("nullable");
            let default: Option<String> = row.get("fallback");
            format!("{name} {kind} nullable={nullable} default={default:?}")
        })
        .collect();
        let mut indexes: Vec<String> = sqlx::query(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|row| normalized(row.get("indexdef")))
        .collect();
        let constraints: Vec<String> = sqlx::query_scalar(
            "SELECT contype::text || ' ' || pg_get_constraintdef(oid) FROM pg_constraint \
             WHERE conrelid = $1::regclass",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap();
        indexes.extend(constraints);
        indexes.sort();
        catalog.insert(table.clone(), (columns, indexes));
    }
    catalog
}

#[tokio::test]
async fn sqlite_schema_docs_are_the_tables_migrate_makes() {
    let documented = documented_schema(include_str!("../src/dedup/sqlite.rs"));
    let tables = documented_tables(&documented);
    assert_eq!(
        tables,
        [
            "hooklatch_claims",
            "hooklatch_inbox",
            "hooklatch_inbox_counts"
        ]
    );
    let dir = support::TempDir::new("schema-docs");

    let store = SqliteInbox::open(dir.path().join("real.db")).await.unwrap();
    let made: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT IN ('sqlite_sequence', 'hooklatch_schema_versions') ORDER BY name",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(made, tables, "every table migrate makes is documented");
    let triggers: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(
        triggers,
        [
            "hooklatch_inbox_added",
            "hooklatch_inbox_changed",
            "hooklatch_inbox_removed"
        ]
    );
    documented_triggers(include_str!("../src/dedup/sqlite.rs"), &triggers);
    let real = sqlite_catalog(store.pool(), &tables).await;

    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("documented.db"))
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(documented.clone()))
        .execute(&pool)
        .await
        .unwrap();
    let docs = sqlite_catalog(&pool, &tables).await;

    assert!(!real["hooklatch_inbox"].0.is_empty());
    assert_eq!(docs, real, "the documented schema:\n{documented}");
}

#[tokio::test]
async fn postgres_schema_docs_are_the_tables_migrate_makes() {
    let documented = documented_schema(include_str!("../src/dedup/postgres.rs"));
    let tables = documented_tables(&documented);
    assert_eq!(
        tables,
        [
            "hooklatch_claims",
            "hooklatch_inbox",
            "hooklatch_inbox_counts"
        ]
    );
    let server = support::postgres();
    let admin = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let mut urls = Vec::new();
    for side in ["real", "documented"] {
        let database = support::unique(&format!("schema_{side}")).to_lowercase();
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {database}")))
            .execute(&admin)
            .await
            .unwrap();
        let url = server.url();
        let (base, _) = url.rsplit_once('/').unwrap();
        urls.push(format!("{base}/{database}"));
    }

    let store = PostgresInbox::connect(&urls[0]).await.unwrap();
    let made: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' \
         AND tablename <> 'hooklatch_schema_versions' ORDER BY tablename",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(made, tables, "every table migrate makes is documented");
    let triggers: Vec<String> = sqlx::query_scalar(
        "SELECT tgname::text FROM pg_trigger WHERE NOT tgisinternal ORDER BY tgname",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        triggers,
        [
            "hooklatch_inbox_added",
            "hooklatch_inbox_changed",
            "hooklatch_inbox_emptied",
            "hooklatch_inbox_removed"
        ]
    );
    documented_triggers(include_str!("../src/dedup/postgres.rs"), &triggers);
    let real = postgres_catalog(store.pool(), &tables).await;

    let pool = sqlx::PgPool::connect(&urls[1]).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(documented.clone()))
        .execute(&pool)
        .await
        .unwrap();
    let docs = postgres_catalog(&pool, &tables).await;
    store.pool().close().await;
    pool.close().await;
    for url in &urls {
        let (_, database) = url.rsplit_once('/').unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "DROP DATABASE {database} WITH (FORCE)"
        )))
        .execute(&admin)
        .await
        .unwrap();
    }

    assert!(!real["hooklatch_inbox"].0.is_empty());
    assert_eq!(docs, real, "the documented schema:\n{documented}");
}
