//! [`OutboxView`](super::OutboxView) for the SQL outboxes.

use sqlx::{Decode, Row, SqlStr, Type};

use super::RecentAttempt;
use crate::sender::outbox::codes::{AttemptRow, attempt_from_fields};
use crate::sender::outbox::sql::tables;
use crate::store::sql::{Schema, statement};

/// A recent attempt as the view reads it: the delivery's id, then the
/// attempt's columns in [`AttemptRow`]'s order.
pub(crate) struct RecentRow(String, AttemptRow);

impl<'r, R: Row> sqlx::FromRow<'r, R> for RecentRow
where
    usize: sqlx::ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        let attempt = (
            row.try_get(1)?,
            row.try_get(2)?,
            row.try_get(3)?,
            row.try_get(4)?,
            row.try_get(5)?,
            row.try_get(6)?,
            row.try_get(7)?,
            row.try_get(8)?,
            row.try_get(9)?,
        );
        Ok(Self(row.try_get(0)?, attempt))
    }
}

impl From<RecentRow> for RecentAttempt {
    fn from(RecentRow(id, attempt): RecentRow) -> Self {
        Self {
            id,
            attempt: attempt_from_fields(attempt),
        }
    }
}

/// An index for the latest attempts of an endpoint (version 1).
pub(crate) fn schema(prefix: &str) -> Schema {
    let (_, attempts, _) = tables(prefix);
    Schema {
        component: format!("outbox-view:{prefix}"),
        version: 1,
        statements: vec![format!(
            "CREATE INDEX IF NOT EXISTS {attempts}_recent ON {attempts} (endpoint, sent_at)"
        )],
    }
}

/// The view's statements.
#[derive(Debug, Clone)]
pub(crate) struct ViewStatements {
    pub(crate) names: SqlStr,
    /// $1 endpoint, $2 now: state, count, due count.
    pub(crate) counts: SqlStr,
    /// $1 endpoint, $2 limit: the id, then an attempt's row.
    pub(crate) recent: SqlStr,
    /// $1 the name the page starts after (NULL: from the first), $2 the
    /// page's length, $3 now: for each endpoint its name, health fields,
    /// saved configuration, and pending, due, delivered, gone and dead
    /// counts.
    pub(crate) page: SqlStr,
}

impl ViewStatements {
    pub(crate) fn new(prefix: &str) -> Self {
        let (deliveries, attempts, health) = tables(prefix);
        let configs = format!("{prefix}_endpoint_configs");
        let past = "endpoint >= COALESCE($1, '') AND ($1 IS NULL OR endpoint > $1)";
        Self {
            names: statement(format!(
                "SELECT endpoint FROM {deliveries} UNION SELECT endpoint FROM {health} \
                 UNION SELECT endpoint FROM {configs} ORDER BY endpoint"
            )),
            counts: statement(format!(
                "SELECT state, COUNT(*), SUM(CASE WHEN state = 0 AND due_at <= $2 \
                 AND (lease_until IS NULL OR lease_until <= $2) THEN 1 ELSE 0 END) \
                 FROM {deliveries} WHERE endpoint = $1 GROUP BY state"
            )),
            recent: statement(format!(
                "SELECT event_id, number, sent_at, waited_ms, reason, held_ms, status, error, \
                 duration_us, excerpt FROM {attempts} WHERE endpoint = $1 \
                 ORDER BY sent_at DESC, number DESC LIMIT $2"
            )),
            // Each table gives its first names past $1 in index order (the
            // page's names are among them), and the counts are grouped over
            // the page's endpoints only: a page costs its endpoints'
            // deliveries, not the outbox's. `>= COALESCE($1, '')` is the
            // bound an index can use in a generic plan; the OR is exact.
            page: statement(format!(
                "WITH page AS (\
                   SELECT endpoint FROM (SELECT DISTINCT endpoint FROM {deliveries} \
                     WHERE {past} ORDER BY endpoint LIMIT $2) AS used \
                   UNION SELECT endpoint FROM (SELECT endpoint FROM {health} \
                     WHERE {past} ORDER BY endpoint LIMIT $2) AS healthy \
                   UNION SELECT endpoint FROM (SELECT endpoint FROM {configs} \
                     WHERE {past} ORDER BY endpoint LIMIT $2) AS saved \
                   ORDER BY endpoint LIMIT $2), \
                 counted AS (\
                   SELECT endpoint, \
                   SUM(CASE WHEN state = 0 THEN 1 ELSE 0 END) AS pending, \
                   SUM(CASE WHEN state = 0 AND due_at <= $3 \
                     AND (lease_until IS NULL OR lease_until <= $3) THEN 1 ELSE 0 END) AS due, \
                   SUM(CASE WHEN state = 1 THEN 1 ELSE 0 END) AS delivered, \
                   SUM(CASE WHEN state = 2 THEN 1 ELSE 0 END) AS gone, \
                   SUM(CASE WHEN state = 3 THEN 1 ELSE 0 END) AS dead \
                   FROM {deliveries} WHERE endpoint IN (SELECT endpoint FROM page) \
                   GROUP BY endpoint) \
                 SELECT page.endpoint, h.failing_since, h.disabled, h.disabled_after_ms, \
                 c.config, COALESCE(d.pending, 0), COALESCE(d.due, 0), \
                 COALESCE(d.delivered, 0), COALESCE(d.gone, 0), COALESCE(d.dead, 0) \
                 FROM page LEFT JOIN {health} h ON h.endpoint = page.endpoint \
                 LEFT JOIN {configs} c ON c.endpoint = page.endpoint \
                 LEFT JOIN counted d ON d.endpoint = page.endpoint \
                 ORDER BY page.endpoint"
            )),
        }
    }
}
