//! [`Keeping`] for [`MemoryOutbox`]: the keys in a map next to the
//! deliveries, changed under the same lock.

use std::time::SystemTime;

use super::{Keeping, Keyed, Retention, SendKey};
use crate::sender::MemoryOutbox;
use crate::sender::OutboxError;
use crate::sender::outbox::DeliveryState;
use crate::sender::outbox::NewDelivery;
use crate::sender::outbox::memory::Entry;

impl Keeping for MemoryOutbox {
    async fn add_keyed_delivery(
        &self,
        key: SendKey<'_>,
        new: NewDelivery<'_>,
    ) -> Result<Keyed, OutboxError> {
        let SendKey { key, now, window } = key;
        let (endpoint, id) = (new.endpoint(), new.id());
        Ok(self.with(|deliveries| {
            let name = (endpoint.to_owned(), key.to_owned());
            if let Some((first, _)) = deliveries
                .send_keys
                .get(&name)
                .filter(|(_, expires)| *expires > now)
            {
                return Keyed {
                    id: first.clone(),
                    enqueued: false,
                };
            }
            let expires = crate::sender::rules::later(now, window);
            deliveries.send_keys.insert(name, (id.to_owned(), expires));
            Keyed {
                id: id.to_owned(),
                enqueued: deliveries.add(&new),
            }
        }))
    }

    async fn forget_keys(&self, endpoint: &str, now: SystemTime) -> Result<u64, OutboxError> {
        Ok(self.with(|deliveries| {
            let before = deliveries.send_keys.len();
            deliveries
                .send_keys
                .retain(|(of, _), (_, expires)| of != endpoint || *expires > now);
            (before - deliveries.send_keys.len()) as u64
        }))
    }

    async fn purge_outcomes(
        &self,
        endpoint: &str,
        retention: &Retention,
        now: SystemTime,
    ) -> Result<u64, OutboxError> {
        let expired = |entry: &Entry| {
            let state = entry.stored.state;
            let Some(cutoff) = retention.cutoff(state, now) else {
                return false;
            };
            if state == DeliveryState::Pending {
                let leased = entry.lease.as_ref().is_some_and(|(_, until)| *until > now);
                !leased && entry.enqueued_at < cutoff
            } else {
                entry.finished_at.is_some_and(|at| at < cutoff)
            }
        };
        Ok(self.with(|deliveries| {
            let before = deliveries.by_key.len();
            deliveries
                .by_key
                .retain(|(of, _), entry| of != endpoint || !expired(entry));
            (before - deliveries.by_key.len()) as u64
        }))
    }

    async fn purge(&self, finished_before: SystemTime) -> Result<u64, OutboxError> {
        Ok(self.with(|deliveries| {
            let before = deliveries.by_key.len();
            deliveries.by_key.retain(|_, entry| {
                let finished = matches!(
                    entry.stored.state,
                    DeliveryState::Delivered | DeliveryState::Gone
                );
                !(finished && entry.finished_at.is_some_and(|at| at < finished_before))
            });
            (before - deliveries.by_key.len()) as u64
        }))
    }
}
