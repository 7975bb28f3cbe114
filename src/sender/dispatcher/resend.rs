//! Sending again: a redelivery under a new id, a test delivery, and the
//! replay of an endpoint's ended deliveries when it is enabled.

use super::state::Route;
use super::{DispatchError, Dispatcher};
use crate::sender::outbox::{DeliveryState, DeliveryStore};
use crate::sender::transport::Transport;

impl<S: DeliveryStore, T: Transport + 'static> Dispatcher<S, T> {
    /// Sends a test delivery: [`send`](Self::send) under the id `id`
    /// prefixed with the policy's [`test_prefix`](crate::sender::Policy::test_prefix),
    /// which it returns. A test delivery does not count towards disabling
    /// the endpoint. Without a test prefix in the policy it is refused
    /// with [`DispatchError::NoTestPrefix`].
    pub async fn send_test(
        &self,
        endpoint: &str,
        id: &str,
        body: &[u8],
    ) -> Result<String, DispatchError> {
        let route = self.find_route(endpoint).await?;
        let prefix = route
            .policy
            .test_prefix()
            .ok_or_else(|| DispatchError::NoTestPrefix(endpoint.to_owned()))?;
        let id = format!("{prefix}{id}");
        self.send(endpoint, &id, body).await?;
        Ok(id)
    }

    /// Sends the body of the dead (or gone) delivery `id` again as a new
    /// delivery `new_id`, from the start of the schedule; the old one stays
    /// as it is. [`replay`](Self::replay) retries under the same id.
    /// Returns false if there is no such delivery, it is not dead or gone,
    /// or `new_id` is taken.
    pub async fn redeliver(
        &self,
        endpoint: &str,
        id: &str,
        new_id: &str,
    ) -> Result<bool, DispatchError> {
        let ended = self
            .delivery(endpoint, id)
            .await?
            .filter(|old| matches!(old.state, DeliveryState::Dead | DeliveryState::Gone));
        match ended {
            Some(old) => self.send(endpoint, new_id, &old.body).await,
            None => Ok(false),
        }
    }

    /// Replays every delivery of the route in `state`, a batch at a time.
    pub(super) async fn replay_all(
        &self,
        route: &Route,
        state: DeliveryState,
    ) -> Result<(), DispatchError> {
        const BATCH: usize = 1_000;
        loop {
            let ids = self.inner.store.list(&route.name, state, BATCH).await?;
            let mut replayed = 0;
            for id in &ids {
                let now = route.policy.now();
                if self.inner.store.replay(&route.name, id, now).await? {
                    replayed += 1;
                }
            }
            if ids.len() < BATCH || replayed == 0 {
                return Ok(());
            }
        }
    }
}
