//! [`OutboxView`]: what an operator reads of an outbox (its endpoints,
//! their deliveries by state, their latest attempts), for the console, the
//! CLI and metrics.

#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;

use std::future::Future;
use std::time::SystemTime;

use crate::dedup::DedupError;
use crate::sender::{Attempt, EndpointHealth};

/// How many of an endpoint's deliveries are in each state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeliveryCounts {
    /// Waiting for an attempt, or in one.
    pub pending: u64,
    /// Pending, due, and not leased by a dispatcher: the backlog.
    pub due: u64,
    /// Delivered (until purged).
    pub delivered: u64,
    /// Answered 410 Gone (until purged).
    pub gone: u64,
    /// Out of attempts; they can be replayed.
    pub dead: u64,
}

/// One endpoint as an operator's list shows it: its health, its
/// deliveries' counts and its saved configuration. A page of them is what
/// [`DeliveryStore::endpoint_page`](super::DeliveryStore::endpoint_page)
/// reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSummary {
    /// The endpoint's name.
    pub name: String,
    /// Its health as saved; the default if never saved.
    pub health: EndpointHealth,
    /// How many of its deliveries are in each state.
    pub counts: DeliveryCounts,
    /// Its saved configuration's JSON
    /// ([`EndpointConfig::from_json`](crate::sender::EndpointConfig::from_json)
    /// reads it), if it is saved in the store's
    /// [`EndpointRegistry`](super::EndpointRegistry).
    pub saved: Option<String>,
}

impl EndpointSummary {
    /// The saved configuration's URL with its credentials masked
    /// ([`mask_url`](crate::sender::mask_url)), as a list may show it;
    /// `None` when no readable configuration is saved.
    pub fn masked_url(&self) -> Option<String> {
        let config = crate::sender::EndpointConfig::from_json(self.saved.as_deref()?).ok()?;
        Some(crate::sender::mask_url(config.url()))
    }
}

/// One recorded attempt and the delivery it was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentAttempt {
    /// The webhook id.
    pub id: String,
    /// The attempt.
    pub attempt: Attempt,
}

/// What an operator reads of an outbox. Every
/// [`DeliveryStore`](super::DeliveryStore) is one.
pub trait OutboxView: Send + Sync + 'static {
    /// Every endpoint with a delivery, a saved health or a saved
    /// configuration, by name.
    fn endpoint_names(&self) -> impl Future<Output = Result<Vec<String>, DedupError>> + Send;

    /// How many of the endpoint's deliveries are in each state, `due` as
    /// of `now`.
    fn counts(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<DeliveryCounts, DedupError>> + Send;

    /// Up to `limit` of the endpoint's latest attempts, newest first.
    ///
    /// The SQL and memory stores look at every attempt; Redis at those of
    /// the `limit` most recently created deliveries in each state.
    fn recent_attempts(
        &self,
        endpoint: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RecentAttempt>, DedupError>> + Send;
}

/// Newest first, then the `limit` first.
pub(crate) fn newest(mut attempts: Vec<RecentAttempt>, limit: usize) -> Vec<RecentAttempt> {
    attempts.sort_by(|a, b| {
        (b.attempt.sent_at, b.attempt.number).cmp(&(a.attempt.sent_at, a.attempt.number))
    });
    attempts.truncate(limit);
    attempts
}
