//! The delivery loop: wait, pass the breaker, sign and send one attempt,
//! classify it and plan the next [`Step`], until the delivery ends.

use std::time::Duration;

use super::endpoint::{Endpoint, Pass};
use super::rules::Policy;
use super::rules::{Attempt, AttemptError, Final, Outcome, Step, WaitReason, first_wait, plan};
use super::transport::{Transport, TransportError};
use crate::trace::TraceParent;

/// How an attempt went: its record and what its answer means.
pub(crate) struct Tried {
    pub(crate) attempt: Attempt,
    pub(crate) outcome: Outcome,
}

/// Signs and sends one attempt and tells the breaker how it went through
/// `pass`. The caller has already waited and passed the breaker. With the
/// trace the delivery was sent in, the attempt carries a `traceparent` of
/// that trace under a span id of its own.
pub(crate) async fn attempt_once<T: Transport + ?Sized>(
    transport: &T,
    endpoint: &Endpoint,
    pass: Pass<'_>,
    policy: &Policy,
    delivery: (&str, &[u8], Option<TraceParent>),
    number: u32,
    (waited, reason, held): (Duration, WaitReason, Duration),
) -> Tried {
    let (id, body, trace) = delivery;
    let sent_at = policy.now();
    let started = tokio::time::Instant::now();
    let record = |result, duration, excerpt| Attempt {
        number,
        sent_at,
        waited,
        reason,
        held,
        result,
        duration,
        excerpt,
    };
    let answer = match endpoint.signer().sign(id, sent_at, body) {
        Ok(signed) => {
            let attempt_trace = trace.map(|trace| trace.child());
            #[cfg_attr(not(feature = "http-signatures"), allow(unused_mut))]
            let mut headers: Vec<(String, String)> = signed
                .iter()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .chain(attempt_trace.map(|trace| ("traceparent".to_owned(), trace.to_string())))
                .collect();
            #[cfg(feature = "http-signatures")]
            if let Some(signer) = endpoint.message_signer()
                && let Err(error) =
                    message_sign(signer, endpoint.url(), id, sent_at, body, &mut headers)
            {
                pass.release();
                let result = Err(AttemptError::new(format!("cannot sign: {error}")));
                return Tried {
                    attempt: record(result, Duration::ZERO, Vec::new()),
                    outcome: Outcome::GiveUp,
                };
            }
            let post = transport.post(endpoint.url(), &headers, body);
            match tokio::time::timeout(policy.attempt_timeout(), post).await {
                Ok(answer) => answer,
                Err(_) => Err(TransportError::Timeout {
                    after: Some(policy.attempt_timeout()),
                    source: None,
                }),
            }
        }
        // An id the scheme cannot carry will never be deliverable; it says
        // nothing about the endpoint.
        Err(error) => {
            pass.release();
            let result = Err(AttemptError::new(format!("cannot sign: {error}")));
            return Tried {
                attempt: record(result, Duration::ZERO, Vec::new()),
                outcome: Outcome::GiveUp,
            };
        }
    };
    let duration = started.elapsed();
    let outcome = match &answer {
        Ok(response) => policy.answers().classify(
            Some(response.status),
            response.retry_after.as_deref(),
            sent_at,
        ),
        Err(TransportError::Refused(_)) => policy.answers().classify_refused(),
        Err(_) => policy.answers().classify(None, None, sent_at),
    };
    if outcome == Outcome::Delivered {
        pass.succeeded();
    } else {
        pass.failed();
    }
    let (result, excerpt) = match answer {
        Ok(response) => (
            Ok(response.status),
            response
                .body
                .into_iter()
                .take(policy.excerpt_len())
                .collect(),
        ),
        Err(error) => (Err(AttemptError::transport(error)), Vec::new()),
    };
    Tried {
        attempt: record(result, duration, excerpt),
        outcome,
    }
}

/// A delivery and all its attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryRecord {
    /// The webhook id, the same on every attempt.
    pub id: String,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// How it ended.
    pub outcome: Final,
}

