//! Taking due deliveries across many endpoints in one store call:
//! [`Wanted`] and [`DueAcross`], and the SQL both SQL stores run for it.
//!
//! The SQL ranks each endpoint's due deliveries by due time
//! (`row_number() OVER (PARTITION BY endpoint ...)`) and leases them in
//! rank order, so every endpoint's first due delivery comes before any
//! endpoint's second: one busy endpoint cannot starve the rest.

use std::collections::HashMap;
use std::time::SystemTime;

use super::{EndpointHealth, Taken};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use {
    super::codes::{TakenRow, due, health_from_fields},
    crate::sender::OutboxError,
    crate::store::sql::{SqlDatabase, sql_built},
    crate::store::{millis, new_token, unix_millis},
};

/// One endpoint in a [take across endpoints](super::DeliveryStore::take_due_across):
/// its name, how many of its due deliveries may be leased (its free
/// concurrency) and the time now on the dispatcher's clock (the store's,
/// unless the endpoint's policy has a clock of its own).
///
/// ```
/// use std::time::SystemTime;
/// use hooklatch::sender::outbox::Wanted;
///
/// let wanted = Wanted::new("orders", 4, SystemTime::now());
/// assert_eq!(wanted.limit, 4);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Wanted {
    /// The endpoint's name.
    pub endpoint: String,
    /// At most this many of its deliveries; with 0 the take only reports
    /// whether it is disabled.
    pub limit: usize,
    /// Deliveries due at or before this time are due.
    pub now: SystemTime,
}

impl Wanted {
    /// Up to `limit` deliveries of `endpoint` due at `now`.
    pub fn new(endpoint: &str, limit: usize, now: SystemTime) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            limit,
            now,
        }
    }
}

/// What [`DeliveryStore::take_due_across`](super::DeliveryStore::take_due_across)
/// found.
///
/// ```
/// use hooklatch::sender::outbox::DueAcross;
///
/// let found = DueAcross::default();
/// assert!(found.taken.is_empty() && found.health.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DueAcross {
    /// The leased deliveries, round-robin over endpoints: every endpoint's
    /// earliest due delivery before any endpoint's second.
    pub taken: Vec<Taken>,
    /// The saved health of each wanted endpoint that is disabled or had
    /// deliveries leased (a store may report more). A wanted endpoint
    /// missing here (and from `unanswered`) is enabled.
    pub health: HashMap<String, EndpointHealth>,
    /// The wanted endpoints whose part of the take failed (a SQL
    /// statement of a take across more endpoints than one names, a Redis
    /// shard's script, one `take_due`): nothing of theirs was leased and
    /// their health is unknown. A take returns what its other parts leased
    /// rather than fail, so those deliveries do not wait out a lease no
    /// one holds; it fails only when it leased nothing.
    pub unanswered: Vec<String>,
}

impl DueAcross {
    /// Ends a take some of whose parts failed with `error`: what the other
    /// parts leased, with the failed parts' endpoints `unanswered`, or the
    /// error if nothing was leased.
    pub(crate) fn or_failed(
        mut self,
        error: Option<crate::sender::OutboxError>,
        unanswered: Vec<String>,
    ) -> Result<Self, crate::sender::OutboxError> {
        match error {
            Some(error) if self.taken.is_empty() => Err(error),
            Some(error) => {
                tracing::warn!(
                    %error,
                    endpoints = unanswered.len(),
                    leased = self.taken.len(),
                    "part of a take across endpoints failed: returning what the rest leased"
                );
                self.unanswered = unanswered;
                Ok(self)
            }
            None => Ok(self),
        }
    }
}

/// Orders `taken` round-robin over endpoints: by each delivery's rank
/// within its endpoint (earliest due first), then by due time.
pub(crate) fn round_robin(mut taken: Vec<Taken>) -> Vec<Taken> {
    taken.sort_by_key(|delivery| (delivery.endpoint.clone(), delivery.due_at));
    let mut rank = 0;
    let mut ranked: Vec<(usize, Taken)> = Vec::with_capacity(taken.len());
    for delivery in taken {
        rank = match ranked.last() {
            Some((_, last)) if last.endpoint == delivery.endpoint => rank + 1,
            _ => 0,
        };
        ranked.push((rank, delivery));
    }
    ranked.sort_by_key(|(rank, delivery)| (*rank, delivery.due_at));
    ranked.into_iter().map(|(_, delivery)| delivery).collect()
}

