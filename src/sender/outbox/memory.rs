//! [`MemoryOutbox`]: deliveries in a map, for tests and one-off runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use super::registry::MemoryRegistry;
use super::{
    DeliveryState, DeliveryStore, DisableReason, Due, DueAcross, EndpointHealth, HealthChange,
    Step, StoredDelivery, Taken, Wanted,
};
use crate::sender::OutboxError;
use crate::sender::outbox::NewDelivery;
use crate::sender::rules::{Attempt, WaitReason};
use crate::store::new_token;

/// Deliveries in memory: lost when the process ends. Clones share the map.
#[derive(Debug, Clone, Default)]
pub struct MemoryOutbox {
    deliveries: Arc<Mutex<Deliveries>>,
    registry: Arc<MemoryRegistry>,
}

#[derive(Debug, Default)]
pub(super) struct Deliveries {
    pub(super) by_key: HashMap<(String, String), Entry>,
    health: HashMap<String, EndpointHealth>,
    next_order: u64,
    /// Idempotency keys by endpoint and key: the id and when it expires.
    pub(super) send_keys: HashMap<(String, String), (String, SystemTime)>,
}

#[derive(Debug)]
pub(super) struct Entry {
    order: u64,
    pub(super) enqueued_at: SystemTime,
    pub(super) stored: StoredDelivery,
    tries: u32,
    waited: Duration,
    reason: WaitReason,
    pub(super) lease: Option<(String, SystemTime)>,
    pub(super) finished_at: Option<SystemTime>,
    trace: Option<crate::trace::TraceParent>,
}

