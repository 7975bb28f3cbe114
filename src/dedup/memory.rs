//! [`MemoryInbox`]: claims and inbox in process memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::tail::{EventStatus, Position, Tail, TailedEvent};
use super::{
    Acceptance, Answer, Claim, DeadLetter, DedupError, EventMeta, GiveBack, Inbox, InboxEntry,
    InboxQueue, InboxStats, IncomingEvent, LAST_ATTEMPT_TIMED_OUT, Lease, LeaseStore, NackOutcome,
    Receipt, StoreOptions, check_key, check_namespace, millis, new_token,
};

/// Claims and inbox in process memory, behind one mutex.
///
/// Nothing survives a restart and nothing is shared between processes: use
/// it in tests and single-process tools. Cloning shares the same store.
#[derive(Debug, Clone, Default)]
pub struct MemoryInbox {
    state: Arc<Mutex<State>>,
    options: StoreOptions,
}

#[derive(Debug, Default)]
struct State {
    claims: HashMap<(String, String), ClaimEntry>,
    inbox: HashMap<String, BTreeMap<u64, Row>>,
    next_entry: u64,
    /// Numbers each claim in the order made, for [`InboxQueue::tail`].
    claims_made: u64,
}

#[derive(Debug)]
struct ClaimEntry {
    claimed_at: i64,
    /// Its place in the order claims were made.
    number: u64,
    /// `Some` while a lease holds the claim; `None` once done.
    lease: Option<Hold>,
}

#[derive(Debug, Clone)]
struct Hold {
    token: String,
    until: i64,
}

#[derive(Debug)]
struct Row {
    id: String,
    body: Vec<u8>,
    signed_at: Option<i64>,
    meta: EventMeta,
    attempts: u32,
    available_at: i64,
    taken: Option<Hold>,
    dead: bool,
    /// Why and when it was dead-lettered.
    dead_letter: Option<DeadLetter>,
    /// When it was accepted, ms since the epoch.
    received_at: i64,
}

impl MemoryInbox {
    /// An empty store with default [`StoreOptions`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `options` for retention, visibility timeout and attempts.
    #[must_use]
    pub fn with_options(mut self, options: StoreOptions) -> Self {
        self.options = options;
        self
    }

    /// Forgets claims older than `older_than`, and never one younger than
    /// the retention: a claim inside the dedup window is what keeps a
    /// provider's retry out. Returns how many.
    pub fn purge(&self, older_than: Duration) -> u64 {
        let older_than = older_than.max(self.options.retention());
        let cutoff = self.options.now_millis().saturating_sub(millis(older_than));
        let mut state = self.lock();
        let before = state.claims.len();
        state
            .claims
            .retain(|_, claim| claim.claimed_at >= cutoff || claim.lease.is_some());
        (before - state.claims.len()) as u64
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the maps consistent (each
        // operation mutates after all checks), so a poisoned lock is usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn is_expired(&self, claim: &ClaimEntry, now: i64) -> bool {
        claim.lease.is_none()
            && claim.claimed_at < now.saturating_sub(millis(self.options.retention()))
    }

    fn delivery(namespace: &str, entry: u64, row: &Row, token: String) -> InboxEntry {
        InboxEntry {
            namespace: namespace.to_owned(),
            id: row.id.clone(),
            body: row.body.clone(),
            signed_at: row.signed_at,
            attempt: row.attempts,
            meta: row.meta.clone(),
            dead: row.dead.then(|| row.dead_letter.clone()).flatten(),
            received_at_millis: Some(row.received_at),
            receipt: Receipt {
                entry: entry.to_string(),
                token,
            },
        }
    }

    /// Runs `change` on the row a delivery was taken from, if the delivery
    /// still holds it.
    fn with_taken_row<T>(
        &self,
        delivery: &InboxEntry,
        change: impl FnOnce(&mut BTreeMap<u64, Row>, u64) -> T,
    ) -> Result<T, DedupError> {
        let entry: u64 = delivery
            .receipt
            .entry
            .parse()
            .map_err(|_| DedupError::DeliveryLost)?;
        let mut state = self.lock();
        let rows = state
            .inbox
            .get_mut(&delivery.namespace)
            .ok_or(DedupError::DeliveryLost)?;
        let holds = rows.get(&entry).is_some_and(|row| {
            !row.dead
                && row
                    .taken
                    .as_ref()
                    .is_some_and(|hold| hold.token == delivery.receipt.token)
        });
        if !holds {
            return Err(DedupError::DeliveryLost);
        }
        Ok(change(rows, entry))
    }
}

impl Inbox for MemoryInbox {
    async fn accept(&self, event: &IncomingEvent<'_>) -> Answer<Acceptance> {
        check_key(event.namespace, event.id)?;
        let now = self.options.now_millis();
        let mut state = self.lock();
        let key = (event.namespace.to_owned(), event.id.to_owned());
        if let Some(claim) = state.claims.get(&key)
            && !self.is_expired(claim, now)
        {
            return Ok(Acceptance::Duplicate);
        }
        state.claims_made += 1;
        let number = state.claims_made;
        state.claims.insert(
            key,
            ClaimEntry {
                claimed_at: now,
                number,
                lease: None,
            },
        );
        state.next_entry += 1;
        let entry = state.next_entry;
        state
            .inbox
            .entry(event.namespace.to_owned())
            .or_default()
            .insert(
                entry,
                Row {
                    id: event.id.to_owned(),
                    body: event.body.to_vec(),
                    signed_at: event.signed_at,
                    meta: event.meta.cloned().unwrap_or_default(),
                    attempts: 0,
                    available_at: now,
                    taken: None,
                    dead: false,
                    dead_letter: None,
                    received_at: now,
                },
            );
        drop(state);
        super::wake_workers(event.namespace);
        Ok(Acceptance::Accepted)
    }
}

impl InboxQueue for MemoryInbox {
    async fn take(&self, namespace: &str, _consumer: &str, max: usize) -> Answer<Vec<InboxEntry>> {
        check_namespace(namespace)?;
        let now = self.options.now_millis();
        let visible_until = now.saturating_add(millis(self.options.visibility_timeout()));
        let mut state = self.lock();
        let Some(rows) = state.inbox.get_mut(namespace) else {
            return Ok(Vec::new());
        };
        let mut taken = Vec::new();
        for (entry, row) in rows.iter_mut() {
            if taken.len() >= max {
                break;
            }
            let ready = !row.dead
                && row.available_at <= now
                && row.taken.as_ref().is_none_or(|hold| hold.until <= now);
            if !ready {
                continue;
            }
            if row.attempts >= self.options.max_attempts() {
                // Its last worker died holding it: that was its last try.
                row.dead = true;
                row.taken = None;
                row.dead_letter = Some(DeadLetter::new(LAST_ATTEMPT_TIMED_OUT, Some(now)));
                continue;
            }
            row.attempts += 1;
            let token = new_token();
            row.taken = Some(Hold {
                token: token.clone(),
                until: visible_until,
            });
            taken.push(Self::delivery(namespace, *entry, row, token));
        }
        Ok(taken)
    }