/// The statement that leases due deliveries across `count` endpoints:
/// $1 token, $2 lease (ms), $3 limit in all, then for each endpoint its
/// name, limit and now (ms). Each endpoint's due rows are ranked by due
/// time and leased in rank order, disabled endpoints skipped. A lease
/// waits for the flush to disk whatever the session's `synchronous_commit`
/// (see `Dialect::flushed`): one lost in a crash would let a second
/// dispatcher send the delivery while the first still sends it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn take_across_sql(
    prefix: &str,
    dialect: &crate::store::sql::Dialect,
    count: usize,
) -> sqlx::AssertSqlSafe<String> {
    let (deliveries, _, endpoints) = super::sql::tables(prefix);
    let values: Vec<String> = (0..count)
        .map(|i| format!("(${}, ${}, ${})", 3 * i + 4, 3 * i + 5, 3 * i + 6))
        .collect();
    let parts = AcrossParts {
        deliveries: &deliveries,
        endpoints: &endpoints,
        values: &values.join(", "),
        due: "d.state = 0 AND d.due_at <= w.now \
              AND (d.lease_until IS NULL OR d.lease_until <= w.now)",
        enabled: &format!(
            "NOT EXISTS (SELECT 1 FROM {endpoints} e \
             WHERE e.endpoint = w.endpoint AND e.disabled IS NOT NULL)"
        ),
        returning: &format!(
            "RETURNING {deliveries}.endpoint, event_id, body, tries, attempts, due_at, \
             waited_ms, reason, created_at, trace, (SELECT failing_since FROM {endpoints} e \
             WHERE e.endpoint = {deliveries}.endpoint) AS failing_since"
        ),
    };
    sqlx::AssertSqlSafe(if dialect.lateral {
        take_across_lateral(&parts, dialect)
    } else {
        take_across_ranked(&parts, dialect)
    })
}

/// The pieces both forms of the take across endpoints share.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
struct AcrossParts<'a> {
    deliveries: &'a str,
    endpoints: &'a str,
    values: &'a str,
    /// A row `d` of endpoint `w` is due and not leased.
    due: &'a str,
    /// Endpoint `w` is not disabled.
    enabled: &'a str,
    returning: &'a str,
}

/// The take where the database has `LATERAL`: each endpoint reads only
/// its first due rows from the index, up to its limit, and locks them,
/// skipping rows another client holds; the rows are then updated by their
/// physical id. The same statement reads the disabled endpoints' health,
/// so a take is one round trip: each row starts with its kind, 0 for a
/// leased delivery (the endpoint, a take's row, the endpoint's failing
/// time), 1 for a disabled endpoint (its name, then its health in the last
/// three columns).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn take_across_lateral(parts: &AcrossParts<'_>, dialect: &crate::store::sql::Dialect) -> String {
    let AcrossParts {
        deliveries,
        endpoints,
        values,
        due,
        enabled,
        ..
    } = parts;
    let (row_id, lock, flushed) = (dialect.row_id, dialect.lock_rows, dialect.flushed);
    format!(
        "WITH w (endpoint, cap, now) AS (VALUES {values}), \
         leased AS (UPDATE {deliveries} SET lease_token = $1, lease_until = r.now + $2 \
         FROM (SELECT p.rid, w.now, \
         row_number() OVER (PARTITION BY w.endpoint ORDER BY p.due_at) AS rnk \
         FROM w CROSS JOIN LATERAL (SELECT d.{row_id} AS rid, d.due_at FROM {deliveries} d \
         WHERE d.endpoint = w.endpoint AND {due} ORDER BY d.due_at LIMIT w.cap{lock}) p \
         WHERE {enabled} ORDER BY rnk, p.due_at LIMIT $3) r \
         WHERE {deliveries}.{row_id} = r.rid AND {flushed} \
         RETURNING {deliveries}.endpoint, event_id, body, tries, attempts, due_at, waited_ms, \
         reason, created_at, trace) \
         SELECT 0::BIGINT AS kind, l.*, e.failing_since, NULL::BIGINT, NULL::BIGINT \
         FROM leased l LEFT JOIN {endpoints} e USING (endpoint) \
         UNION ALL SELECT 1, e.endpoint, NULL::TEXT, NULL::BYTEA, NULL::BIGINT, NULL::BIGINT, \
         NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::TEXT, e.failing_since, \
         e.disabled, \
         e.disabled_after_ms FROM {endpoints} e JOIN w USING (endpoint) \
         WHERE e.disabled IS NOT NULL"
    )
}

