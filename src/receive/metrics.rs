//! The receiving side's metrics and span fields, in one place. With the
//! `metrics` feature they go to whatever recorder the application
//! installed (Prometheus, OpenTelemetry, StatsD); without it, nowhere.
//! Labels are bounded: never an event id.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `hooklatch_requests_total` | counter | `outcome`, `reason` (rejections), `scheme`, `namespace` |
//! | `hooklatch_verify_duration_seconds` | histogram | `scheme` |
//! | `hooklatch_store_duration_seconds` | histogram | `op` (`accept`, `claim`, `complete`) |
//! | `hooklatch_inbox_events` | gauge | `namespace`, `state` (`waiting`, `taken`, `dead`); set by [`report_inbox_depth`] |

use std::time::Duration;

use super::Rejection;

/// The span a framework adapter runs one request in: the core records the
/// scheme, namespace, event id, outcome and reason on it as they become
/// known, so an OpenTelemetry layer gets a trace per request.
pub fn request_span() -> tracing::Span {
    tracing::info_span!(
        "webhook",
        scheme = tracing::field::Empty,
        namespace = tracing::field::Empty,
        id = tracing::field::Empty,
        outcome = tracing::field::Empty,
        reason = tracing::field::Empty,
    )
}

/// What became of a request, the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Accepted,
    Duplicate,
    InProgress,
    Rejected,
    TooLarge,
    StoreError,
}

impl Outcome {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Duplicate => "duplicate",
            Self::InProgress => "in_progress",
            Self::Rejected => "rejected",
            Self::TooLarge => "too_large",
            Self::StoreError => "store_error",
        }
    }

    /// The outcome a rejection stands for.
    pub(crate) fn of(rejection: &Rejection) -> Self {
        match rejection.code() {
            "body_too_large" => Self::TooLarge,
            "store_unavailable" | "tenant_lookup_failed" | "handler_timed_out" => Self::StoreError,
            "in_progress" => Self::InProgress,
            _ => Self::Rejected,
        }
    }
}

/// Counts a request that ended in `outcome`, and records it on the current
/// span.
pub(crate) fn request(
    outcome: Outcome,
    reason: Option<&'static str>,
    scheme: &str,
    namespace: &str,
) {
    let span = tracing::Span::current();
    span.record("outcome", outcome.label());
    if !namespace.is_empty() {
        span.record("namespace", namespace);
    }
    if let Some(reason) = reason {
        span.record("reason", reason);
    }
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "hooklatch_requests_total",
        "outcome" => outcome.label(),
        "reason" => reason.unwrap_or(""),
        "scheme" => scheme.to_owned(),
        "namespace" => namespace.to_owned(),
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (scheme, namespace);
}

/// Counts a refused request.
pub(crate) fn rejected(rejection: &Rejection, scheme: &str, namespace: &str) {
    request(
        Outcome::of(rejection),
        Some(rejection.code()),
        scheme,
        namespace,
    );
}

/// How long verifying took.
pub(crate) fn verify_took(scheme: &str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("hooklatch_verify_duration_seconds", "scheme" => scheme.to_owned())
        .record(took.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (scheme, took);
}

/// How long a store call took.
pub(crate) fn store_took(op: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("hooklatch_store_duration_seconds", "op" => op).record(took.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (op, took);
}

/// Sets the `hooklatch_inbox_events` gauges (feature `metrics`) of each of
/// `namespaces` from the store's [`stats`](crate::dedup::InboxQueue::stats):
/// events waiting, taken by a worker, and dead-lettered. Call it on an
/// interval of your choice; each call is one `stats` per namespace.
///
/// ```
/// use hooklatch::dedup::{Inbox, IncomingEvent, MemoryInbox};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), hooklatch::dedup::DedupError> {
/// let store = MemoryInbox::new();
/// store.accept(&IncomingEvent::new("stripe", "evt_1", b"{}")).await?;
/// // Every 15 s, say, in a task of its own:
/// hooklatch::receive::report_inbox_depth(&store, &["stripe"]).await?;
/// # Ok(())
/// # }
/// ```
pub async fn report_inbox_depth<S: crate::dedup::InboxQueue, N: AsRef<str>>(
    store: &S,
    namespaces: &[N],
) -> Result<(), crate::dedup::DedupError> {
    for namespace in namespaces {
        let namespace = namespace.as_ref();
        let stats = store.stats(namespace).await?;
        #[cfg(feature = "metrics")]
        crate::gauges::set_depths(
            "hooklatch_inbox_events",
            ("namespace", namespace),
            [
                ("waiting", stats.waiting),
                ("taken", stats.taken),
                ("dead", stats.dead),
            ],
        );
        #[cfg(not(feature = "metrics"))]
        let _ = stats;
    }
    Ok(())
}
