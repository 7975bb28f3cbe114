//! [`OutboxView`] for [`RedisDeliveries`]: counts from the state sets'
//! sizes, the latest attempts from the newest deliveries of each state.

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::{DeliveryCounts, OutboxView, RecentAttempt, newest};
use crate::dedup::DedupError;
use crate::sender::outbox::registry::EndpointRegistry as _;
use crate::sender::{DeliveryState, DeliveryStore as _, RedisDeliveries};
use crate::store::unix_millis;

const STATES: [DeliveryState; 4] = [
    DeliveryState::Pending,
    DeliveryState::Delivered,
    DeliveryState::Gone,
    DeliveryState::Dead,
];

impl OutboxView for RedisDeliveries {
    async fn endpoint_names(&self) -> Result<Vec<String>, DedupError> {
        let with_deliveries = self.endpoints_with_deliveries().await?;
        let disabled = self.disabled_endpoints().await?;
        let saved = self.saved_endpoints().await?;
        let names: BTreeSet<String> = with_deliveries
            .into_iter()
            .chain(disabled)
            .chain(saved.endpoints.into_keys())
            .collect();
        Ok(names.into_iter().collect())
    }

    async fn counts(&self, endpoint: &str, now: SystemTime) -> Result<DeliveryCounts, DedupError> {
        let mut connection = self.connection().await?;
        let mut pipe = redis::pipe();
        for state in STATES {
            pipe.zcard(self.state_key(endpoint, state));
        }
        // A leased delivery's score in the due set is its lease's end.
        pipe.zcount(self.key(endpoint, "due"), "-inf", unix_millis(now));
        let (pending, delivered, gone, dead, due): (u64, u64, u64, u64, u64) =
            pipe.query_async(&mut connection).await?;
        Ok(DeliveryCounts {
            pending,
            due,
            delivered,
            gone,
            dead,
        })
    }

    async fn recent_attempts(
        &self,
        endpoint: &str,
        limit: usize,
    ) -> Result<Vec<RecentAttempt>, DedupError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut connection = self.connection().await?;
        let last = isize::try_from(limit - 1).unwrap_or(isize::MAX);
        let mut pipe = redis::pipe();
        for state in STATES {
            pipe.zrevrange(self.state_key(endpoint, state), 0, last);
        }
        let newest_ids: Vec<Vec<String>> = pipe.query_async(&mut connection).await?;
        let mut attempts = Vec::new();
        for id in newest_ids.into_iter().flatten() {
            if let Some(delivery) = self.delivery(endpoint, &id).await? {
                attempts.extend(delivery.attempts.into_iter().map(|attempt| RecentAttempt {
                    id: id.clone(),
                    attempt,
                }));
            }
        }
        Ok(newest(attempts, limit))
    }
}