/// The take elsewhere: a window function ranks every due row. Window
/// functions cannot lock rows, so the update checks again that each row is
/// still due and unleased: of two dispatchers that picked one row, one
/// leases it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn take_across_ranked(parts: &AcrossParts<'_>, dialect: &crate::store::sql::Dialect) -> String {
    let AcrossParts {
        deliveries,
        values,
        due,
        enabled,
        returning,
        ..
    } = parts;
    let (row_id, (open, close)) = (dialect.row_id, dialect.row_ids_in);
    format!(
        "WITH w (endpoint, cap, now) AS (VALUES {values}) \
         UPDATE {deliveries} SET lease_token = $1, lease_until = w.now + $2 FROM w \
         WHERE {deliveries}.endpoint = w.endpoint AND {deliveries}.{row_id} {open}\
         SELECT rid FROM (SELECT d.{row_id} AS rid, d.due_at, w.cap, \
         row_number() OVER (PARTITION BY d.endpoint ORDER BY d.due_at, d.event_id) AS rnk \
         FROM {deliveries} d JOIN w ON d.endpoint = w.endpoint WHERE {due} AND {enabled}) r \
         WHERE rnk <= cap ORDER BY rnk, due_at LIMIT $3{close} \
         AND {deliveries}.state = 0 \
         AND ({deliveries}.lease_until IS NULL OR {deliveries}.lease_until <= w.now) \
         AND {flushed} {returning}",
        flushed = dialect.flushed,
    )
}

/// The statement that reads the health of those of `count` endpoints
/// ($1 to $count) that are disabled.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn disabled_sql(prefix: &str, count: usize) -> sqlx::AssertSqlSafe<String> {
    let (_, _, endpoints) = super::sql::tables(prefix);
    let names: Vec<String> = (1..=count).map(|i| format!("${i}")).collect();
    sqlx::AssertSqlSafe(format!(
        "SELECT endpoint, failing_since, disabled, disabled_after_ms FROM {endpoints} \
         WHERE disabled IS NOT NULL AND endpoint IN ({})",
        names.join(", ")
    ))
}

/// How many endpoints one statement of a SQL take across endpoints names
/// at most: three parameters each stay under SQLite's 32,766 and
/// Postgres's 65,535. More endpoints take one statement per chunk.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const ACROSS_CHUNK: usize = 5_000;

/// A disabled endpoint's row: its name and its saved health's fields.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
type DisabledRow = (String, Option<i64>, Option<i64>, Option<i64>);

