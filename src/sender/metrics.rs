//! The sending side's metrics and span fields, in one place. With the
//! `metrics` feature they go to the application's recorder; without it,
//! nowhere. The `endpoint` label is an endpoint's name, which the operator
//! chooses: bounded, never a webhook id.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `hooklatch_delivery_attempts_total` | counter | `endpoint`, `outcome` (`delivered`, `retry`, `give_up`, `gone`) |
//! | `hooklatch_delivery_attempt_duration_seconds` | histogram | `endpoint` |
//! | `hooklatch_delivery_latency_seconds` | histogram | `endpoint`: from `send` to the 2xx, retries included |
//! | `hooklatch_breaker_held_total` | counter | `endpoint` |
//! | `hooklatch_endpoints_disabled_total` | counter | `reason` (`gone`, `no_success`, `manual`) |
//! | `hooklatch_breaker_state` | gauge | `endpoint`; 0 closed, 1 half-open, 2 open |
//! | `hooklatch_outbox_deliveries` | gauge | `endpoint`, `state` (`pending`, `due`, `dead`); with [`Dispatcher::with_depth_metrics`](super::Dispatcher::with_depth_metrics) |

use std::time::Duration;

use super::outbox::{DeliveryCounts, DisableReason};
use super::rules::BreakerState;
use super::rules::Outcome;

/// The `outcome` label of an attempt.
pub(crate) fn outcome_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Delivered => "delivered",
        Outcome::Gone => "gone",
        Outcome::GiveUp => "give_up",
        Outcome::Retry { .. } => "retry",
    }
}

/// The span one attempt runs in; its status and outcome are recorded when
/// it ends.
pub(crate) fn attempt_span(endpoint: &str, id: &str, number: u32) -> tracing::Span {
    tracing::info_span!(
        "delivery",
        endpoint,
        id,
        attempt = number,
        status = tracing::field::Empty,
        outcome = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    )
}

/// Counts an attempt and records it on its span.
pub(crate) fn attempt(
    span: &tracing::Span,
    endpoint: &str,
    outcome: Outcome,
    status: Option<u16>,
    took: Duration,
) {
    span.record("outcome", outcome_label(outcome));
    if let Some(status) = status {
        span.record("status", status);
    }
    span.record(
        "duration_ms",
        u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
    );
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(
            "hooklatch_delivery_attempts_total",
            "endpoint" => endpoint.to_owned(),
            "outcome" => outcome_label(outcome),
        )
        .increment(1);
        metrics::histogram!(
            "hooklatch_delivery_attempt_duration_seconds",
            "endpoint" => endpoint.to_owned(),
        )
        .record(took.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = endpoint;
}

/// Counts a delivery an open breaker held back.
pub(crate) fn held_by_breaker(endpoint: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("hooklatch_breaker_held_total", "endpoint" => endpoint.to_owned())
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = endpoint;
}

/// Counts an endpoint this dispatcher disabled.
pub(crate) fn disabled(reason: DisableReason) {
    #[cfg(feature = "metrics")]
    {
        let reason = match reason {
            DisableReason::Gone => "gone",
            DisableReason::NoSuccessFor(_) => "no_success",
            DisableReason::Manual => "manual",
        };
        metrics::counter!("hooklatch_endpoints_disabled_total", "reason" => reason).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// Sets an endpoint's breaker state, as this dispatcher's breaker has it.
pub(crate) fn breaker(endpoint: &str, state: BreakerState) {
    #[cfg(feature = "metrics")]
    {
        let value = match state {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            BreakerState::Open => 2.0,
        };
        metrics::gauge!("hooklatch_breaker_state", "endpoint" => endpoint.to_owned()).set(value);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (endpoint, state);
}

/// Sets an endpoint's outbox depth: pending, due now and dead deliveries.
pub(crate) fn depth(endpoint: &str, counts: DeliveryCounts) {
    #[cfg(feature = "metrics")]
    crate::gauges::set_depths(
        "hooklatch_outbox_deliveries",
        ("endpoint", endpoint),
        [
            ("pending", counts.pending),
            ("due", counts.due),
            ("dead", counts.dead),
        ],
    );
    #[cfg(not(feature = "metrics"))]
    let _ = (endpoint, counts);
}

/// Records the time from `send` to the answer that delivered the event.
pub(crate) fn delivered(endpoint: &str, since_sent: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("hooklatch_delivery_latency_seconds", "endpoint" => endpoint.to_owned())
        .record(since_sent.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (endpoint, since_sent);
}