/// Delivers `body` as event `id` to `endpoint` in this task: signs each
/// attempt anew (same id, fresh timestamp and signature), waits as the
/// schedule, `Retry-After` and the breaker say, and stops on 2xx, an
/// answer the policy's [`Answers`](super::rules::Answers) do not retry (410 by
/// default), or when the attempts run out. `random` draws the jitter
/// from `[0, 1)`. Waiting uses tokio's clock, so tests can pause it.
///
/// This keeps nothing if the process stops; a
/// [`Dispatcher`](super::Dispatcher) on a durable store does. Run in a
/// trace ([`TraceParent::scope`]), each attempt carries it.
pub async fn deliver<T: Transport>(
    transport: &T,
    endpoint: &Endpoint,
    policy: &Policy,
    id: &str,
    body: &[u8],
    random: impl FnMut() -> f64,
) -> DeliveryRecord {
    deliver_observed(transport, endpoint, policy, (id, body), random, |_| {}).await
}

/// [`deliver`], calling `on_attempt` with each attempt as soon as it is
/// answered (to print progress, say).
pub async fn deliver_observed<T: Transport>(
    transport: &T,
    endpoint: &Endpoint,
    policy: &Policy,
    (id, body): (&str, &[u8]),
    mut random: impl FnMut() -> f64,
    mut on_attempt: impl FnMut(&Attempt),
) -> DeliveryRecord {
    let mut attempts = Vec::new();
    let trace = TraceParent::current();
    let (mut waited, mut reason) = (first_wait(policy, random()), WaitReason::Schedule);
    let mut number = 1;
    loop {
        tokio::time::sleep(waited).await;
        let (pass, held) = wait_for_breaker(endpoint).await;
        let tried = attempt_once(
            transport,
            endpoint,
            pass,
            policy,
            (id, body, trace),
            number,
            (waited, reason, held),
        )
        .await;
        on_attempt(&tried.attempt);
        attempts.push(tried.attempt);
        match plan(policy, number, tried.outcome, random(), policy.now()) {
            Step::Done(outcome) => {
                return DeliveryRecord {
                    id: id.to_owned(),
                    attempts,
                    outcome,
                };
            }
            Step::Retry {
                wait, reason: why, ..
            } => (waited, reason) = (wait, why),
        }
        number += 1;
    }
}

/// Adds an RFC 9421 signature of the attempt to `headers`: a
/// `Content-Digest` of `body`, then `Signature-Input` and `Signature`
/// (label `sig1`, created `sent_at`, the webhook `id` as the nonce).
#[cfg(feature = "http-signatures")]
fn message_sign(
    signer: &crate::verify::message::MessageSigner,
    url: &str,
    id: &str,
    sent_at: std::time::SystemTime,
    body: &[u8],
    headers: &mut Vec<(String, String)>,
) -> Result<(), crate::verify::message::MessageSignatureError> {
    use crate::verify::message::{MessageRequest, content_digest};
    // The type the transport would add, set here so that it is signed.
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-type"))
    {
        headers.push(("content-type".to_owned(), "application/json".to_owned()));
    }
    headers.push(("content-digest".to_owned(), content_digest(body)));
    let mut map = http::HeaderMap::new();
    for (name, value) in headers.iter() {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(value),
        ) {
            map.append(name, value);
        }
    }
    let request = MessageRequest::new("POST", url, &map)?;
    let created = sent_at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        });
    let signed = signer.sign("sig1", &request, created, Some(id))?;
    headers.push(("signature-input".to_owned(), signed.signature_input));
    headers.push(("signature".to_owned(), signed.signature));
    Ok(())
}

