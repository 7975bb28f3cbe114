//! Endpoints saved in the store: saving, removing, and each dispatcher's
//! refresh of its routes from the store's [`EndpointRegistry`].
//!
//! [`EndpointRegistry`]: crate::sender::outbox::EndpointRegistry

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Semaphore;

use super::clock::StoreClock;
use super::state::{Inner, Origin, Route, Seen};
use super::{DispatchError, Dispatcher};
use crate::sender::OutboxError;
use crate::sender::endpoint::Endpoint;
use crate::sender::endpoint_config::EndpointConfig;
use crate::sender::outbox::{DeliveryStore, EndpointHealth};
use crate::sender::rules::Policy;
use crate::sender::transport::Transport;
use crate::verify::Clock;

impl Route {
    pub(super) fn new(
        name: &str,
        endpoint: Endpoint,
        policy: Policy,
        health: EndpointHealth,
        origin: Origin,
    ) -> Self {
        Self {
            name: name.to_owned(),
            endpoint: endpoint.with_breaker(policy.breaker().clone()),
            limit: Arc::new(Semaphore::new(policy.concurrency())),
            policy,
            on_store_clock: false,
            health: Mutex::new(Seen { health, writes: 0 }),
            pause: Mutex::default(),
            notices: Mutex::default(),
            origin,
        }
    }

    /// This route with its policy reading the dispatcher's store-synced
    /// `clock`, unless the policy has a clock of its own.
    pub(super) fn on_clock(mut self, clock: &Arc<StoreClock>) -> Self {
        let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
        self.on_store_clock = !self.policy.has_clock();
        self.policy = self.policy.or_clock(&clock);
        self
    }
}

impl<S: DeliveryStore, T: Transport + 'static> Dispatcher<S, T> {
    /// Saves endpoint `name` in the store, adding or replacing it, where
    /// every dispatcher on the store finds it within its
    /// [refresh interval](Self::with_endpoint_refresh); this one sends with
    /// it at once. Same name rules as
    /// [`add_endpoint`](Self::add_endpoint), and the policy's attempt
    /// timeout must be shorter than the lease.
    ///
    /// A replaced endpoint starts with a new breaker and concurrency limit
    /// in each dispatcher; its deliveries and saved health stay.
    ///
    /// ```
    /// use std::time::Duration;
    /// use hooklatch::sender::{Dispatcher, EndpointConfig, MemoryOutbox, Policy};
    /// use hooklatch::sender::transport::{Response, transport_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryOutbox::new();
    /// let ok = || transport_fn(|_url, _headers, _body| async { Ok(Response::new(204)) });
    /// let config = EndpointConfig::new(
    ///     "https://example.com/hooks",
    ///     "standard",
    ///     ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    /// )?
    /// .with_policy(Policy::svix());
    /// Dispatcher::new(store.clone(), ok()).save_endpoint("orders", &config).await?;
    ///
    /// // Another dispatcher on the same store (another process, say) finds it.
    /// let other = Dispatcher::new(store, ok());
    /// assert!(other.send("orders", "msg_1", b"{}").await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn save_endpoint(
        &self,
        name: &str,
        config: &EndpointConfig,
    ) -> Result<(), DispatchError> {
        crate::sender::outbox::validate_endpoint_name(name)?;
        self.check_lease(config.policy())?;
        let endpoint = config.endpoint()?;
        let json = config.to_json();
        self.inner.store.save_endpoint(name, &json).await?;
        let health = self.inner.store.health(name).await?;
        self.inner.install(name, config, endpoint, health, json);
        Ok(())
    }

    /// Removes endpoint `name` from the store, and from this dispatcher at
    /// once; every other dispatcher drops it within its refresh interval.
    /// Its deliveries stay in the store, and go out again if an endpoint of
    /// that name is saved later. Returns false if none was saved.
    pub async fn remove_endpoint(&self, name: &str) -> Result<bool, DispatchError> {
        let removed = self.inner.store.remove_endpoint(name).await?;
        self.inner
            .routes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|named, route| named != name || matches!(route.origin, Origin::Added));
        Ok(removed)
    }

    /// Reads the endpoints saved in the store now, rather than at the next
    /// refresh. It reads one number when nothing changed.
    pub async fn refresh_endpoints(&self) -> Result<(), DispatchError> {
        Ok(self.inner.refresh_endpoints().await?)
    }

    /// The endpoints this dispatcher sends to now, by name: those added to
    /// it and those saved in the store as of its last refresh.
    pub fn endpoints(&self) -> Vec<String> {
        let mut names = self.inner.route_names();
        names.sort();
        names
    }

    pub(super) fn check_lease(&self, policy: &Policy) -> Result<(), DispatchError> {
        if policy.attempt_timeout() >= self.inner.lease {
            return Err(DispatchError::LeaseTooShort {
                lease: self.inner.lease,
                attempt_timeout: policy.attempt_timeout(),
            });
        }
        Ok(())
    }
}

