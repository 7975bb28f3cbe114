//! The sending side's rules, as pure functions and state machines, free of
//! I/O and clocks: retry [`Schedule`]s with jitter and the presets real
//! providers publish, what an attempt's answer means ([`classify`]), how
//! long a `Retry-After` asks to wait, the per-endpoint [`Breaker`], and
//! which addresses a webhook may never be delivered to.
//!
//! The delivery loop (signing with [`Signer`](crate::verify::Signer) on
//! every attempt, HTTP, the durable dispatcher) builds on these.

mod breaker;
mod guard;
mod outcome;
mod retry_after;
mod schedule;

pub use breaker::{Breaker, BreakerState};
pub use guard::{AddressPolicy, Forbidden, check_address, check_url};
pub use outcome::{Outcome, classify, next_wait};
pub use retry_after::{MAX_RETRY_AFTER, parse_retry_after};
pub use schedule::{Jitter, Schedule};