/// Waits until the endpoint's breaker lets an attempt through; returns the
/// pass and how long that took.
async fn wait_for_breaker(endpoint: &Endpoint) -> (Pass<'_>, Duration) {
    let started = tokio::time::Instant::now();
    loop {
        // tokio's clock, so that a paused test clock drives the breaker too.
        let verdict = endpoint.try_breaker();
        match verdict {
            Ok(pass) => return (pass, started.elapsed()),
            Err(wait) => tokio::time::sleep(wait).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sender::rules::{Breaker, Jitter, Schedule};
    use crate::sender::transport::{Response, transport_fn};
    use crate::verify::{Scheme, Signer};

    /// How a test transport ends an attempt.
    #[derive(Clone, Copy)]
    enum Ending {
        Answer(u16),
        TransportError,
        Hang,
        Panic,
    }

    /// A transport that ends every attempt the same way.
    fn ends(ending: Ending) -> impl Transport {
        transport_fn(move |_, _, _| async move {
            match ending {
                Ending::Answer(status) => Ok(Response::new(status)),
                Ending::TransportError => Err(TransportError::Connect("connection refused".into())),
                Ending::Hang => {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Err(TransportError::Other("unreachable".into()))
                }
                Ending::Panic => panic!("a transport bug"),
            }
        })
    }

    fn policy() -> Policy {
        Policy::new(Schedule::Table {
            delays: vec![Duration::ZERO],
            jitter: Jitter::None,
        })
        .with_attempt_timeout(Duration::from_millis(20))
    }

    /// An endpoint whose breaker is half-open with one probe: it opened
    /// after one failure, and the (paused) clock is moved past its 30 s
    /// cool-down. A failed probe opens it again for another 30 s.
    async fn half_open() -> Endpoint {
        let signer = Signer::new(
            Scheme::standard_webhooks(),
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap();
        let endpoint = Endpoint::new("https://receiver.example", signer).with_breaker(
            Breaker::new()
                .with_failure_threshold(1)
                .with_cool_down(Duration::from_secs(30))
                .with_probes(1),
        );
        endpoint.try_breaker().unwrap().failed();
        assert!(endpoint.breaker_open());
        tokio::time::advance(Duration::from_secs(31)).await;
        endpoint
    }

    /// Sends the half-open breaker's one probe as event `id` over
    /// `transport` (in its own task, which may panic), and tells the
    /// breaker's state afterwards.
    async fn after_probe(ending: Ending, id: &str) -> crate::sender::rules::BreakerState {
        let endpoint = Arc::new(half_open().await);
        let pass = endpoint.try_breaker().expect("the probe");
        assert!(endpoint.try_breaker().is_err(), "one probe at a time");
        pass.release();
        let probing = Arc::clone(&endpoint);
        let id = id.to_owned();
        let ended = tokio::spawn(async move {
            let pass = probing.try_breaker().expect("the probe");
            let policy = policy();
            attempt_once(
                &ends(ending),
                &probing,
                pass,
                &policy,
                (&id, b"{}", None),
                1,
                (Duration::ZERO, WaitReason::Schedule, Duration::ZERO),
            )
            .await
        })
        .await;
        assert_eq!(ended.is_err(), matches!(ending, Ending::Panic));
        let state = endpoint
            .breaker()
            .state(tokio::time::Instant::now().into_std());
        if state == crate::sender::rules::BreakerState::HalfOpen {
            assert!(endpoint.try_breaker().is_ok(), "the probe is free again");
        }
        state
    }

    use crate::sender::rules::BreakerState::{HalfOpen, Open};

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_cannot_be_signed_is_given_back() {
        assert_eq!(
            after_probe(Ending::Answer(200), "two words").await,
            HalfOpen
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_whose_transport_panics_counts_as_failed() {
        assert_eq!(after_probe(Ending::Panic, "msg_1").await, Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_times_out_counts_as_failed() {
        assert_eq!(after_probe(Ending::Hang, "msg_1").await, Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_without_an_answer_counts_as_failed() {
        assert_eq!(after_probe(Ending::TransportError, "msg_1").await, Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_answered_with_an_error_status_counts_as_failed() {
        assert_eq!(after_probe(Ending::Answer(500), "msg_1").await, Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_successful_probe_closes_the_breaker() {
        let endpoint = half_open().await;
        let pass = endpoint.try_breaker().unwrap();
        let policy = policy();
        attempt_once(
            &ends(Ending::Answer(204)),
            &endpoint,
            pass,
            &policy,
            ("msg_1", b"{}", None),
            1,
            (Duration::ZERO, WaitReason::Schedule, Duration::ZERO),
        )
        .await;
        assert!(!endpoint.breaker_open());
        assert_eq!(
            endpoint
                .breaker()
                .state(tokio::time::Instant::now().into_std()),
            crate::sender::rules::BreakerState::Closed
        );
    }
}
