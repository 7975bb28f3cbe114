//! What one dispatcher does about an endpoint in trouble, besides its
//! breaker and the shared health: the pause after a failure
//! ([`Policy::with_pause_on_failure`](crate::sender::Policy::with_pause_on_failure))
//! and the owner's [`Notice`]s, limited per endpoint.

use std::sync::{MutexGuard, PoisonError};
use std::time::SystemTime;

use super::state::{Inner, Pause, Route};
use crate::sender::outbox::{DeliveryStore, EndpointHealth};
use crate::sender::rules::{Final, Outcome, Step};
use crate::sender::rules::{Limiter, Notice, NoticeKind};
use crate::sender::transport::Transport;

impl Route {
    fn pause(&self) -> MutexGuard<'_, Pause> {
        self.pause.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many deliveries the pause lets this dispatcher take at `now`:
    /// `None` if the endpoint is not paused, else 0 or 1 (the probe,
    /// counted as out until [`probe_unused`](Self::probe_unused) or the
    /// attempt's verdict).
    pub(super) fn pause_allows(&self, now: SystemTime) -> Option<usize> {
        let mut pause = self.pause();
        let until = pause.until?;
        if now < until || pause.probing {
            return Some(0);
        }
        pause.probing = true;
        Some(1)
    }

    /// The probe the pause let through was not sent (nothing was due, or
    /// the breaker held it back).
    pub(super) fn probe_unused(&self) {
        self.pause().probing = false;
    }

    /// Pauses after a failed attempt until the delivery's next attempt
    /// (or, if it has none, until the next take, which sends one probe);
    /// a success ends the pause.
    fn after_attempt(&self, outcome: Outcome, step: Step, now: SystemTime) {
        if !self.policy.pause_on_failure() {
            return;
        }
        let mut pause = self.pause();
        pause.probing = false;
        pause.until = match (outcome, step) {
            (Outcome::Delivered, _) => None,
            (_, Step::Retry { due, .. }) => Some(due),
            (_, Step::Done(_)) => Some(now),
        };
    }

    fn limiter(&self) -> MutexGuard<'_, Limiter> {
        self.notices.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<S: DeliveryStore, T: Transport + 'static> Inner<S, T> {
    /// Tells the owner `kind` if the route's policy wants notices and the
    /// limit allows one now.
    pub(super) fn notify(&self, route: &Route, kind: NoticeKind) {
        let Some(notices) = route.policy.notices().filter(|_| self.on_notice.is_some()) else {
            return;
        };
        let at = route.policy.now();
        if matches!(kind, NoticeKind::Enabled) {
            route.limiter().recovered();
        }
        if route.limiter().allow(notices, at) {
            self.tell(route, kind, at);
        }
    }

    /// The pause and the notices after an attempt of delivery `id` that
    /// ended in `outcome`, with `step` next and `health` saved.
    pub(super) fn after_attempt(
        &self,
        route: &Route,
        id: &str,
        (outcome, step): (Outcome, Step),
        health: EndpointHealth,
    ) {
        let now = route.policy.now();
        route.after_attempt(outcome, step, now);
        let Some(notices) = route.policy.notices() else {
            return;
        };
        if outcome == Outcome::Delivered {
            route.limiter().recovered();
            return;
        }
        let failing = health
            .failing_since
            .and_then(|since| route.limiter().failing(notices, since, now));
        if let Some(kind) = failing {
            self.tell(route, kind, now);
        }
        let ran_out = matches!(outcome, Outcome::Retry { .. }) && step == Step::Done(Final::Dead);
        if ran_out && notices.exhausted() {
            self.notify(route, NoticeKind::Exhausted { id: id.to_owned() });
        }
    }

    /// Tells the owner `kind`, already let through the limiter.
    fn tell(&self, route: &Route, kind: NoticeKind, at: SystemTime) {
        if let Some(hook) = &self.on_notice {
            hook(&Notice {
                endpoint: route.name.clone(),
                at,
                kind,
            });
        }
    }
}