    async fn ack(&self, delivery: &InboxEntry) -> Answer<()> {
        self.with_taken_row(delivery, |rows, entry| {
            rows.remove(&entry);
        })
    }

    async fn extend_visibility(&self, delivery: &InboxEntry) -> Answer<()> {
        let now = self.options.now_millis();
        let until = now.saturating_add(millis(self.options.visibility_timeout()));
        // A heartbeat after the visibility lapsed is refused, as on every
        // store: another worker may take the entry at any moment.
        let extended = self.with_taken_row(delivery, |rows, entry| {
            match rows.get_mut(&entry).and_then(|row| row.taken.as_mut()) {
                Some(hold) if hold.until > now => {
                    hold.until = until;
                    true
                }
                _ => false,
            }
        })?;
        if extended {
            Ok(())
        } else {
            Err(DedupError::DeliveryLost)
        }
    }

    async fn give_back(
        &self,
        delivery: &InboxEntry,
        how: GiveBack,
        reason: &str,
    ) -> Answer<NackOutcome> {
        let max_attempts = self.options.max_attempts();
        let now = self.options.now_millis();
        self.with_taken_row(delivery, |rows, entry| {
            let Some(row) = rows.get_mut(&entry) else {
                return NackOutcome::DeadLettered;
            };
            row.taken = None;
            match how {
                GiveBack::Retry(retry_in) if row.attempts < max_attempts => {
                    row.available_at = now.saturating_add(millis(retry_in));
                    NackOutcome::WillRetry
                }
                _ => {
                    row.dead = true;
                    row.dead_letter = Some(DeadLetter::new(reason, Some(now)));
                    NackOutcome::DeadLettered
                }
            }
        })
    }

    fn visibility_timeout(&self) -> Duration {
        self.options.visibility_timeout()
    }

    async fn dead_letters(&self, namespace: &str, max: usize) -> Answer<Vec<InboxEntry>> {
        check_namespace(namespace)?;
        let state = self.lock();
        Ok(state
            .inbox
            .get(namespace)
            .into_iter()
            .flatten()
            .filter(|(_, row)| row.dead)
            .take(max)
            .map(|(entry, row)| Self::delivery(namespace, *entry, row, String::new()))
            .collect())
    }

    async fn stats(&self, namespace: &str) -> Answer<InboxStats> {
        check_namespace(namespace)?;
        let now = self.options.now_millis();
        let state = self.lock();
        let mut stats = InboxStats::default();
        for row in state
            .inbox
            .get(namespace)
            .into_iter()
            .flat_map(|rows| rows.values())
        {
            if row.dead {
                stats.dead += 1;
            } else if row.taken.as_ref().is_some_and(|hold| hold.until > now) {
                stats.taken += 1;
            } else {
                stats.waiting += 1;
            }
        }
        Ok(stats)
    }

