//! What a receiver does with a verified event, whatever the framework:
//! accept it into an inbox, or claim it under a lease and settle the lease.

use std::time::{Duration, Instant};

use super::metrics::{self, Outcome};
use super::{Rejection, VerifiedEvent};
use crate::dedup::{Acceptance, Claim, DedupError, Inbox, IncomingEvent, Lease, LeaseStore};

/// Claims and enqueues `event` in one atomic step. `Accepted` is answered
/// 202 and `Duplicate` 200; the error is the answer for a store failure
/// (503) or a key the store cannot take (400).
pub async fn accept<S: Inbox + ?Sized>(
    store: &S,
    namespace: &str,
    event: &VerifiedEvent,
) -> Result<Acceptance, Rejection> {
    let refused = refusal(event, namespace);
    let key = event
        .key()
        .map_err(|rejection| refused(rejection.clone()))?;
    let meta = event.meta();
    let incoming = IncomingEvent::new(namespace, key, &event.body)
        .with_signed_at(event.timestamp)
        .with_meta(&meta);
    let started = Instant::now();
    let accepted = store.accept(&incoming).await;
    metrics::store_took("accept", started.elapsed());
    let acceptance = accepted.map_err(|error| refused(Rejection::from_store(error)))?;
    let outcome = match acceptance {
        Acceptance::Accepted => Outcome::Accepted,
        Acceptance::Duplicate => Outcome::Duplicate,
    };
    metrics::request(outcome, None, &event.scheme, namespace);
    tracing::debug!(namespace, id = key, ?acceptance, "webhook received");
    Ok(acceptance)
}

/// Counts a refusal of `event` in `namespace` and hands the rejection on.
fn refusal<'a>(
    event: &'a VerifiedEvent,
    namespace: &'a str,
) -> impl Fn(Rejection) -> Rejection + 'a {
    move |rejection| {
        metrics::rejected(&rejection, &event.scheme, namespace);
        rejection
    }
}

/// What [`claim`] found: a lease to run the handler under, or an event that
/// was handled already (answer 200 without running it).
#[derive(Debug)]
pub enum Claimed {
    /// Run the handler, then [`settle`] the lease.
    Fresh(Lease),
    /// Handled before: answer 200.
    Done,
}

/// Claims `event` for `lease_for`. Another delivery holding it is the
/// rejection [`Rejection::InProgress`] (409 with `Retry-After`: a 2xx would
/// tell the sender the event was handled while it may still fail).
pub async fn claim<S: LeaseStore + ?Sized>(
    store: &S,
    namespace: &str,
    event: &VerifiedEvent,
    lease_for: Duration,
) -> Result<Claimed, Rejection> {
    let refused = refusal(event, namespace);
    let key = event
        .key()
        .map_err(|rejection| refused(rejection.clone()))?;
    let started = Instant::now();
    let claimed = store.claim(namespace, key, lease_for).await;
    metrics::store_took("claim", started.elapsed());
    let claimed = claimed.map_err(|error| refused(Rejection::from_store(error)))?;
    tracing::debug!(namespace, id = key, ?claimed, "webhook claim");
    match claimed {
        Claim::Fresh(lease) => {
            metrics::request(Outcome::Accepted, None, &event.scheme, namespace);
            Ok(Claimed::Fresh(lease))
        }
        Claim::Done => {
            metrics::request(Outcome::Duplicate, None, &event.scheme, namespace);
            Ok(Claimed::Done)
        }
        Claim::InProgress { retry_after } => Err(refused(Rejection::InProgress { retry_after })),
    }
}

/// How many times [`complete_with_retries`] tries `complete` before the
/// lease is left to expire.
pub const COMPLETE_TRIES: u32 = 3;

/// Completes the lease after the handler succeeded (retrying a failing
/// store, 100 ms then 400 ms apart) or releases it after anything else, so
/// the sender's retry runs the handler again. What cannot be settled is
/// logged; the lease then expires by itself.
///
/// Returns the completion's error, for the one case where the answer to
/// the sender changes: [`DedupError::ReplicasBehind`] (the done mark is on
/// the master but not yet on enough replicas) is answered 503, so the
/// sender retries and finds the event done, unless a failover lost the
/// mark. Every other failure keeps the handler's 2xx: the event was
/// handled, and a retry would only run it again.
pub async fn settle<S: LeaseStore + ?Sized>(
    store: &S,
    lease: &Lease,
    succeeded: bool,
) -> Result<(), DedupError> {
    let (namespace, id) = (lease.namespace(), lease.id());
    if !succeeded {
        if let Err(error) = store.release(lease).await {
            tracing::warn!(namespace, id, %error, "could not release the lease; it will expire");
        }
        return Ok(());
    }
    let completed = complete_with_retries(store, lease).await;
    match &completed {
        Ok(()) => {}
        Err(error @ DedupError::LeaseLost) => {
            tracing::error!(namespace, id, %error, "handled, but another delivery holds the event now");
        }
        Err(error @ DedupError::ReplicasBehind { .. }) => {
            tracing::warn!(namespace, id, %error, "handled, but not yet on enough replicas; asking the sender to retry");
        }
        Err(error) => {
            tracing::error!(namespace, id, %error, "handled, but could not record it; a retry after the lease may run it again");
        }
    }
    completed
}

/// Marks the event handled, trying a failing store [`COMPLETE_TRIES`] times
/// (100 ms, then 400 ms apart): a lost completion means the handler runs
/// again after the lease. A lost lease is not retried, nor a completion
/// that replicas have not confirmed (completing again would find the lease
/// already done).
pub async fn complete_with_retries<S: LeaseStore + ?Sized>(
    store: &S,
    lease: &Lease,
) -> Result<(), DedupError> {
    let mut wait = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        let started = Instant::now();
        let completed = store.complete(lease).await;
        metrics::store_took("complete", started.elapsed());
        match completed {
            Err(error)
                if attempt < COMPLETE_TRIES
                    && !matches!(
                        error,
                        DedupError::LeaseLost | DedupError::ReplicasBehind { .. }
                    ) =>
            {
                let (namespace, id) = (lease.namespace(), lease.id());
                tracing::warn!(namespace, id, %error, attempt, "could not complete the lease; trying again");
                tokio::time::sleep(wait).await;
                wait *= 4;
                attempt += 1;
            }
            settled => return settled,
        }
    }
}
