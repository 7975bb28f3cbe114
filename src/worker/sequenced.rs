//! Order by sequence number, built into the worker: a [`Tracker`] decides
//! for each event whether to apply it, skip it as stale, or wait for the
//! events missing before it; the worker runs one resource's events one at
//! a time and commits each applied number.

use std::sync::Arc;

use super::failure::Failure;
use super::handler::{Event, Handler, HandlerFuture};
use crate::dedup::InboxEntry;
use crate::sequence::{Observation, SequenceStore, Tracker};

/// What names an event's resource and its number in that resource's
/// sequence; `None` for an event outside any sequence.
pub(super) type SequenceOf = Arc<dyn Fn(&InboxEntry) -> Option<(String, u64)> + Send + Sync>;

/// The user's handler behind a tracker.
pub(super) struct Sequenced<S> {
    pub(super) tracker: Arc<Tracker<S>>,
    pub(super) sequence_of: SequenceOf,
    pub(super) inner: Arc<dyn Handler>,
}

impl<S: SequenceStore + 'static> Handler for Sequenced<S> {
    fn handle(&self, event: Event) -> HandlerFuture {
        let Some((resource, number)) = (self.sequence_of)(event.entry()) else {
            return self.inner.handle(event);
        };
        let (tracker, inner) = (Arc::clone(&self.tracker), Arc::clone(&self.inner));
        Box::pin(async move {
            let observed = tracker.observe(&resource, number).await.map_err(|error| {
                Failure::retry(format!("cannot read the position of {resource}: {error}"))
            })?;
            match observed {
                Observation::Apply => {}
                Observation::Stale { last } => {
                    tracing::debug!(
                        id = %event.id(),
                        %resource,
                        number,
                        last,
                        "worker: stale in its sequence; acked without running the handler"
                    );
                    return Ok(());
                }
                Observation::Gap { expected, got } => {
                    // Retried with the worker's backoff until the missing
                    // events came and were applied; dead-lettered with this
                    // reason after the last attempt.
                    return Err(Failure::retry(format!(
                        "waiting for {expected} of {resource} before {got}"
                    )));
                }
            }
            inner.handle(event).await?;
            match tracker.commit(&resource, number).await {
                Ok(true) => Ok(()),
                Ok(false) => {
                    tracing::warn!(
                        %resource,
                        number,
                        "worker: another worker committed this position first"
                    );
                    Ok(())
                }
                Err(error) => Err(Failure::retry(format!(
                    "handled, but cannot record {number} of {resource}: {error}"
                ))),
            }
        })
    }
}
