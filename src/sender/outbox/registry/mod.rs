//! [`EndpointRegistry`]: the endpoints every dispatcher on a store sends to,
//! kept in the store next to the deliveries.

#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;

use std::collections::BTreeMap;
use std::future::Future;

use crate::sender::OutboxError;

/// The endpoints saved in a store, as of one version.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SavedEndpoints {
    /// Changes with every save and removal.
    pub version: u64,
    /// Each endpoint's name and its configuration's JSON
    /// ([`EndpointConfig::to_json`](crate::sender::EndpointConfig::to_json)),
    /// by name.
    pub endpoints: BTreeMap<String, String>,
}

/// Endpoints kept in the store, so that every
/// [`Dispatcher`](crate::sender::Dispatcher) on it sees additions, updates
/// and removals. Every [`DeliveryStore`](super::DeliveryStore) is one.
///
/// A store keeps each endpoint's configuration as text it does not read,
/// and a version that changes with every save and removal, so that a
/// dispatcher checks one number per refresh and reads the endpoints only
/// when it moved.
pub trait EndpointRegistry: Send + Sync + 'static {
    /// Saves `config` as endpoint `name`'s, adding or replacing it, and
    /// returns the version after it.
    fn save_endpoint(
        &self,
        name: &str,
        config: &str,
    ) -> impl Future<Output = Result<u64, OutboxError>> + Send;

    /// Removes endpoint `name`; returns false, changing nothing, if there
    /// was none. Its deliveries stay in the store.
    fn remove_endpoint(&self, name: &str)
    -> impl Future<Output = Result<bool, OutboxError>> + Send;

    /// The current version: 0 before the first save.
    fn endpoints_version(&self) -> impl Future<Output = Result<u64, OutboxError>> + Send;

    /// Every saved endpoint and the version they are as of, read at once.
    fn saved_endpoints(&self) -> impl Future<Output = Result<SavedEndpoints, OutboxError>> + Send;
}

/// The registry of [`MemoryOutbox`](super::MemoryOutbox).
#[derive(Debug, Default)]
pub(crate) struct MemoryRegistry {
    saved: std::sync::Mutex<SavedEndpoints>,
}

impl MemoryRegistry {
    fn saved(&self) -> std::sync::MutexGuard<'_, SavedEndpoints> {
        self.saved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn save(&self, name: &str, config: &str) -> u64 {
        let mut saved = self.saved();
        saved.endpoints.insert(name.to_owned(), config.to_owned());
        saved.version += 1;
        saved.version
    }

    pub(crate) fn remove(&self, name: &str) -> bool {
        let mut saved = self.saved();
        let removed = saved.endpoints.remove(name).is_some();
        if removed {
            saved.version += 1;
        }
        removed
    }

    pub(crate) fn version(&self) -> u64 {
        self.saved().version
    }

    pub(crate) fn all(&self) -> SavedEndpoints {
        self.saved().clone()
    }
}
