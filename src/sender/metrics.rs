//! The sending side's metrics and span fields, in one place. With the
//! `metrics` feature they go to the application's recorder; without it,
//! nowhere. The `endpoint` label is an endpoint's name, which the operator
//! chooses: bounded, never a webhook id.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `hooklatch_delivery_attempts_total` | counter | `endpoint`, `outcome` (`delivered`, `retry`, `give_up`, `gone`) |
//! | `hooklatch_delivery_attempt_duration_seconds` | histogram | `endpoint` |
//! | `hooklatch_breaker_held_total` | counter | `endpoint` |
//! | `hooklatch_endpoints_disabled_total` | counter | `reason` (`gone`, `no_success`) |

use std::time::Duration;

use super::attempt::Outcome;
use super::outbox::DisableReason;

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
