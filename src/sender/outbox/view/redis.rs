//! [`OutboxView`] for [`RedisOutbox`]: counts from the state sets'
//! sizes, the latest attempts from the newest deliveries of each state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use super::{DeliveryCounts, EndpointSummary, OutboxView, RecentAttempt, newest};
use crate::sender::OutboxError;
use crate::sender::RedisOutbox;
use crate::sender::outbox::DeliveryStore as _;
use crate::sender::outbox::codes::{HealthFields, health_from_fields};
use crate::sender::outbox::redis::STATES;
use crate::store::unix_millis;

/// The health hash's fields, in the order [`HealthFields`] holds them.
const HEALTH_FIELDS: [&str; 3] = ["failing_since", "disabled", "disabled_after_ms"];

impl RedisOutbox {
    /// Every endpoint's name, in order.
    async fn all_names(&self) -> Result<BTreeSet<String>, OutboxError> {
        let used_or_disabled = self.endpoints_used_or_disabled().await?;
        let saved = self.saved_names().await?;
        Ok(used_or_disabled.into_iter().chain(saved).collect())
    }

    /// [`OutboxView::endpoint_page`](crate::sender::outbox::OutboxView::endpoint_page):
    /// the names as [`endpoint_names`](OutboxView::endpoint_names) reads
    /// them, then one pipeline per shard the page touches (its endpoints'
    /// keys share the shard's slot) for their counts and health, and one
    /// read of the page's saved configurations.
    pub(crate) async fn read_endpoint_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now: SystemTime,
    ) -> Result<Vec<EndpointSummary>, OutboxError> {
        let names = self.all_names().await?;
        let page: Vec<String> = names
            .into_iter()
            .filter(|name| after.is_none_or(|after| name.as_str() > after))
            .take(limit)
            .collect();
        let mut by_shard: BTreeMap<u16, Vec<&String>> = BTreeMap::new();
        for name in &page {
            by_shard.entry(Self::shard(name)).or_default().push(name);
        }
        let mut connection = self.connection().await?;
        let mut read = HashMap::new();
        for names in by_shard.into_values() {
            let mut pipe = redis::pipe();
            for name in &names {
                for state in STATES {
                    pipe.zcard(self.state_key(name, state));
                }
                pipe.zcount(self.key(name, "due"), "-inf", unix_millis(now));
                pipe.cmd("HMGET")
                    .arg(self.health_key(name))
                    .arg(&HEALTH_FIELDS[..]);
            }
            let replies: Vec<(u64, u64, u64, u64, u64, HealthFields)> = {
                let flat: Vec<redis::Value> = pipe.query_async(&mut connection).await?;
                flat.chunks(6)
                    .map(|reply| {
                        let number = |value: &redis::Value| redis::from_redis_value_ref(value);
                        Ok((
                            number(&reply[0])?,
                            number(&reply[1])?,
                            number(&reply[2])?,
                            number(&reply[3])?,
                            number(&reply[4])?,
                            redis::from_redis_value_ref(&reply[5])?,
                        ))
                    })
                    .collect::<Result<_, redis::ParsingError>>()
                    .map_err(redis::RedisError::from)?
            };
            for (name, (pending, delivered, gone, dead, due, health)) in
                names.into_iter().zip(replies)
            {
                let counts = DeliveryCounts {
                    pending,
                    due,
                    delivered,
                    gone,
                    dead,
                };
                read.insert(name.clone(), (counts, health_from_fields(health)));
            }
        }
        let names: Vec<&str> = page.iter().map(String::as_str).collect();
        let saved = self.saved_configs(&names).await?;
        Ok(page
            .into_iter()
            .zip(saved)
            .map(|(name, saved)| {
                let (counts, health) = read.remove(&name).unwrap_or_default();
                EndpointSummary {
                    saved,
                    counts,
                    health,
                    name,
                }
            })
            .collect())
    }
}

impl OutboxView for RedisOutbox {
    async fn endpoint_names(&self) -> Result<Vec<String>, OutboxError> {
        Ok(self.all_names().await?.into_iter().collect())
    }

    async fn recent_attempts(
        &self,
        endpoint: &str,
        limit: usize,
    ) -> Result<Vec<RecentAttempt>, OutboxError> {
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

    async fn endpoint_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now: SystemTime,
    ) -> Result<Vec<crate::sender::outbox::EndpointSummary>, OutboxError> {
        self.read_endpoint_page(after, limit, now).await
    }
}
