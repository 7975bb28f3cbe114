//! What a dispatcher holds: the state its tasks share ([`Inner`]), one
//! [`Route`] per endpoint, and the per-endpoint records the health and
//! trouble rules keep ([`Seen`], [`Pause`]). Plain data: the behaviour is
//! in `run.rs`, `health.rs` and `trouble.rs`, each an `impl` over these.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, Semaphore};

use super::clock::StoreClock;
use super::{DisableHook, NoticeHook};
use crate::sender::endpoint::Endpoint;
use crate::sender::outbox::EndpointHealth;
use crate::sender::rules::{Limiter, Policy};

pub(super) struct Inner<S, T> {
    pub(super) store: S,
    pub(super) transport: T,
    pub(super) routes: RwLock<HashMap<String, Arc<Route>>>,
    pub(super) poll_interval: Duration,
    pub(super) lease: Duration,
    pub(super) wake: Notify,
    pub(super) on_disable: Option<DisableHook>,
    pub(super) endpoint_refresh: Duration,
    pub(super) depth_every: Option<Duration>,
    /// The registry version the routes were last brought in line with.
    pub(super) registry_version: Mutex<Option<u64>>,
    pub(super) on_notice: Option<NoticeHook>,
    /// The clock of every route whose policy has none of its own.
    pub(super) clock: Arc<StoreClock>,
}

/// One endpoint under a dispatcher.
pub(super) struct Route {
    pub(super) name: String,
    pub(super) endpoint: Endpoint,
    pub(super) policy: Policy,
    /// Whether the policy reads the dispatcher's store clock (it has no
    /// clock of its own).
    pub(super) on_store_clock: bool,
    pub(super) limit: Arc<Semaphore>,
    /// The endpoint's health as this dispatcher last saw it in the store.
    pub(super) health: Mutex<Seen>,
    /// The pause after a failure, in this dispatcher.
    pub(super) pause: Mutex<Pause>,
    /// When this dispatcher last told the owner.
    pub(super) notices: Mutex<Limiter>,
    pub(super) origin: Origin,
}

/// Where a route came from.
pub(super) enum Origin {
    /// `add_endpoint`: this process's own.
    Added,
    /// The store's registry, with the configuration's JSON as saved.
    Saved(String),
}

/// A copy of an endpoint's saved health, and how many times an attempt or
/// an enable has set it: a poll's read that started before such a write
/// does not overwrite it with an older value.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) health: EndpointHealth,
    pub(super) writes: u64,
}

/// An endpoint paused after a failure: nothing is taken before `until`,
/// then one delivery at a time until one succeeds.
#[derive(Debug, Default)]
pub(super) struct Pause {
    pub(super) until: Option<SystemTime>,
    pub(super) probing: bool,
}
