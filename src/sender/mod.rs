//! The sending side's rules, as pure functions: how long a `Retry-After`
//! asks to wait, and which addresses a webhook may never be delivered to.
//!
//! The delivery loop (signing with [`Signer`](crate::verify::Signer),
//! retries with jitter, the circuit breaker) builds on these.

mod guard;
mod retry_after;

pub use guard::{AddressPolicy, Forbidden, check_address, check_url};
pub use retry_after::{MAX_RETRY_AFTER, parse_retry_after};