/// `take_due_across` for a SQL store on `pool` with the tables of
/// `prefix`: one statement leases, one reads the disabled endpoints'
/// health.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) async fn take_due_across<DB: SqlDatabase>(
    pool: &sqlx::Pool<DB>,
    prefix: &str,
    wanted: &[Wanted],
    limit: usize,
    lease: std::time::Duration,
) -> Result<DueAcross, OutboxError> {
    let dialect = DB::DIALECT;
    let mut found = DueAcross::default();
    if wanted.is_empty() {
        return Ok(found);
    }
    let token = new_token();
    let chunk = ACROSS_CHUNK;
    // Each row of `take_across_sql`: the endpoint, a take's row
    // (`TakenRow`), then the endpoint's failing time.
    let mut by_endpoint: std::collections::HashMap<String, Vec<TakenRow>> =
        std::collections::HashMap::new();
    let mut leased = 0;
    // A statement that fails leaves its endpoints unanswered; what
    // the others leased is returned all the same.
    let (mut error, mut unanswered) = (None, Vec::new());
    for wanted in wanted.chunks(chunk) {
        let left = limit.saturating_sub(leased);
        // With `LATERAL` the take also reads which endpoints are
        // disabled: every chunk runs, leasing nothing once the
        // limit is reached.
        if left == 0 && !dialect.lateral {
            break;
        }
        let sql = take_across_sql(prefix, &dialect, wanted.len());
        let mut query = sql_built::<DB>(sql)
            .bind(&token)
            .bind(millis(lease))
            .bind(i64::try_from(left).unwrap_or(i64::MAX));
        for want in wanted {
            query = query
                .bind(&want.endpoint)
                .bind(i64::try_from(want.limit).unwrap_or(i64::MAX))
                .bind(unix_millis(want.now));
        }
        let rows = match query.fetch_rows(pool).await {
            Ok(rows) => rows,
            Err(failed) => {
                error.get_or_insert(OutboxError::from(failed));
                unanswered.extend(wanted.iter().map(|want| want.endpoint.clone()));
                continue;
            }
        };
        for row in rows {
            // With `LATERAL`, each row starts with its kind, and a
            // disabled endpoint's health comes in the same answer.
            let at = usize::from(dialect.lateral);
            if dialect.lateral && DB::get::<i64>(&row, 0)? == 1 {
                let endpoint: String = DB::get(&row, 1)?;
                let fields = (DB::get(&row, 11)?, DB::get(&row, 12)?, DB::get(&row, 13)?);
                found.health.insert(endpoint, health_from_fields(fields));
                continue;
            }
            let endpoint: String = DB::get(&row, at)?;
            let failing: Option<i64> = DB::get(&row, at + 10)?;
            let health = health_from_fields((failing, None, None));
            found.health.entry(endpoint.clone()).or_insert(health);
            let taken: TakenRow = (
                DB::get(&row, at + 1)?,
                DB::get(&row, at + 2)?,
                DB::get(&row, at + 3)?,
                DB::get(&row, at + 4)?,
                DB::get(&row, at + 5)?,
                DB::get(&row, at + 6)?,
                DB::get(&row, at + 7)?,
                DB::get(&row, at + 8)?,
                DB::get(&row, at + 9)?,
            );
            by_endpoint.entry(endpoint).or_default().push(taken);
            leased += 1;
        }
    }
    let taken = by_endpoint
        .into_iter()
        .flat_map(|(endpoint, rows)| due(&endpoint, &token, EndpointHealth::default(), rows).taken);
    found.taken = round_robin(taken.collect());
    // Without `LATERAL`, the disabled endpoints' health is a
    // statement of its own.
    if !dialect.lateral {
        for wanted in wanted.chunks(chunk) {
            let mut query = sql_built::<DB>(disabled_sql(prefix, wanted.len()));
            for want in wanted {
                query = query.bind(&want.endpoint);
            }
            let disabled: Vec<DisabledRow> = match query.fetch_all(pool).await {
                Ok(disabled) => disabled,
                Err(failed) => {
                    // Those that leased were enabled; the
                    // rest's health is unknown.
                    error.get_or_insert(OutboxError::from(failed));
                    let unknown = wanted
                        .iter()
                        .filter(|want| !found.health.contains_key(&want.endpoint));
                    unanswered.extend(unknown.map(|want| want.endpoint.clone()));
                    continue;
                }
            };
            for (endpoint, failing, code, after) in disabled {
                found
                    .health
                    .insert(endpoint, health_from_fields((failing, code, after)));
            }
        }
    }
    unanswered.sort_unstable();
    unanswered.dedup();
    found.or_failed(error, unanswered)
}
