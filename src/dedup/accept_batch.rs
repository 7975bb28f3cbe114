//! Accepts in batches: the Postgres inbox's jobs for the group commit
//! (`crate::store::group_commit`; SQLite's accepts are writes on its one
//! writer, `SqliteInbox`). A batch claims and enqueues each of its
//! events in one transaction, in the order they came: a duplicate inside
//! the batch is answered duplicate, the first of its id accepted. When the
//! batch fails every caller in it is answered 5xx and no claim of it is
//! kept; a caller that gave up meanwhile has its event kept, and the
//! sender's retry is answered duplicate.

use super::{Acceptance, DedupError, IncomingEvent};
use crate::store::group_commit::GroupCommit;
use crate::store::held_connection::HeldConnection;

/// One accept, owned, waiting for its batch.
pub struct Job {
    pub(crate) namespace: String,
    pub(crate) id: String,
    pub(crate) body: Vec<u8>,
    pub(crate) signed_at: Option<i64>,
    pub(crate) meta: Option<String>,
}

/// What a SQL store's accept batches need: a connection of the writer's
/// own, its accept statements (see `Statements`) and its retention (one
/// for the whole batch).
#[derive(Debug)]
pub struct Batch<DB: sqlx::Database> {
    pub(crate) connection: HeldConnection<DB>,
    pub(crate) accept: sqlx::SqlStr,
    pub(crate) accept_many: Option<sqlx::SqlStr>,
    pub(crate) retention_ms: i64,
}

impl<DB: sqlx::Database> Clone for Batch<DB> {
    fn clone(&self) -> Self {
        Self {
            connection: self.connection.clone(),
            accept: self.accept.clone(),
            accept_many: self.accept_many.clone(),
            retention_ms: self.retention_ms,
        }
    }
}

/// Accepts `event` in the group commit's next batch.
pub(crate) async fn accept<C>(
    group: &GroupCommit<C>,
    event: &IncomingEvent<'_>,
) -> Result<Acceptance, DedupError>
where
    C: crate::store::group_commit::CommitBatch<Job = Job, Outcome = Acceptance>,
{
    let job = Job {
        namespace: event.namespace.to_owned(),
        id: event.id.to_owned(),
        body: event.body.to_vec(),
        signed_at: event.signed_at,
        meta: event.meta_text(),
    };
    Ok(group.submit(job).await?)
}
