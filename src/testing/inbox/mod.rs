//! The inbox checks: each takes what makes the store under test, makes
//! its own stores and namespaces, and panics with what broke.

mod accept;
mod stats;
mod take;

pub use accept::{
    a_retention_of_a_century_keeps_claims, accepts_once_then_reports_duplicate,
    claims_expire_after_the_retention, rejects_invalid_keys,
    sixteen_tasks_ten_thousand_ids_with_repeats_enqueue_each_once,
    sixty_four_concurrent_accepts_of_one_id_enqueue_once,
};
pub use stats::{
    stats_count_each_state_and_requeue_brings_dead_letters_back,
    stats_stay_exact_under_concurrent_accepts_takes_acks_and_nacks,
};
pub use take::{
    a_heartbeat_after_the_visibility_lapsed_is_refused, a_take_never_hands_out_one_event_twice,
    ack_many_acks_what_it_holds_and_reports_the_rest_lost,
    crashed_worker_event_comes_back_and_acked_never_does, dead_letters_after_max_attempts,
    heartbeats_keep_a_taken_event_from_other_workers, nack_redelivers_after_the_delay,
    provider_metadata_stays_with_the_event_to_the_dead_letters, takes_in_order_and_ack_removes,
};

use super::StoreUnderTest;
use crate::dedup::InboxQueue;

/// Runs every check of this module in turn, each on stores of its own:
/// what a store must do for the receiver and the worker to keep their
/// promises. Takes about 25 s (several checks wait out real delays,
/// visibility timeouts and retention on the store's clock) and needs a
/// multi-threaded tokio runtime.
///
/// ```no_run
/// # async fn run() {
/// use hooklatch::dedup::{MemoryInbox, StoreOptions};
/// use hooklatch::testing::{StoreUnderTest, inbox};
///
/// struct Memory;
///
/// impl StoreUnderTest for Memory {
///     type Store = MemoryInbox;
///
///     async fn store(&self, options: StoreOptions) -> MemoryInbox {
///         MemoryInbox::new().with_options(options)
///     }
/// }
///
/// inbox::all(&Memory).await;
/// # }
/// ```
pub async fn all<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    accepts_once_then_reports_duplicate(under).await;
    a_retention_of_a_century_keeps_claims(under).await;
    rejects_invalid_keys(under).await;
    takes_in_order_and_ack_removes(under).await;
    nack_redelivers_after_the_delay(under).await;
    dead_letters_after_max_attempts(under).await;
    provider_metadata_stays_with_the_event_to_the_dead_letters(under).await;
    stats_count_each_state_and_requeue_brings_dead_letters_back(under).await;
    stats_stay_exact_under_concurrent_accepts_takes_acks_and_nacks(under).await;
    crashed_worker_event_comes_back_and_acked_never_does(under).await;
    sixty_four_concurrent_accepts_of_one_id_enqueue_once(under).await;
    sixteen_tasks_ten_thousand_ids_with_repeats_enqueue_each_once(under).await;
    ack_many_acks_what_it_holds_and_reports_the_rest_lost(under).await;
    a_take_never_hands_out_one_event_twice(under).await;
    a_heartbeat_after_the_visibility_lapsed_is_refused(under).await;
    heartbeats_keep_a_taken_event_from_other_workers(under).await;
    claims_expire_after_the_retention(under).await;
}

/// Asserts that a take in `namespace` finds nothing ready.
async fn assert_nothing_ready<S: InboxQueue>(store: &S, namespace: &str) {
    let taken = store.take(namespace, "check", 10).await.unwrap();
    assert!(taken.is_empty(), "nothing should be ready: {taken:?}");
}
