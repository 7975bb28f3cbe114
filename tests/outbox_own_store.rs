//! A delivery store written outside the crate, with only the public API:
//! `ListOutbox` keeps deliveries in a list, and passes the published
//! outbox checks (`hooklatch::testing::outbox`) every built-in outbox
//! passes: the constructors a store answers with are public.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use hooklatch::sender::OutboxError;
use hooklatch::sender::outbox::Retention;
use hooklatch::sender::outbox::{
    DeliveryCounts, DeliveryState, DeliveryStore, DisableReason, Due, EndpointHealth,
    EndpointRegistry, HealthChange, Keeping, Keyed, NewDelivery, SavedEndpoints, SendKey,
    StoredDelivery, Taken, validate_endpoint_name,
};
use hooklatch::sender::rules::{Attempt, Step, WaitReason};
use hooklatch::testing::{OutboxUnderTest, outbox};
use hooklatch::trace::TraceParent;

/// `at + wait`, or the far future where that overflows.
fn later(at: SystemTime, wait: Duration) -> SystemTime {
    at.checked_add(wait)
        .unwrap_or(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 100))
}

/// One delivery in [`ListOutbox`].
struct Row {
    stored: StoredDelivery,
    enqueued_at: SystemTime,
    finished_at: Option<SystemTime>,
    /// Attempts since it was enqueued or replayed.
    tries: u32,
    waited: Duration,
    reason: WaitReason,
    /// The lease's token and end, while a dispatcher holds it.
    lease: Option<(String, SystemTime)>,
    trace: Option<TraceParent>,
}

#[derive(Default)]
struct Lists {
    rows: Vec<Row>,
    health: HashMap<String, EndpointHealth>,
    endpoints: BTreeMap<String, String>,
    version: u64,
    /// Idempotency keys by endpoint and key: the id and when it expires.
    keys: HashMap<(String, String), (String, SystemTime)>,
    leases: u64,
}

/// The simplest outbox that keeps what a dispatcher relies on: one
/// delivery per endpoint and id, a lease whose token finishing and putting
/// back must carry, health merged in the store, and a disable that stops
/// takes.
#[derive(Clone, Default)]
struct ListOutbox {
    lists: Arc<Mutex<Lists>>,
}

