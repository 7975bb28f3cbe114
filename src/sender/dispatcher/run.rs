//! The delivery loop: lease due deliveries across every endpoint in one
//! store call a poll, attempt each under the endpoint's breaker and
//! concurrency limit, record the attempt and the step after it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::task::JoinSet;

use super::clock::LEASE_MARGIN;
use super::health::health_change;
use super::state::{Inner, Route};
use crate::sender::OutboxError;
use crate::sender::deliver::attempt_once;
use crate::sender::metrics;
use crate::sender::outbox::{DeliveryStore, DueAcross, EndpointHealth, Taken, Wanted};
use crate::sender::rules::{Outcome, later, plan};
use crate::sender::transport::Transport;
use crate::verify::Clock as _;

impl<S: DeliveryStore, T: Transport + 'static> Inner<S, T> {
    pub(super) async fn run(self: Arc<Self>, mut stopped: watch::Receiver<bool>) {
        let mut in_flight = JoinSet::new();
        // Once the `Running` handle is dropped nothing can stop the loop,
        // and `changed` would return at once on every turn.
        let depth = self.depth_every.map(|every| {
            let inner = Arc::clone(&self);
            tokio::spawn(async move { inner.report_depth(every).await })
        });
        let mut detached = false;
        let mut refreshed: Option<tokio::time::Instant> = None;
        while !*stopped.borrow() {
            if refreshed.is_none_or(|at| at.elapsed() >= self.endpoint_refresh) {
                if let Err(error) = self.refresh_endpoints().await {
                    tracing::warn!(%error, "cannot read the endpoints saved in the store");
                }
                refreshed = Some(tokio::time::Instant::now());
            }
            let mut routes = self.all_routes();
            if let Err(unsynced) = self.clock.sync(&self.store).await {
                // Leasing on a guessed time could take a delivery another
                // dispatcher holds: only routes with clocks of their own go on.
                tracing::warn!(error = %unsynced, "leasing nothing on the store's clock");
                routes.retain(|route| !route.on_store_clock);
            }
            self.take(&routes, &mut in_flight).await;
            while in_flight.try_join_next().is_some() {}
            tokio::select! {
                () = tokio::time::sleep(self.poll_interval) => {}
                () = self.wake.notified() => {}
                changed = stopped.changed(), if !detached => detached = changed.is_err(),
            }
        }
        while in_flight.join_next().await.is_some() {}
        if let Some(depth) = depth {
            depth.abort();
        }
    }

    /// Sets the outbox depth gauges of every endpoint, `every` so often.
    async fn report_depth(&self, every: Duration) {
        loop {
            let names = self.route_names();
            if let Err(unsynced) = self.clock.sync(&self.store).await {
                tracing::warn!(error = %unsynced, "cannot count deliveries");
                tokio::time::sleep(every).await;
                continue;
            }
            let now = self.clock.now();
            for name in names {
                match self.store.counts(&name, now).await {
                    Ok(counts) => metrics::depth(&name, counts),
                    Err(error) => {
                        tracing::warn!(endpoint = %name, %error, "cannot count deliveries")
                    }
                }
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Leases, in one store call across every endpoint, as many of each
    /// route's due deliveries as it has free slots, and starts an attempt
    /// for each. The take reports each endpoint's health too (another
    /// dispatcher may have disabled or enabled it) and leases nothing of a
    /// disabled one. A route whose breaker is open is left out.
    async fn take(self: &Arc<Self>, routes: &[Arc<Route>], in_flight: &mut JoinSet<()>) {
        let mut wanted = Vec::with_capacity(routes.len());
        let mut asked = HashMap::with_capacity(routes.len());
        let mut probes = Vec::new();
        for route in routes {
            if route.endpoint.breaker_open() {
                continue;
            }
            let mut free = route.limit.available_permits();
            match route.pause_allows(route.policy.now()) {
                Some(0) => continue,
                Some(probe) => {
                    free = free.min(probe);
                    probes.push(Arc::clone(route));
                }
                None => {}
            }
            wanted.push(Wanted::new(&route.name, free, route.policy.now()));
            asked.insert(route.name.as_str(), (route, route.seen().writes));
        }
        let limit = wanted.iter().map(|want| want.limit).sum();
        let due = self.lease_due(&wanted, limit).await;
        for probe in probes {
            let sent = due
                .iter()
                .flat_map(|due| &due.taken)
                .any(|taken| taken.endpoint == probe.name);
            if !sent {
                probe.probe_unused();
            }
        }
        let Some(due) = due else {
            return;
        };
        self.spawn_due(due, &asked, in_flight).await;
    }

    /// Leases due deliveries as `wanted`, `limit` in all; `None` if none
    /// were wanted or the store failed.
    async fn lease_due(&self, wanted: &[Wanted], limit: usize) -> Option<DueAcross> {
        if limit == 0 {
            // Every slot is busy: the attempts' `finish`es report health.
            return None;
        }
        // The store keeps the lease a little longer than the dispatcher
        // holds it: dispatchers' readings of the store's clock may each be
        // off by a little (see `clock::LEASE_MARGIN`).
        let lease = self.lease + LEASE_MARGIN;
        match self.store.take_due_across(wanted, limit, lease).await {
            Ok(due) => Some(due),
            Err(error) => {
                tracing::warn!(%error, "cannot take due deliveries");
                None
            }
        }
    }

    /// Keeps the health `due` reports of each route `asked`, and starts an
    /// attempt for each delivery leased.
    async fn spawn_due(
        self: &Arc<Self>,
        due: DueAcross,
        asked: &HashMap<&str, (&Arc<Route>, u64)>,
        in_flight: &mut JoinSet<()>,
    ) {
        let unanswered: HashSet<&str> = due.unanswered.iter().map(String::as_str).collect();
        for (name, (route, writes)) in asked {
            match due.health.get(*name) {
                Some(health) => route.saw(*writes, *health),
                // Its part of the take failed: its health is unknown.
                None if unanswered.contains(name) => {}
                // Not reported: enabled.
                None => {
                    let seen = route.seen().health;
                    if seen.disabled.is_some() {
                        let enabled = EndpointHealth {
                            disabled: None,
                            ..seen
                        };
                        route.saw(*writes, enabled);
                    }
                }
            }
        }
        for delivery in due.taken {
            let Some((route, _)) = asked.get(delivery.endpoint.as_str()) else {
                continue;
            };
            let Ok(permit) = Arc::clone(&route.limit).try_acquire_owned() else {
                // Only this loop acquires, so a slot counted free is free;
                // a store that leased more than asked gets it back.
                let due_at = delivery.due_at;
                self.put_back(&route.name, &delivery, due_at).await;
                continue;
            };
            let (inner, route) = (Arc::clone(self), Arc::clone(route));
            in_flight.spawn(async move { inner.attempt(&route, delivery, permit).await });
        }
    }

    /// Ends `taken`'s lease unattempted, due at `due`. A lease lost
    /// meanwhile needs nothing: the dispatcher that took it decides.
    async fn put_back(&self, endpoint: &str, taken: &Taken, due: SystemTime) {
        match self.store.put_back(taken, due).await {
            Ok(()) | Err(OutboxError::LeaseLost) => {}
            Err(error) => {
                tracing::warn!(endpoint, id = %taken.id, %error, "cannot put a delivery back");
            }
        }
    }

    async fn attempt(&self, route: &Route, taken: Taken, permit: OwnedSemaphorePermit) {
        let pass = match route.endpoint.try_breaker() {
            Ok(pass) => pass,
            Err(wait) => {
                metrics::held_by_breaker(&route.name);
                metrics::breaker(&route.name, route.endpoint.breaker_state());
                route.probe_unused();
                let due = later(route.policy.now(), wait);
                self.put_back(&route.name, &taken, due).await;
                return;
            }
        };
        let now = route.policy.now();
        let held = now.duration_since(taken.due_at).unwrap_or_default();
        let span = metrics::attempt_span(&route.name, &taken.id, taken.attempts + 1);
        let tried = tracing::Instrument::instrument(
            attempt_once(
                &self.transport,
                &route.endpoint,
                pass,
                &route.policy,
                (&taken.id, &taken.body, taken.trace),
                taken.attempts + 1,
                (taken.waited, taken.reason, held),
            ),
            span.clone(),
        )
        .await;
        metrics::breaker(&route.name, route.endpoint.breaker_state());
        let status = tried.attempt.result.as_ref().ok().copied();
        metrics::attempt(
            &span,
            &route.name,
            tried.outcome,
            status,
            tried.attempt.duration,
        );
        // From `send` to the 2xx, on the store's clock; a replayed delivery
        // (its tries started over) is not counted.
        if tried.outcome == Outcome::Delivered && taken.tries == taken.attempts {
            let since_sent = self.clock.now().duration_since(taken.enqueued_at);
            metrics::delivered(&route.name, since_sent.unwrap_or_default());
        }
        let step = plan(
            &route.policy,
            taken.tries + 1,
            tried.outcome,
            fastrand::f64(),
            route.policy.now(),
        );
        // A test delivery shows nothing of the endpoint's health.
        let test = route.policy.is_test(&taken.id);
        let change = health_change(tried.attempt.sent_at, tried.outcome).filter(|_| !test);
        match self
            .store
            .finish(&taken, &tried.attempt, step, change)
            .await
        {
            Ok(health) if test => route.set_health(health),
            Ok(health) => {
                self.after_attempt(route, &taken.id, (tried.outcome, step), health);
                self.track_health(route, tried.attempt.sent_at, tried.outcome, health)
                    .await;
            }
            Err(OutboxError::LeaseLost) => tracing::warn!(
                endpoint = %route.name, id = %taken.id,
                "lease lost during an attempt: another dispatcher took the delivery"
            ),
            // The lease runs out and the delivery is attempted again.
            Err(error) => tracing::warn!(
                endpoint = %route.name, id = %taken.id, %error,
                "cannot record an attempt; it will be retried when its lease ends"
            ),
        }
        // A slot is free: look for more due deliveries now.
        drop(permit);
        self.wake.notify_one();
    }
}
