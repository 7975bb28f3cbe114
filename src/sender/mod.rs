//! The sending side, in three layers, each folder importing only the ones
//! below it:
//!
//! - `rules/` decides, as pure functions and plain data with no I/O and no
//!   clock but the one it is handed: retry [`Schedule`]s with jitter and
//!   the presets real providers publish, what an answer means
//!   ([`classify`], [`Answers`], `Retry-After`), the one next [`Step`]
//!   after an attempt and its record ([`Attempt`]), the per-endpoint
//!   [`Breaker`], the owner's [`Notices`], how long each outcome is kept
//!   ([`Retention`]), all gathered in a [`Policy`];
//! - [`outbox`] stores what the rules decide: a
//!   [`DeliveryStore`](outbox::DeliveryStore) in memory, SQLite, Postgres
//!   or Redis, so that a restart loses nothing. The stores themselves
//!   (`SqliteOutbox`, [`AnyOutbox`], ...) are also here; the module holds
//!   the contract a backend implements and what an operator reads;
//! - `dispatcher/` drives both: a [`Dispatcher`] leases due deliveries from
//!   the store, attempts each over a [`Transport`] to an [`Endpoint`] past
//!   its breaker, and records the step the rules plan, with a concurrency
//!   limit per endpoint (in each dispatcher) and auto-disable (shared by
//!   every dispatcher on the store).
//!
//! Beside the dispatcher, [`deliver`] runs one delivery in one task with no
//! store: each attempt signed anew with [`Signer`](crate::verify::Signer)
//! (same id, fresh timestamp), waits from the schedule, `Retry-After` and
//! the breaker, and a record of every attempt. The transport
//! (`transport/`) and the SSRF guard (`guard/`, which addresses a webhook
//! may never be delivered to) are the I/O the dispatcher and `deliver` use.

mod deliver;
mod dispatcher;
mod endpoint;
mod endpoint_config;
mod guard;
mod metrics;
pub mod outbox;
pub(crate) mod rules;
mod transport;

pub use deliver::{DeliveryRecord, deliver, deliver_observed};
pub use dispatcher::{Disabled, DispatchError, Dispatcher, Running};
pub use endpoint::Endpoint;
pub use endpoint_config::{EndpointConfig, EndpointConfigError};
pub use guard::{AddressPolicy, Forbidden, IpNet, Url, check_address, check_url, mask_url};
#[cfg(feature = "postgres")]
pub use outbox::PostgresOutbox;
#[cfg(feature = "redis")]
pub use outbox::RedisOutbox;
#[cfg(feature = "sqlite")]
pub use outbox::SqliteOutbox;
pub use outbox::{
    AnyOutbox, DeliveryState, DisableReason, EndpointHealth, HealthChange, Keyed, MemoryOutbox,
    OutboxError, Retention, SendKey,
};
pub use rules::{
    Answers, Attempt, AttemptError, Breaker, BreakerState, Final, Handling, Jitter,
    MAX_EXCERPT_LEN, MAX_RETRY_AFTER, Notice, NoticeKind, Notices, Outcome, Policy, Schedule, Step,
    WaitReason, classify, next_wait, parse_retry_after,
};
pub use transport::{
    BoxError, EXCERPT_LEN, Response, Transport, TransportError, TransportFn, transport_fn,
};
#[cfg(feature = "sender-http")]
pub use transport::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, HttpTransport, HttpTransportBuilder,
    TransportConfigError,
};
