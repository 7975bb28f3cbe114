//! The sending side's rules, as pure functions, state machines and plain
//! data: no I/O, no storage, no clock but the one they are handed.
//!
//! What they decide: when to try again ([`Schedule`] with jitter, and the
//! presets real providers publish), what an answer means ([`Answers`],
//! [`classify`], how long a `Retry-After` asks to wait), the one next
//! [`Step`] after an attempt and the record kept of it ([`Attempt`]), when
//! an endpoint's [`Breaker`] holds attempts back, what its owner is told
//! ([`Notices`]), how long each outcome is kept
//! ([`Retention`](super::outbox::Retention)), and the plain data these
//! decide about, which the outbox stores
//! ([`DeliveryState`](super::outbox::DeliveryState),
//! [`EndpointHealth`](super::outbox::EndpointHealth),
//! [`DisableReason`](super::outbox::DisableReason)). The [`Policy`]
//! gathers the settings.
//!
//! The rules import nothing else of the sender: the outbox stores what
//! they decide and the dispatcher acts on it.

pub(crate) mod answers;
pub(crate) mod attempt;
pub(crate) mod breaker;
pub(crate) mod notice;
pub(crate) mod policy;
pub(crate) mod presets;
pub(crate) mod retention;
pub(crate) mod retry_after;
pub(crate) mod schedule;
pub(crate) mod states;

pub use answers::{Answers, Handling, Outcome};
pub use attempt::{Attempt, AttemptError, Step, WaitReason, classify, next_wait};
pub(crate) use attempt::{first_wait, later, plan};
pub use breaker::{Breaker, BreakerState};
pub(crate) use notice::Limiter;
pub use notice::{Notice, NoticeKind, Notices};
// `EXCERPT_LEN`, `Retention` and the states the outbox stores are named
// where they are used: in `sender::transport` and `sender::outbox`.
pub use policy::{MAX_EXCERPT_LEN, Policy};
pub use retry_after::{MAX_RETRY_AFTER, parse_retry_after};
pub use schedule::{Jitter, Schedule};
pub use states::Final;
