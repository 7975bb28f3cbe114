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

mod breaker;
mod deliver;
pub(crate) mod dispatch;
mod guard;
#[cfg(feature = "sender-http")]
mod http;
mod outcome;
mod retry_after;
mod schedule;

pub use breaker::{Breaker, BreakerState};
pub use deliver::{
    Attempt, DeliveryRecord, EXCERPT_LEN, Endpoint, Final, Policy, Response, Transport, WaitReason,
    deliver, deliver_observed,
};
#[cfg(feature = "postgres")]
pub use dispatch::PostgresDeliveries;
#[cfg(feature = "redis")]
pub use dispatch::RedisDeliveries;
#[cfg(feature = "sqlite")]
pub use dispatch::SqliteDeliveries;
pub use dispatch::{
    DeliveryState, DeliveryStore, DisableReason, Disabled, DispatchError, Dispatcher,
    EndpointHealth, HealthChange, MemoryDeliveries, Running, Step, StoredDelivery, Taken,
};
pub use guard::{AddressPolicy, Forbidden, IpNet, Url, check_address, check_url};
#[cfg(feature = "sender-http")]
pub use http::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, HttpTransport, HttpTransportBuilder,
    TransportConfigError,
};
pub use outcome::{Outcome, classify, next_wait};
pub use retry_after::{MAX_RETRY_AFTER, parse_retry_after};
pub use schedule::{Jitter, Schedule};
