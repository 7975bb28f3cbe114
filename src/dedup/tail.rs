//! [`Tail`]: following the events a store accepts into one namespace, as
//! `hooklatch tail` prints them.

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use std::collections::{HashSet, VecDeque};
use std::fmt;

/// How far back a SQL tail reads again for accepts that committed late:
/// an accept's time is taken when its statement starts, and it becomes
/// visible when its transaction (perhaps a batch of accepts) commits.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const LATE_COMMIT_MILLIS: i64 = 2_000;

/// Where a reader of one namespace's accepts has read up to: pass the same
/// `Tail` to each [`InboxQueue::tail`](super::InboxQueue::tail) call and
/// each accepted event comes back once, in about the order it was accepted.
/// A new `Tail` starts at its first call: it follows what is accepted from
/// then on.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), hooklatch::dedup::DedupError> {
/// use hooklatch::dedup::{EventStatus, Inbox, InboxQueue, IncomingEvent, MemoryInbox, Tail};
///
/// let store = MemoryInbox::new();
/// let mut tail = Tail::new("stripe");
/// assert!(store.tail(&mut tail, 100).await?.is_empty());
///
/// store.accept(&IncomingEvent::new("stripe", "evt_1", b"{}")).await?;
/// let seen = store.tail(&mut tail, 100).await?;
/// assert_eq!(seen[0].id, "evt_1");
/// assert_eq!(seen[0].status, EventStatus::Waiting);
/// // Read once: the next call has only what was accepted since.
/// assert!(store.tail(&mut tail, 100).await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Tail {
    pub(crate) namespace: String,
    pub(crate) position: Position,
}

/// A store's own record of what a [`Tail`] has read.
#[derive(Debug, Clone)]
pub(crate) enum Position {
    /// Not read yet: the first call records where the store is now.
    Start,
    /// The memory store: the last claim's number read.
    Counted(u64),
    /// SQL: claims are read from `after` on, less the late-commit window
    /// (but never from before `started`), and those already returned
    /// within it are skipped.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    Timed {
        started: i64,
        after: i64,
        returned: VecDeque<(i64, String)>,
        returned_ids: HashSet<String>,
    },
    /// Redis: each shard's log, read up to the entry named.
    #[cfg(feature = "redis")]
    Logged(Vec<String>),
}

impl Tail {
    /// A tail of `namespace` (exactly that one: a tenant's events are in
    /// its own namespace, [`tenant_namespace`](super::tenant_namespace)).
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            position: Position::Start,
        }
    }

    /// The namespace followed.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// An accepted event as [`InboxQueue::tail`](super::InboxQueue::tail)
/// returns it: with the state it was in when read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TailedEvent {
    /// The event's namespace.
    pub namespace: String,
    /// The event id.
    pub id: String,
    /// The event's type, as the provider said (`EventMeta::event_type`);
    /// `None` once the event is done, on stores that keep no copy of a
    /// handled event (SQLite and Postgres keep only its claim).
    pub event_type: Option<String>,
    /// When the store accepted it, in milliseconds since the Unix epoch on
    /// the store's clock; `None` from a store of your own that does not
    /// say.
    pub accepted_at_millis: Option<i64>,
    /// Its state when read.
    pub status: EventStatus,
}

impl TailedEvent {
    /// The tenant, for an event of a tenant's namespace
    /// ([`tenant_namespace`](super::tenant_namespace)).
    ///
    /// ```
    /// # use hooklatch::dedup::{EventStatus, TailedEvent};
    /// let event = TailedEvent::new("hooks~acme", "evt_1", EventStatus::Done);
    /// assert_eq!(event.tenant(), Some("acme"));
    /// ```
    pub fn tenant(&self) -> Option<&str> {
        self.namespace
            .split_once(crate::store::TENANT_SEPARATOR)
            .map(|(_, tenant)| tenant)
    }

    /// An event with no type or time, as a store of your own builds one.
    pub fn new(namespace: &str, id: &str, status: EventStatus) -> Self {
        Self {
            namespace: namespace.to_owned(),
            id: id.to_owned(),
            event_type: None,
            accepted_at_millis: None,
            status,
        }
    }
}

/// Where an accepted event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventStatus {
    /// In the inbox, never taken yet.
    Waiting,
    /// Taken and given back (or its worker vanished): waits for another
    /// attempt.
    Retrying,
    /// A worker holds it now (or, in lease mode, a handler holds its
    /// lease).
    Taken,
    /// Dead-lettered.
    Dead,
    /// Handled: acked (or, in lease mode, completed).
    Done,
}

impl EventStatus {
    /// The status in one lowercase word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Retrying => "retrying",
            Self::Taken => "taken",
            Self::Dead => "dead",
            Self::Done => "done",
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
