//! What the outbox keeps and for how long, by each endpoint's policy: a
//! send under an idempotency key remembered for the policy's window, and
//! the purge of each outcome after the policy's retention.

use std::time::{Duration, UNIX_EPOCH};

use super::{DispatchError, Dispatcher};
use crate::sender::outbox::{Keeping, Keyed, SendKey};
use crate::sender::rules::{first_wait, later};
use crate::sender::transport::Transport;
use crate::verify::Clock as _;

impl<S: Keeping, T: Transport + 'static> Dispatcher<S, T> {
    /// Sends as [`send`](Self::send) does, under the idempotency key `key`
    /// (such as a client's `Idempotency-Key` header), remembered for the
    /// policy's [`idempotency_window`](crate::sender::Policy::idempotency_window):
    /// within it, another send with the same key to the endpoint enqueues
    /// nothing and reports the first delivery's id, whatever its own id
    /// and body; after it, the key is free again. The key is recorded with
    /// the enqueue in one atomic step, so of concurrent sends with one key,
    /// one enqueues. Without a window in the policy it is refused with
    /// [`DispatchError::NoIdempotencyWindow`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use hooklatch::sender::{Dispatcher, MemoryOutbox, Policy};
    /// use hooklatch::sender::transport::{Response, transport_fn};
    /// use hooklatch::verify::{Scheme, Signer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ok = transport_fn(|_, _, _| async { Ok(Response::new(200)) });
    /// let dispatcher = Dispatcher::new(MemoryOutbox::new(), ok);
    /// let signer = Signer::new(Scheme::standard_webhooks(), ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])?;
    /// let policy = Policy::svix().with_idempotency_window(Some(Duration::from_secs(24 * 3600)));
    /// dispatcher.add_endpoint("orders", "https://example.com/hooks", signer, policy).await?;
    ///
    /// let first = dispatcher.send_with_key("orders", "key-7", "msg_1", b"{}").await?;
    /// let again = dispatcher.send_with_key("orders", "key-7", "msg_2", b"{}").await?;
    /// assert!(first.enqueued && !again.enqueued);
    /// assert_eq!(again.id, "msg_1");
    /// assert!(dispatcher.delivery("orders", "msg_2").await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_with_key(
        &self,
        endpoint: &str,
        key: &str,
        id: &str,
        body: &[u8],
    ) -> Result<Keyed, DispatchError> {
        let route = self.find_route(endpoint).await?;
        let window = route
            .policy
            .idempotency_window()
            .ok_or_else(|| DispatchError::NoIdempotencyWindow(endpoint.to_owned()))?;
        self.check_id(&route, id)?;
        self.check_body(&route, body)?;
        let now = route.policy.now();
        let due = later(now, first_wait(&route.policy, fastrand::f64()));
        let keyed = self
            .inner
            .store
            .enqueue_keyed(endpoint, SendKey { key, now, window }, id, body, due)
            .await?;
        self.inner.wake.notify_one();
        Ok(keyed)
    }

    /// For every endpoint this dispatcher sends to, deletes the
    /// deliveries its policy's [`retention`](crate::sender::Policy::retention)
    /// no longer keeps, with their attempts
    /// ([`Keeping::purge_outcomes`](crate::sender::outbox::Keeping::purge_outcomes)),
    /// and forgets its expired idempotency keys, as of each policy's
    /// clock. Returns how many deliveries it deleted. Run it now and then
    /// (hourly, say); deliveries of endpoints no dispatcher knows are left
    /// to [`purge`](Self::purge).
    pub async fn purge_by_policy(&self) -> Result<u64, DispatchError> {
        self.inner.refresh_endpoints().await?;
        self.inner.clock.sync(&self.inner.store).await?;
        let routes = self.inner.all_routes();
        let mut purged = 0;
        for route in routes {
            let now = route.policy.now();
            let store = &self.inner.store;
            store.forget_keys(&route.name, now).await?;
            purged += store
                .purge_outcomes(&route.name, route.policy.retention(), now)
                .await?;
        }
        Ok(purged)
    }

    /// Deletes delivered and gone deliveries that ended more than
    /// `older_than` ago, with their attempts; see
    /// [`Keeping::purge`]. Run it (or [`purge_by_policy`](Self::purge_by_policy))
    /// now and then: the outbox keeps every delivery until purged.
    pub async fn purge(&self, older_than: Duration) -> Result<u64, DispatchError> {
        self.inner.clock.sync(&self.inner.store).await?;
        let now = self.inner.clock.now();
        let before = now.checked_sub(older_than).unwrap_or(UNIX_EPOCH);
        Ok(self.inner.store.purge(before).await?)
    }
}
