//! An endpoint's health as one dispatcher sees it, what an attempt's
//! outcome changes in the health every dispatcher on the store shares, and
//! the disable that follows.

use std::sync::{MutexGuard, PoisonError};
use std::time::SystemTime;

use super::Disabled;
use super::state::{Inner, Route, Seen};
use crate::sender::outbox::{DeliveryStore, DisableReason, EndpointHealth, HealthChange};
use crate::sender::rules::Outcome;
use crate::sender::transport::Transport;

impl Route {
    pub(super) fn seen(&self) -> MutexGuard<'_, Seen> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `health`, just read from or written to the store.
    pub(super) fn set_health(&self, health: EndpointHealth) {
        let mut seen = self.seen();
        seen.health = health;
        seen.writes += 1;
    }

    /// Keeps `health`, read by a poll that started when the route had seen
    /// `writes` writes, unless an attempt or an enable wrote a newer value
    /// meanwhile.
    pub(super) fn saw(&self, writes: u64, health: EndpointHealth) {
        let mut seen = self.seen();
        if seen.writes == writes {
            seen.health = health;
        }
    }
}

/// What an attempt sent at `sent_at` that ended in `outcome` shows of the
/// endpoint's health: none for a 410, which disables the endpoint instead.
pub(super) fn health_change(sent_at: SystemTime, outcome: Outcome) -> Option<HealthChange> {
    match outcome {
        Outcome::Delivered => Some(HealthChange::Succeeded),
        Outcome::Gone => None,
        Outcome::GiveUp | Outcome::Retry { .. } => Some(HealthChange::Failed { at: sent_at }),
    }
}

impl<S: DeliveryStore, T: Transport + 'static> Inner<S, T> {
    /// Keeps `merged`, the health the store returned on recording the
    /// attempt, disables the endpoint when the attempt calls for it, and
    /// tells the owner if this dispatcher is the one that disabled it.
    pub(super) async fn track_health(
        &self,
        route: &Route,
        sent_at: SystemTime,
        outcome: Outcome,
        merged: EndpointHealth,
    ) {
        route.set_health(merged);
        let reason = match outcome {
            Outcome::Delivered => None,
            Outcome::Gone => Some(DisableReason::Gone),
            Outcome::GiveUp | Outcome::Retry { .. } => Some(merged)
                .filter(|health| health.disabled.is_none())
                .and_then(|health| health.failing_since)
                .zip(route.policy.disable_after())
                .filter(|(since, after)| {
                    sent_at.duration_since(*since).unwrap_or_default() >= *after
                })
                .map(|(_, after)| DisableReason::NoSuccessFor(after)),
        };
        let Some(reason) = reason else {
            return;
        };
        let disabled_now = match self.store.disable(&route.name, reason, sent_at).await {
            Ok(disabled_now) => disabled_now,
            Err(error) => {
                tracing::warn!(endpoint = %route.name, %error, "cannot save the endpoint's disable");
                return;
            }
        };
        let health = match self.store.health(&route.name).await {
            Ok(health) => health,
            Err(error) => {
                tracing::warn!(endpoint = %route.name, %error, "cannot read the endpoint's health");
                EndpointHealth {
                    disabled: disabled_now.then_some(reason),
                    ..merged
                }
            }
        };
        route.set_health(health);
        if !disabled_now {
            // Disabled already (whoever did it told the owner), or a
            // success or an enable came first.
            return;
        }
        let disabled = Disabled {
            endpoint: route.name.clone(),
            reason,
            failing_since: health.failing_since,
        };
        tracing::warn!(endpoint = %disabled.endpoint, reason = ?disabled.reason, "endpoint disabled");
        crate::sender::metrics::disabled(reason);
        if let Some(hook) = &self.on_disable {
            hook(&disabled);
        }
        self.notify(route, crate::sender::rules::NoticeKind::Disabled(reason));
    }
}
