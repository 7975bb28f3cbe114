//! The sending side. What a sending app builds is here at the top: a
//! [`Dispatcher`] over an outbox store ([`MemoryOutbox`], the SQLite,
//! Postgres or Redis one, or [`AnyOutbox`]) with a [`Policy`], sending over
//! an `HttpTransport` (with the `sender-http` feature) that an
//! [`AddressPolicy`] guards; or [`deliver`] for one delivery with no store.
//! The parts live in four modules: `rules` and `guard` import nothing else
//! of the sender, the outbox and the transport build on them, and the
//! dispatcher on all four.
//!
//! - [`rules`] decides, as pure functions and plain data with no I/O and
//!   no clock but the one it is handed: retry
//!   [`Schedule`](rules::Schedule)s with jitter and the presets real
//!   providers publish, what an answer means
//!   ([`classify`](rules::classify), [`Answers`](rules::Answers),
//!   `Retry-After`), the one next [`Step`](rules::Step) after an attempt
//!   and its record ([`Attempt`](rules::Attempt)), the per-endpoint
//!   [`Breaker`](rules::Breaker), the owner's [`Notices`](rules::Notices),
//!   how long each outcome is kept, all gathered in a [`Policy`];
//! - [`outbox`] stores what the rules decide: a
//!   [`DeliveryStore`](outbox::DeliveryStore) in memory, SQLite, Postgres
//!   or Redis, so that a restart loses nothing. It holds the contract a
//!   backend implements and what an operator reads;
//! - [`transport`] sends one attempt: the [`Transport`] trait, its
//!   [`Response`](transport::Response) and errors, and the HTTP client;
//! - [`guard`] says which addresses a webhook may never be delivered to
//!   (the SSRF guard), checked on the URL and again on every address the
//!   name resolves to.
//!
//! The dispatcher drives them all: it leases due deliveries from the
//! store, attempts each over a [`Transport`] to an [`Endpoint`] past its
//! breaker, and records the step the rules plan, with a concurrency limit
//! per endpoint (in each dispatcher) and auto-disable (shared by every
//! dispatcher on the store). [`deliver`] runs one delivery in one task with
//! no store: each attempt signed anew with
//! [`Signer`](crate::verify::Signer) (same id, fresh timestamp), waits from
//! the schedule, `Retry-After` and the breaker, and a record of every
//! attempt.

mod deliver;
mod dispatcher;
mod endpoint;
mod endpoint_config;
pub mod guard;
mod metrics;
pub mod outbox;
pub mod rules;
pub mod transport;

pub use deliver::{DeliveryRecord, deliver, deliver_observed};
pub use dispatcher::{Disabled, DispatchError, Dispatcher, Running};
pub use endpoint::Endpoint;
pub use endpoint_config::{EndpointConfig, EndpointConfigError};
pub use guard::AddressPolicy;
#[cfg(feature = "postgres")]
pub use outbox::PostgresOutbox;
#[cfg(feature = "redis")]
pub use outbox::RedisOutbox;
#[cfg(feature = "sqlite")]
pub use outbox::SqliteOutbox;
pub use outbox::{AnyOutbox, Keyed, MemoryOutbox, OutboxError, SendKey};
pub use rules::Policy;
#[cfg(feature = "sender-http")]
pub use transport::HttpTransport;
pub use transport::Transport;