impl ListOutbox {
    fn with<T>(&self, change: impl FnOnce(&mut Lists) -> T) -> T {
        change(&mut self.lists.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Lists {
    fn add(&mut self, new: &NewDelivery<'_>) -> bool {
        if self.find(new.endpoint(), new.id()).is_some() {
            return false;
        }
        self.rows.push(Row {
            stored: StoredDelivery {
                endpoint: new.endpoint().to_owned(),
                id: new.id().to_owned(),
                body: new.body().to_vec(),
                state: DeliveryState::Pending,
                due_at: Some(new.due()),
                attempts: Vec::new(),
            },
            enqueued_at: SystemTime::now(),
            finished_at: None,
            tries: 0,
            waited: Duration::ZERO,
            reason: WaitReason::Schedule,
            lease: None,
            trace: new.trace(),
        });
        true
    }

    fn find(&mut self, endpoint: &str, id: &str) -> Option<&mut Row> {
        self.rows
            .iter_mut()
            .find(|row| row.stored.endpoint == endpoint && row.stored.id == id)
    }

    /// The row `taken` leases, if its lease is the current one.
    fn leased(&mut self, taken: &Taken) -> Result<&mut Row, OutboxError> {
        self.find(&taken.endpoint, &taken.id)
            .filter(|row| {
                row.lease
                    .as_ref()
                    .is_some_and(|(token, _)| *token == taken.token)
            })
            .ok_or(OutboxError::LeaseLost)
    }
}

impl EndpointRegistry for ListOutbox {
    async fn save_endpoint(&self, name: &str, config: &str) -> Result<u64, OutboxError> {
        validate_endpoint_name(name)?;
        Ok(self.with(|lists| {
            lists.endpoints.insert(name.to_owned(), config.to_owned());
            lists.version += 1;
            lists.version
        }))
    }

    async fn remove_endpoint(&self, name: &str) -> Result<bool, OutboxError> {
        Ok(self.with(|lists| {
            let removed = lists.endpoints.remove(name).is_some();
            lists.version += u64::from(removed);
            removed
        }))
    }

    async fn endpoints_version(&self) -> Result<u64, OutboxError> {
        Ok(self.with(|lists| lists.version))
    }

    async fn saved_endpoints(&self) -> Result<SavedEndpoints, OutboxError> {
        Ok(self.with(|lists| SavedEndpoints {
            version: lists.version,
            endpoints: lists.endpoints.clone(),
        }))
    }
}

impl DeliveryStore for ListOutbox {
    async fn add_delivery(&self, delivery: NewDelivery<'_>) -> Result<bool, OutboxError> {
        Ok(self.with(|lists| lists.add(&delivery)))
    }

    async fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Result<Due, OutboxError> {
        Ok(self.with(|lists| {
            let health = lists.health.get(endpoint).copied().unwrap_or_default();
            let mut due = Due {
                health,
                taken: Vec::new(),
            };
            if health.disabled.is_some() {
                return due;
            }
            let mut ready: Vec<usize> = (0..lists.rows.len())
                .filter(|&index| {
                    let row = &lists.rows[index];
                    row.stored.endpoint == endpoint
                        && row.stored.state == DeliveryState::Pending
                        && row.stored.due_at.is_some_and(|at| at <= now)
                        && row.lease.as_ref().is_none_or(|(_, until)| *until <= now)
                })
                .collect();
            // Earliest due first; the list's order breaks ties.
            ready.sort_by_key(|&index| (lists.rows[index].stored.due_at, index));
            for index in ready.into_iter().take(limit) {
                lists.leases += 1;
                let token = format!("lease-{}", lists.leases);
                let row = &mut lists.rows[index];
                row.lease = Some((token.clone(), later(now, lease)));
                due.taken.push(Taken {
                    endpoint: row.stored.endpoint.clone(),
                    id: row.stored.id.clone(),
                    body: row.stored.body.clone(),
                    tries: row.tries,
                    attempts: u32::try_from(row.stored.attempts.len()).unwrap(),
                    due_at: row.stored.due_at.unwrap_or(now),
                    enqueued_at: row.enqueued_at,
                    waited: row.waited,
                    reason: row.reason,
                    token,
                    trace: row.trace,
                });
            }
            due
        }))
    }

    async fn finish(
        &self,
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Result<EndpointHealth, OutboxError> {
        self.with(|lists| {
            let row = lists.leased(taken)?;
            row.lease = None;
            row.tries += 1;
            row.stored.attempts.push(attempt.clone());
            match step {
                Step::Retry { due, wait, reason } => {
                    row.stored.due_at = Some(due);
                    (row.waited, row.reason) = (wait, reason);
                }
                Step::Done(outcome) => {
                    row.stored.state = DeliveryState::ended(outcome);
                    row.stored.due_at = None;
                    row.finished_at = Some(SystemTime::now());
                }
                _ => unreachable!("a step this store does not know"),
            }
            let health = lists
                .health
                .get(&taken.endpoint)
                .copied()
                .unwrap_or_default();
            let Some(change) = change else {
                return Ok(health);
            };
            let merged = health.merged(change);
            lists.health.insert(taken.endpoint.clone(), merged);
            Ok(merged)
        })
    }

    async fn put_back(&self, taken: &Taken, due: SystemTime) -> Result<(), OutboxError> {
        self.with(|lists| {
            let row = lists.leased(taken)?;
            row.lease = None;
            row.stored.due_at = Some(due);
            Ok(())
        })
    }

    async fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> Result<Option<StoredDelivery>, OutboxError> {
        Ok(self.with(|lists| lists.find(endpoint, id).map(|row| row.stored.clone())))
    }

    async fn list(
        &self,
        endpoint: &str,
        state: DeliveryState,
        limit: usize,
    ) -> Result<Vec<String>, OutboxError> {
        Ok(self.with(|lists| {
            lists
                .rows
                .iter()
                .filter(|row| row.stored.endpoint == endpoint && row.stored.state == state)
                .take(limit)
                .map(|row| row.stored.id.clone())
                .collect()
        }))
    }

    async fn replay(&self, endpoint: &str, id: &str, now: SystemTime) -> Result<bool, OutboxError> {
        Ok(self.with(|lists| match lists.find(endpoint, id) {
            Some(row) if matches!(row.stored.state, DeliveryState::Dead | DeliveryState::Gone) => {
                row.stored.state = DeliveryState::Pending;
                row.stored.due_at = Some(now);
                row.finished_at = None;
                row.tries = 0;
                (row.waited, row.reason) = (Duration::ZERO, WaitReason::Schedule);
                true
            }
            _ => false,
        }))
    }

    async fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Result<bool, OutboxError> {
        Ok(self.with(|lists| {
            let health = lists.health.entry(endpoint.to_owned()).or_default();
            let allowed = match reason {
                DisableReason::NoSuccessFor(after) => health
                    .failing_since
                    .is_some_and(|since| now.duration_since(since).is_ok_and(|for_| for_ >= after)),
                _ => true,
            };
            if health.disabled.is_some() || !allowed {
                return false;
            }
            health.disabled = Some(reason);
            true
        }))
    }

    async fn enable(&self, endpoint: &str) -> Result<(), OutboxError> {
        self.with(|lists| lists.health.remove(endpoint));
        Ok(())
    }

    async fn counts(&self, endpoint: &str, now: SystemTime) -> Result<DeliveryCounts, OutboxError> {
        Ok(self.with(|lists| {
            let mut counts = DeliveryCounts::default();
            for row in lists
                .rows
                .iter()
                .filter(|row| row.stored.endpoint == endpoint)
            {
                match row.stored.state {
                    DeliveryState::Pending => {
                        counts.pending += 1;
                        let held = row.lease.as_ref().is_some_and(|(_, until)| *until > now);
                        let due = row.stored.due_at.is_some_and(|at| at <= now);
                        counts.due += u64::from(due && !held);
                    }
                    DeliveryState::Delivered => counts.delivered += 1,
                    DeliveryState::Gone => counts.gone += 1,
                    DeliveryState::Dead => counts.dead += 1,
                    _ => {}
                }
            }
            counts
        }))
    }
}

impl Keeping for ListOutbox {
    async fn add_keyed_delivery(
        &self,
        key: SendKey<'_>,
        delivery: NewDelivery<'_>,
    ) -> Result<Keyed, OutboxError> {
        Ok(self.with(|lists| {
            let name = (delivery.endpoint().to_owned(), key.key.to_owned());
            if let Some((first, expires)) = lists.keys.get(&name)
                && *expires > key.now
            {
                return Keyed::new(first.clone(), false);
            }
            lists
                .keys
                .insert(name, (delivery.id().to_owned(), later(key.now, key.window)));
            Keyed::new(delivery.id(), lists.add(&delivery))
        }))
    }

    async fn forget_keys(&self, endpoint: &str, now: SystemTime) -> Result<u64, OutboxError> {
        Ok(self.with(|lists| {
            let before = lists.keys.len();
            lists
                .keys
                .retain(|(of, _), (_, expires)| of != endpoint || *expires > now);
            (before - lists.keys.len()) as u64
        }))
    }

    async fn purge_outcomes(
        &self,
        endpoint: &str,
        retention: &Retention,
        now: SystemTime,
    ) -> Result<u64, OutboxError> {
        Ok(self.with(|lists| {
            let before = lists.rows.len();
            lists.rows.retain(|row| {
                let state = row.stored.state;
                let expired = row.stored.endpoint == endpoint
                    && retention.cutoff(state, now).is_some_and(|cutoff| {
                        if state == DeliveryState::Pending {
                            let held = row.lease.as_ref().is_some_and(|(_, until)| *until > now);
                            !held && row.enqueued_at < cutoff
                        } else {
                            row.finished_at.is_some_and(|at| at < cutoff)
                        }
                    });
                !expired
            });
            (before - lists.rows.len()) as u64
        }))
    }

    async fn purge(&self, finished_before: SystemTime) -> Result<u64, OutboxError> {
        Ok(self.with(|lists| {
            let before = lists.rows.len();
            lists.rows.retain(|row| {
                let finished = matches!(
                    row.stored.state,
                    DeliveryState::Delivered | DeliveryState::Gone
                );
                !(finished && row.finished_at.is_some_and(|at| at < finished_before))
            });
            (before - lists.rows.len()) as u64
        }))
    }
}

/// Each check gets an empty list of its own.
struct Empty;

impl OutboxUnderTest for Empty {
    type Store = ListOutbox;

    async fn empty(&self) -> ListOutbox {
        ListOutbox::default()
    }
}

/// The store passes every published outbox check, as the built-in
/// outboxes do (tests/outbox.rs stamps the same checks for each of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_written_outside_the_crate_passes_the_published_outbox_checks() {
    outbox::all(&Empty).await;
}
