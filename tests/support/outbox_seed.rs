//! Puts an outbox in a known state through the store's own steps: a saved
//! endpoint and deliveries ended with given answers at given times.
//! Included with `#[path]` by the outbox view, console and CLI tests.

#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, SystemTime};

use hooklatch::sender::EndpointConfig;
use hooklatch::sender::outbox::HealthChange;
use hooklatch::sender::outbox::{DeliveryStore, Taken};
use hooklatch::sender::rules::{Attempt, AttemptError, Final, Step};

/// The URL the seeded endpoint is saved with.
pub const SEEDED_URL: &str = "https://hooks.example/in";

/// Saves `endpoint` at [`SEEDED_URL`], then ends one delivery per `(id,
/// sent at, answer)` of `plan` with that one attempt: a 2xx delivered, 410
/// gone, any other status or an error (`Err(text)`) dead and the endpoint
/// failing since then.
pub async fn seed_endpoint(
    store: &impl DeliveryStore,
    endpoint: &str,
    plan: &[(&str, SystemTime, Result<u16, &str>)],
) {
    let config = EndpointConfig::new(
        SEEDED_URL,
        "standard",
        ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    )
    .unwrap();
    store
        .save_endpoint(endpoint, &config.to_json())
        .await
        .unwrap();
    let ids: Vec<&str> = plan.iter().map(|(id, ..)| *id).collect();
    for (taken, (_, sent_at, answer)) in leased(store, endpoint, &ids).await.iter().zip(plan) {
        let result = answer.map_err(AttemptError::new);
        end(store, taken, *sent_at, result).await;
    }
}

/// Enqueues `ids` to `endpoint`, due now, and leases them, in the order of
/// `ids` whatever order the store leased them in.
pub async fn leased(store: &impl DeliveryStore, endpoint: &str, ids: &[&str]) -> Vec<Taken> {
    let now = SystemTime::now();
    for id in ids {
        assert!(store.enqueue(endpoint, id, b"{}", now).await.unwrap());
    }
    let due = store
        .take_due(endpoint, now, ids.len(), Duration::from_secs(60))
        .await
        .unwrap();
    ids.iter()
        .map(|id| {
            let taken = due.taken.iter().find(|taken| taken.id == *id);
            taken.expect("every id leased").clone()
        })
        .collect()
}

/// Records the last attempt of `taken`, sent at `sent_at` with `result`,
/// its excerpt `answer STATUS` (or the error), and the end that follows.
pub async fn end(
    store: &impl DeliveryStore,
    taken: &Taken,
    sent_at: SystemTime,
    result: Result<u16, AttemptError>,
) {
    let (outcome, excerpt) = match &result {
        Ok(status @ 200..=299) => (Final::Delivered, format!("answer {status}")),
        Ok(410) => (Final::Gone, "answer 410".to_owned()),
        Ok(status) => (Final::Dead, format!("answer {status}")),
        Err(error) => (Final::Dead, error.as_str().to_owned()),
    };
    let change = (outcome == Final::Dead).then_some(HealthChange::Failed { at: sent_at });
    let mut attempt = Attempt::new(taken.attempts + 1, sent_at, result);
    attempt.excerpt = excerpt.into_bytes();
    store
        .finish(taken, &attempt, Step::Done(outcome), change)
        .await
        .expect("the lease held");
}