    /// Reads every claim and the namespace's inbox each call, under the
    /// store's lock: a store for tests and single processes.
    async fn tail(&self, tail: &mut Tail, max: usize) -> Answer<Vec<TailedEvent>> {
        check_namespace(&tail.namespace)?;
        let now = self.options.now_millis();
        let state = self.lock();
        let after = match tail.position {
            Position::Counted(after) => after,
            _ => {
                tail.position = Position::Counted(state.claims_made);
                return Ok(Vec::new());
            }
        };
        let mut claims: Vec<_> = state
            .claims
            .iter()
            .filter(|((namespace, _), claim)| *namespace == tail.namespace && claim.number > after)
            .collect();
        claims.sort_unstable_by_key(|(_, claim)| claim.number);
        claims.truncate(max);
        let rows: HashMap<&str, &Row> = state
            .inbox
            .get(&tail.namespace)
            .into_iter()
            .flat_map(|rows| rows.values())
            .map(|row| (row.id.as_str(), row))
            .collect();
        let events = claims
            .iter()
            .map(|((namespace, id), claim)| {
                let row = rows.get(id.as_str()).copied();
                let status = match (row, &claim.lease) {
                    (Some(row), _) if row.dead => EventStatus::Dead,
                    (Some(row), _) if row.taken.as_ref().is_some_and(|hold| hold.until > now) => {
                        EventStatus::Taken
                    }
                    (Some(row), _) if row.attempts > 0 => EventStatus::Retrying,
                    (Some(_), _) => EventStatus::Waiting,
                    (None, Some(hold)) if hold.until > now => EventStatus::Taken,
                    (None, _) => EventStatus::Done,
                };
                let mut event = TailedEvent::new(namespace, id, status);
                event.event_type = row.and_then(|row| row.meta.event_type.clone());
                event.accepted_at_millis = Some(claim.claimed_at);
                event
            })
            .collect();
        if let Some((_, last)) = claims.last() {
            tail.position = Position::Counted(last.number);
        }
        Ok(events)
    }

    async fn requeue_dead(&self, namespace: &str, id: Option<&str>) -> Answer<u64> {
        check_namespace(namespace)?;
        let now = self.options.now_millis();
        let mut state = self.lock();
        let mut requeued = 0;
        for row in state
            .inbox
            .get_mut(namespace)
            .into_iter()
            .flat_map(|rows| rows.values_mut())
        {
            if row.dead && id.is_none_or(|id| row.id == id) {
                row.dead = false;
                row.dead_letter = None;
                row.attempts = 0;
                row.available_at = now;
                row.taken = None;
                requeued += 1;
            }
        }
        if requeued > 0 {
            super::wake_workers(namespace);
        }
        Ok(requeued)
    }
}

impl LeaseStore for MemoryInbox {
    async fn claim(&self, namespace: &str, id: &str, lease_for: Duration) -> Answer<Claim> {
        check_key(namespace, id)?;
        let now = self.options.now_millis();
        let mut state = self.lock();
        let key = (namespace.to_owned(), id.to_owned());
        if let Some(claim) = state.claims.get(&key)
            && !self.is_expired(claim, now)
        {
            match &claim.lease {
                None => return Ok(Claim::Done),
                Some(hold) if hold.until > now => {
                    return Ok(Claim::InProgress {
                        retry_after: Duration::from_millis(hold.until.abs_diff(now)),
                    });
                }
                Some(_) => {} // expired: its holder crashed; take it over
            }
        }
        let token = new_token();
        state.claims_made += 1;
        let number = state.claims_made;
        state.claims.insert(
            key,
            ClaimEntry {
                claimed_at: now,
                number,
                lease: Some(Hold {
                    token: token.clone(),
                    until: now.saturating_add(millis(lease_for)),
                }),
            },
        );
        Ok(Claim::Fresh(Lease::new(namespace, id, token)))
    }

    async fn complete(&self, lease: &Lease) -> Answer<()> {
        let mut state = self.lock();
        let key = (lease.namespace().to_owned(), lease.id().to_owned());
        match state.claims.get_mut(&key) {
            Some(claim)
                if claim
                    .lease
                    .as_ref()
                    .is_some_and(|hold| hold.token == lease.token()) =>
            {
                claim.lease = None;
                claim.claimed_at = self.options.now_millis();
                Ok(())
            }
            _ => Err(DedupError::LeaseLost),
        }
    }

    async fn extend_lease(&self, lease: &Lease, lease_for: Duration) -> Answer<()> {
        let now = self.options.now_millis();
        let until = now.saturating_add(millis(lease_for));
        let mut state = self.lock();
        let key = (lease.namespace().to_owned(), lease.id().to_owned());
        let hold = state
            .claims
            .get_mut(&key)
            .and_then(|claim| claim.lease.as_mut())
            .filter(|hold| hold.token == lease.token() && hold.until > now)
            .ok_or(DedupError::LeaseLost)?;
        hold.until = until;
        Ok(())
    }

    async fn release(&self, lease: &Lease) -> Answer<()> {
        let mut state = self.lock();
        let key = (lease.namespace().to_owned(), lease.id().to_owned());
        let held = state.claims.get(&key).is_some_and(|claim| {
            claim
                .lease
                .as_ref()
                .is_some_and(|hold| hold.token == lease.token())
        });
        if !held {
            return Err(DedupError::LeaseLost);
        }
        state.claims.remove(&key);
        Ok(())
    }
}
