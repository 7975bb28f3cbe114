//! The sending side's rules, as pure functions and state machines, free of
//! I/O and clocks: retry [`Schedule`]s with jitter and the presets real
//! providers publish, what an attempt's answer means ([`classify`]), how
//! long a `Retry-After` asks to wait, the per-endpoint [`Breaker`], and
//! which addresses a webhook may never be delivered to.
//!
//! [`deliver`] runs one delivery over any HTTP [`Transport`]: each attempt
//! signed anew with [`Signer`](crate::verify::Signer) (same id, fresh
//! timestamp), waits from the schedule, `Retry-After` and the breaker, and a
//! record of every attempt. A [`Dispatcher`] runs deliveries in the
//! background from a [`DeliveryStore`] (SQLite, Postgres or Redis, so a
//! restart loses nothing), with a concurrency limit per endpoint (in each
//! dispatcher) and auto-disable (shared by every dispatcher on the store).
//!
//! One delivery's life, file by file: the [`Policy`] (`policy.rs`) says
//! when and how long; each attempt goes out over a [`Transport`]
//! (`transport/`) to an [`Endpoint`] past its breaker (`endpoint.rs`); the
//! pure rules in `attempt.rs` classify the answer ([`Outcome`]) and plan
//! the one next [`Step`] (retry at a due time, or [`Final`]); `deliver.rs`
//! loops over that in one task, while `dispatcher/` leases, attempts and
//! records each step in an outbox (`outbox/`), where a [`DeliveryState`]
//! is what a [`Step`] leaves behind.

mod answers;
mod attempt;
mod breaker;
mod deliver;
mod dispatcher;
mod endpoint;
mod endpoint_config;
mod guard;
mod metrics;
mod notice;
pub(crate) mod outbox;
mod policy;
mod presets;
mod retry_after;
mod schedule;
mod transport;

pub use answers::{Answers, Handling};
pub use attempt::{Attempt, AttemptError, Final, Outcome, Step, WaitReason, classify, next_wait};
pub use breaker::{Breaker, BreakerState};
pub use deliver::{DeliveryRecord, deliver, deliver_observed};
pub use dispatcher::{Disabled, DispatchError, Dispatcher, Running};
pub use endpoint::Endpoint;
pub use endpoint_config::{EndpointConfig, EndpointConfigError};
pub use guard::{AddressPolicy, Forbidden, IpNet, Url, check_address, check_url};
pub use notice::{Notice, NoticeKind, Notices};
#[cfg(feature = "postgres")]
pub use outbox::PostgresDeliveries;
#[cfg(feature = "redis")]
pub use outbox::RedisDeliveries;
#[cfg(feature = "sqlite")]
pub use outbox::SqliteDeliveries;
pub use outbox::{
    DeliveryCounts, DeliveryState, DeliveryStore, DisableReason, Due, DueAcross, EndpointHealth,
    EndpointRegistry, HealthChange, Keeping, Keyed, MemoryDeliveries, OUTBOX_PURGE_BATCH,
    OutboxView, RecentAttempt, Retention, SavedEndpoints, SendKey, StoredDelivery, Taken, Wanted,
};
pub use policy::{MAX_EXCERPT_LEN, Policy};
pub use retry_after::{MAX_RETRY_AFTER, parse_retry_after};
pub use schedule::{Jitter, Schedule};
pub use transport::{
    BoxError, EXCERPT_LEN, Response, Transport, TransportError, TransportFn, transport_fn,
};
#[cfg(feature = "sender-http")]
pub use transport::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, HttpTransport, HttpTransportBuilder,
    TransportConfigError,
};
