//! Verify webhook signatures on the raw bytes.
//!
//! A [`Verifier`] is built once from a [`Scheme`] and one or more secrets,
//! then checks each request: the body exactly as received, the headers
//! (anything implementing [`Headers`]) and the time. It answers with a
//! [`Verified`] event (id, timestamp, body) or a [`VerifyError`] that says
//! what was wrong.
//!
//! This module is pure: no I/O, no async, no framework types.
//!
//! | scheme | constructor | signed content | signature |
//! |---|---|---|---|
//! | Standard Webhooks | [`Scheme::standard_webhooks`] | `{id}.{timestamp}.{body}` | `v1,<base64>`, `v1a,<base64>` |
//! | Svix | [`Scheme::svix`] | same | same |
//! | Stripe | [`Scheme::stripe`] | `{t}.{body}` | `t=..,v1=<hex>` |
//! | GitHub | [`Scheme::github`] | body | `sha256=<hex>` |
//! | Shopify | [`Scheme::shopify`] | body | `<base64>` |
//! | Slack | [`Scheme::slack`] | `v0:{timestamp}:{body}` | `v0=<hex>` |
//! | Meta | [`Scheme::meta`] | body | `sha256=<hex>` |
//! | Twitch EventSub | [`Scheme::twitch`] | `{id}{timestamp}{body}` | `sha256=<hex>` |
//! | Zoom | [`Scheme::zoom`] | `v0:{timestamp}:{body}` | `v0=<hex>` |
//! | Paddle | [`Scheme::paddle`] | `{ts}:{body}` | `ts=..;h1=<hex>` |
//! | Square | [`Scheme::square`] | URL, then body | `<base64>` |
//! | Twilio | [`Scheme::twilio`] | URL, then sorted form parameters | `<base64>` (HMAC-SHA1) |
//! | Convoy | [`Scheme::convoy`] | `{t},{body}` | `t=..,v1=<hex>` |
//! | Outpost | [`Scheme::outpost`] | body | `v0=<hex>[,<hex>]` |
//! | Discord | [`Scheme::discord`] | `{timestamp}{body}` | `<hex>` (ed25519) |
//! | SendGrid | [`Scheme::sendgrid`] | `{timestamp}{body}` | `<base64 DER>` (ECDSA P-256) |
//! | X | [`Scheme::x`] | body | `sha256=<base64>` |
//! | your own | [`Scheme::custom`] | a template | hex or base64, optional prefix |
//!
//! Rules shared by every scheme:
//!
//! - every signature in the header is compared, in constant time, against
//!   every secret, so secrets can be rotated; at most [`MAX_SIGNATURES`]
//!   signatures are examined;
//! - signatures of unknown versions are skipped; only a header with none of
//!   a supported version is an error;
//! - timestamps must lie within a past and a future tolerance (default 5
//!   minutes each); the clock is injectable ([`Verifier::verify_at`],
//!   [`VerifierBuilder::with_clock`]);
//! - no input makes verification panic, and work per request is bounded by
//!   [`MAX_HEADER_LEN`], [`MAX_SIGNATURES`] and the body limit.
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use hooklatch::verify::{Scheme, Verifier, VerifyError};
//!
//! let verifier = Verifier::builder(Scheme::github())
//!     .with_secret("It's a Secret to Everybody")?
//!     .build()?;
//! let headers = [
//!     ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
//!     ("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
//! ];
//! let event = verifier.verify(&headers, b"Hello, World!")?;
//! assert_eq!(event.id(), Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"));
//!
//! let forged = verifier.verify(&headers, b"Hello, World?");
//! assert!(matches!(forged, Err(VerifyError::SignatureMismatch { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod builder;
mod clock;
mod encoding;
mod envelope;
mod error;
mod event_key;
mod form;
mod headers;
#[cfg(feature = "http-signatures")]
pub mod message;
mod scheme;
mod secrets;
mod signer;
mod template;
mod twilio;
mod validity;
mod verifier;

pub use builder::VerifierBuilder;
pub use clock::{Clock, SystemClock};
pub use encoding::Encoding;
pub use envelope::{MAX_HEADER_LEN, MAX_ID_LEN, MAX_SIGNATURES};
pub use error::{ConfigError, Malformed, VerifyError};
#[cfg(feature = "http")]
pub(crate) use event_key::json_field;
pub(crate) use event_key::key_problem;
pub use event_key::{EventKey, KeyError};
#[cfg(feature = "http")]
pub(crate) use form::{form_decode, form_pairs};
pub use headers::{HeaderKey, HeaderLookup, Headers};
pub use scheme::{MAX_COVERED_HEADERS, Scheme};
pub use signer::{SignedHeaders, Signer};
pub use validity::Validity;
pub use verifier::{
    ASYMMETRIC_CHECKS_PER_KEY, DEFAULT_MAX_BODY_LEN, DEFAULT_TOLERANCE, Verified, Verifier,
};