impl MemoryOutbox {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    pub(super) fn with<R>(&self, change: impl FnOnce(&mut Deliveries) -> R) -> R {
        change(
            &mut self
                .deliveries
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

impl Entry {
    /// Leases the entry until `lease` after `now`.
    fn lease(&mut self, now: SystemTime, lease: Duration) -> Taken {
        let token = new_token();
        self.lease = Some((token.clone(), crate::sender::rules::later(now, lease)));
        Taken {
            endpoint: self.stored.endpoint.clone(),
            id: self.stored.id.clone(),
            body: self.stored.body.clone(),
            tries: self.tries,
            attempts: u32::try_from(self.stored.attempts.len()).unwrap_or(u32::MAX),
            due_at: self.stored.due_at.unwrap_or(now),
            enqueued_at: self.enqueued_at,
            waited: self.waited,
            reason: self.reason,
            token,
            trace: self.trace,
        }
    }
}

fn key(endpoint: &str, id: &str) -> (String, String) {
    (endpoint.to_owned(), id.to_owned())
}

impl Deliveries {
    /// Adds a pending delivery unless the endpoint has one with this id.
    pub(super) fn add(&mut self, new: &NewDelivery<'_>) -> bool {
        let (endpoint, id) = (new.endpoint(), new.id());
        if self.by_key.contains_key(&key(endpoint, id)) {
            return false;
        }
        self.next_order += 1;
        let entry = Entry {
            order: self.next_order,
            enqueued_at: SystemTime::now(),
            stored: StoredDelivery {
                endpoint: endpoint.to_owned(),
                id: id.to_owned(),
                body: new.body().to_vec(),
                state: DeliveryState::Pending,
                due_at: Some(new.due()),
                attempts: Vec::new(),
            },
            tries: 0,
            waited: Duration::ZERO,
            reason: WaitReason::Schedule,
            lease: None,
            finished_at: None,
            trace: new.trace(),
        };
        self.by_key.insert(key(endpoint, id), entry);
        true
    }

    /// The endpoint's saved health.
    fn health(&self, endpoint: &str) -> EndpointHealth {
        self.health.get(endpoint).copied().unwrap_or_default()
    }

    /// The entry `taken` leases, if the lease still holds.
    fn leased(&mut self, taken: &Taken) -> Option<&mut Entry> {
        self.by_key
            .get_mut(&key(&taken.endpoint, &taken.id))
            .filter(|entry| {
                entry
                    .lease
                    .as_ref()
                    .is_some_and(|(token, _)| *token == taken.token)
            })
    }
}

impl super::EndpointRegistry for MemoryOutbox {
    async fn save_endpoint(&self, name: &str, config: &str) -> Result<u64, OutboxError> {
        super::validate_endpoint_name(name)?;
        Ok(self.registry.save(name, config))
    }

    async fn remove_endpoint(&self, name: &str) -> Result<bool, OutboxError> {
        Ok(self.registry.remove(name))
    }

    async fn endpoints_version(&self) -> Result<u64, OutboxError> {
        Ok(self.registry.version())
    }

    async fn saved_endpoints(&self) -> Result<super::SavedEndpoints, OutboxError> {
        Ok(self.registry.all())
    }
}

impl super::OutboxView for MemoryOutbox {
    async fn endpoint_names(&self) -> Result<Vec<String>, OutboxError> {
        let mut names: std::collections::BTreeSet<String> =
            self.registry.all().endpoints.into_keys().collect();
        self.with(|deliveries| {
            names.extend(
                deliveries
                    .by_key
                    .keys()
                    .map(|(endpoint, _)| endpoint.clone()),
            );
            names.extend(deliveries.health.keys().cloned());
        });
        Ok(names.into_iter().collect())
    }

    async fn recent_attempts(
        &self,
        endpoint: &str,
        limit: usize,
    ) -> Result<Vec<super::RecentAttempt>, OutboxError> {
        let all = self.with(|deliveries| {
            deliveries
                .by_key
                .values()
                .filter(|entry| entry.stored.endpoint == endpoint)
                .flat_map(|entry| {
                    entry
                        .stored
                        .attempts
                        .iter()
                        .map(|attempt| super::RecentAttempt {
                            id: entry.stored.id.clone(),
                            attempt: attempt.clone(),
                        })
                })
                .collect()
        });
        Ok(super::view::newest(all, limit))
    }
}

impl DeliveryStore for MemoryOutbox {
    async fn add_delivery(&self, new: NewDelivery<'_>) -> Result<bool, OutboxError> {
        Ok(self.with(|deliveries| deliveries.add(&new)))
    }

    async fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Result<Due, OutboxError> {
        Ok(self.with(|deliveries| {
            let health = deliveries.health(endpoint);
            if health.disabled.is_some() {
                return Due {
                    health,
                    taken: Vec::new(),
                };
            }
            let mut due: Vec<&mut Entry> = deliveries
                .by_key
                .values_mut()
                .filter(|entry| {
                    entry.stored.endpoint == endpoint
                        && entry.stored.state == DeliveryState::Pending
                        && entry.stored.due_at.is_some_and(|at| at <= now)
                        && entry.lease.as_ref().is_none_or(|(_, until)| *until <= now)
                })
                .collect();
            due.sort_by_key(|entry| (entry.stored.due_at, entry.order));
            let taken = due
                .into_iter()
                .take(limit)
                .map(|entry| entry.lease(now, lease))
                .collect();
            Due { health, taken }
        }))
    }

    async fn take_due_across(
        &self,
        wanted: &[Wanted],
        limit: usize,
        lease: Duration,
    ) -> Result<DueAcross, OutboxError> {
        Ok(self.with(|deliveries| {
            let mut found = DueAcross::default();
            let mut enabled = HashMap::new();
            for want in wanted {
                let health = deliveries.health(&want.endpoint);
                found.health.insert(want.endpoint.clone(), health);
                if health.disabled.is_none() {
                    enabled.insert(want.endpoint.as_str(), want);
                }
            }
            // Each endpoint's due entries, earliest first, up to its limit.
            let mut due: HashMap<&str, Vec<_>> = HashMap::new();
            for (key, entry) in &deliveries.by_key {
                let Some(want) = enabled.get(entry.stored.endpoint.as_str()) else {
                    continue;
                };
                if entry.stored.state == DeliveryState::Pending
                    && entry.stored.due_at.is_some_and(|at| at <= want.now)
                    && entry
                        .lease
                        .as_ref()
                        .is_none_or(|(_, until)| *until <= want.now)
                {
                    let at = (entry.stored.due_at, entry.order);
                    due.entry(want.endpoint.as_str())
                        .or_default()
                        .push((at, key.clone()));
                }
            }
            let mut ranked = Vec::new();
            for (endpoint, mut entries) in due {
                entries.sort();
                let cap = enabled.get(endpoint).map_or(0, |want| want.limit);
                ranked.extend(entries.into_iter().take(cap).enumerate());
            }
            ranked.sort();
            for (_, (_, key)) in ranked.into_iter().take(limit) {
                let now = enabled.get(key.0.as_str()).map(|want| want.now);
                if let (Some(entry), Some(now)) = (deliveries.by_key.get_mut(&key), now) {
                    found.taken.push(entry.lease(now, lease));
                }
            }
            found
        }))
    }

    async fn finish(
        &self,
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Result<EndpointHealth, OutboxError> {
        self.with(|deliveries| {
            let entry = deliveries.leased(taken)?;
            entry.lease = None;
            entry.tries += 1;
            entry.stored.attempts.push(attempt.clone());
            match step {
                Step::Retry { due, wait, reason } => {
                    entry.stored.due_at = Some(due);
                    (entry.waited, entry.reason) = (wait, reason);
                }
                Step::Done(outcome) => {
                    entry.stored.state = DeliveryState::ended(outcome);
                    entry.stored.due_at = None;
                    entry.finished_at = Some(SystemTime::now());
                }
            }
            let health = deliveries.health(&taken.endpoint);
            let merged = change.map_or(health, |change| health.merged(change));
            if merged != health {
                deliveries.health.insert(taken.endpoint.clone(), merged);
            }
            Some(merged)
        })
        .ok_or(OutboxError::LeaseLost)
    }

    async fn put_back(&self, taken: &Taken, due: SystemTime) -> Result<(), OutboxError> {
        self.with(|deliveries| {
            let entry = deliveries.leased(taken)?;
            entry.lease = None;
            entry.stored.due_at = Some(due);
            Some(())
        })
        .ok_or(OutboxError::LeaseLost)
    }

    async fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> Result<Option<StoredDelivery>, OutboxError> {
        Ok(self.with(|deliveries| {
            deliveries
                .by_key
                .get(&key(endpoint, id))
                .map(|entry| entry.stored.clone())
        }))
    }

    async fn list(
        &self,
        endpoint: &str,
        state: DeliveryState,
        limit: usize,
    ) -> Result<Vec<String>, OutboxError> {
        Ok(self.with(|deliveries| {
            let mut matching: Vec<&Entry> = deliveries
                .by_key
                .values()
                .filter(|entry| entry.stored.endpoint == endpoint && entry.stored.state == state)
                .collect();
            matching.sort_by_key(|entry| entry.order);
            matching
                .into_iter()
                .take(limit)
                .map(|entry| entry.stored.id.clone())
                .collect()
        }))
    }

    async fn replay(&self, endpoint: &str, id: &str, now: SystemTime) -> Result<bool, OutboxError> {
        Ok(self.with(|deliveries| {
            let Some(entry) = deliveries.by_key.get_mut(&key(endpoint, id)) else {
                return false;
            };
            if !matches!(
                entry.stored.state,
                DeliveryState::Dead | DeliveryState::Gone
            ) {
                return false;
            }
            entry.stored.state = DeliveryState::Pending;
            entry.stored.due_at = Some(now);
            entry.finished_at = None;
            entry.tries = 0;
            (entry.waited, entry.reason) = (Duration::ZERO, WaitReason::Schedule);
            true
        }))
    }

    async fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Result<bool, OutboxError> {
        Ok(self.with(|deliveries| {
            let health = deliveries.health.entry(endpoint.to_owned()).or_default();
            let due = match reason {
                DisableReason::Gone | DisableReason::Manual => true,
                DisableReason::NoSuccessFor(after) => health
                    .failing_since
                    .zip(now.checked_sub(after))
                    .is_some_and(|(since, latest)| since <= latest),
            };
            if health.disabled.is_some() || !due {
                return false;
            }
            health.disabled = Some(reason);
            true
        }))
    }

    async fn enable(&self, endpoint: &str) -> Result<(), OutboxError> {
        self.with(|deliveries| deliveries.health.remove(endpoint));
        Ok(())
    }

    async fn counts(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> Result<super::DeliveryCounts, OutboxError> {
        Ok(self.with(|deliveries| {
            let mut counts = super::DeliveryCounts::default();
            for entry in deliveries.by_key.values() {
                if entry.stored.endpoint != endpoint {
                    continue;
                }
                match entry.stored.state {
                    DeliveryState::Pending => {
                        counts.pending += 1;
                        let leased = entry.lease.as_ref().is_some_and(|(_, until)| *until > now);
                        let due = entry.stored.due_at.is_some_and(|due| due <= now);
                        counts.due += u64::from(due && !leased);
                    }
                    DeliveryState::Delivered => counts.delivered += 1,
                    DeliveryState::Gone => counts.gone += 1,
                    DeliveryState::Dead => counts.dead += 1,
                }
            }
            counts
        }))
    }
}