impl<S: DeliveryStore, T> Inner<S, T> {
    fn install(
        &self,
        name: &str,
        config: &EndpointConfig,
        endpoint: Endpoint,
        health: EndpointHealth,
        json: String,
    ) {
        let route = Route::new(
            name,
            endpoint,
            config.policy().clone(),
            health,
            Origin::Saved(json),
        )
        .on_clock(&self.clock);
        self.routes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), Arc::new(route));
        // A refresh that ran while this save was under way may have seen a
        // newer version: the next one compares every endpoint again.
        *self.seen_version() = None;
    }

    /// Brings the saved routes in line with the store's registry, if its
    /// version moved since the last refresh: new and changed endpoints get
    /// a new route, removed ones lose theirs, and unchanged ones keep
    /// their breaker and in-flight count. Endpoints added with
    /// `add_endpoint` are this process's own and left alone.
    pub(super) async fn refresh_endpoints(&self) -> Result<(), OutboxError> {
        let version = self.store.endpoints_version().await?;
        if *self.seen_version() == Some(version) {
            return Ok(());
        }
        let saved = self.store.saved_endpoints().await?;
        let current: HashMap<String, Arc<Route>> = self
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut fresh = HashMap::new();
        let mut unsendable = Vec::new();
        for (name, json) in &saved.endpoints {
            match current.get(name).map(|route| &route.origin) {
                Some(Origin::Added) => continue,
                Some(Origin::Saved(seen)) if seen == json => continue,
                _ => {}
            }
            match self.route_from(name, json) {
                Ok(route) => {
                    fresh.insert(name.clone(), Arc::new(route));
                }
                // A message signature this build cannot make: sending as
                // before would send what the receiver now requires unsigned.
                Err(DispatchError::InvalidEndpoint(
                    error @ crate::sender::EndpointConfigError::MessageKey(_),
                )) => {
                    tracing::warn!(
                        endpoint = %name, %error,
                        "cannot sign as the saved endpoint asks; not sending to it"
                    );
                    unsendable.push(name.clone());
                }
                Err(error) => tracing::warn!(
                    endpoint = %name, %error,
                    "cannot send with a saved endpoint's configuration; keeping what this dispatcher had"
                ),
            }
        }
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        routes.retain(|name, route| {
            matches!(route.origin, Origin::Added)
                || (saved.endpoints.contains_key(name) && !unsendable.contains(name))
        });
        routes.extend(fresh);
        *self.seen_version() = Some(saved.version);
        Ok(())
    }

    fn route_from(&self, name: &str, json: &str) -> Result<Route, DispatchError> {
        let config = EndpointConfig::from_json(json)?;
        let policy = config.policy();
        if policy.attempt_timeout() >= self.lease {
            return Err(DispatchError::LeaseTooShort {
                lease: self.lease,
                attempt_timeout: policy.attempt_timeout(),
            });
        }
        let endpoint = config.endpoint()?;
        // Health comes with the next poll's take.
        let health = EndpointHealth::default();
        let origin = Origin::Saved(json.to_owned());
        Ok(Route::new(name, endpoint, policy.clone(), health, origin).on_clock(&self.clock))
    }

    /// Every route this dispatcher has now.
    pub(super) fn all_routes(&self) -> Vec<Arc<Route>> {
        self.routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    pub(super) fn route_names(&self) -> Vec<String> {
        self.routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    fn seen_version(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.registry_version
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
