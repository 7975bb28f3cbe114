//! [`OutboxView`]: what an operator reads of an outbox (its endpoints,
//! their deliveries by state, their latest attempts), for the console, the
//! CLI and metrics.

#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;

use std::future::Future;
use std::time::SystemTime;

use crate::sender::OutboxError;
use crate::sender::outbox::DeliveryStore;
use crate::sender::outbox::EndpointHealth;
use crate::sender::rules::Attempt;

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
/// [`OutboxView::endpoint_page`]
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
    /// ([`mask_url`](crate::sender::guard::mask_url)), as a list may show it;
    /// `None` when no readable configuration is saved.
    pub fn masked_url(&self) -> Option<String> {
        let config = crate::sender::EndpointConfig::from_json(self.saved.as_deref()?).ok()?;
        Some(crate::sender::guard::mask_url(config.url()))
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

/// What an operator reads of an outbox, for the console and the CLI. Every
/// outbox here implements it.
pub trait OutboxView: DeliveryStore {
    /// Every endpoint with a delivery, a saved health or a saved
    /// configuration, by name.
    fn endpoint_names(&self) -> impl Future<Output = Result<Vec<String>, OutboxError>> + Send;

    /// Up to `limit` of the endpoint's latest attempts, newest first.
    ///
    /// The SQL and memory stores look at every attempt; Redis at those of
    /// the `limit` most recently created deliveries in each state.
    fn recent_attempts(
        &self,
        endpoint: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RecentAttempt>, OutboxError>> + Send;

    /// Up to `limit` endpoints, in name order after `after` (from the
    /// first when `None`), each with its health, its counts (`due` as of
    /// `now`) and its saved configuration: one page of an operator's
    /// list, such as the console's.
    ///
    /// The SQL stores read a page in one statement and Redis in one
    /// pipeline per shard the page touches, however many endpoints it
    /// holds; the default, which the memory store keeps, reads every name,
    /// then each endpoint of the page on its own.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), hooklatch::sender::OutboxError> {
    /// use std::time::SystemTime;
    /// use hooklatch::sender::MemoryOutbox;
    /// use hooklatch::sender::outbox::OutboxView;
    ///
    /// let store = MemoryOutbox::new();
    /// let mut after: Option<String> = None;
    /// loop {
    ///     let page = store.endpoint_page(after.as_deref(), 100, SystemTime::now()).await?;
    ///     for endpoint in &page {
    ///         println!("{} dead={}", endpoint.name, endpoint.counts.dead);
    ///     }
    ///     match page.last() {
    ///         Some(last) if page.len() == 100 => after = Some(last.name.clone()),
    ///         _ => break,
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    fn endpoint_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now: SystemTime,
    ) -> impl Future<Output = Result<Vec<EndpointSummary>, OutboxError>> + Send {
        async move {
            let mut names = self.endpoint_names().await?;
            names.sort();
            names.dedup();
            let skipped = after.map_or(0, |after| {
                names.partition_point(|name| name.as_str() <= after)
            });
            let mut saved = self.saved_endpoints().await?.endpoints;
            let mut page = Vec::new();
            for name in names.into_iter().skip(skipped).take(limit) {
                page.push(EndpointSummary {
                    health: self.health(&name).await?,
                    counts: self.counts(&name, now).await?,
                    saved: saved.remove(&name),
                    name,
                });
            }
            Ok(page)
        }
    }
}

/// Newest first, then the `limit` first.
pub(crate) fn newest(mut attempts: Vec<RecentAttempt>, limit: usize) -> Vec<RecentAttempt> {
    attempts.sort_by(|a, b| {
        (b.attempt.sent_at, b.attempt.number).cmp(&(a.attempt.sent_at, a.attempt.number))
    });
    attempts.truncate(limit);
    attempts
}
