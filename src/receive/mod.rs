//! The receiving side's glue, the same for every framework: the verified
//! event and the key it is claimed by, the rejections and their HTTP
//! answers, the bounded and timed body read, and the accept and claim steps.
//! `hooklatch-tower` (axum and any tower stack) and `hooklatch-actix` are
//! thin adapters over it.
//!
//! A receiver, whatever its framework, does this ([`Receiver`] does steps 1
//! and 2):
//!
//! 1. refuse a declared Content-Length over the limit
//!    ([`check_declared_length`], 413), then read the body through the
//!    limit and a deadline ([`read_limited`], 413 / 408);
//! 2. verify it ([`Verifier`](crate::verify::Verifier), 400) and build the
//!    [`VerifiedEvent`] with its claim key ([`EventKey`](crate::verify::EventKey));
//! 3. accept it into an [`Inbox`](crate::dedup::Inbox) (202 new, 200
//!    duplicate, 503 store down), or claim it in a
//!    [`LeaseStore`](crate::dedup::LeaseStore) (409 while another delivery
//!    holds it, 200 when done), run the handler, and settle the lease.
//!
//! Step 3 is the adapters' (`WebhookLayer`, the actix extractors). Their
//! shared steps live in a module hidden from these docs, `receive::adapter`:
//! it follows the adapters and may change in any release.
//!
//! With the `metrics` feature each request is counted
//! (`hooklatch_requests_total`) and timed in two histograms,
//! `hooklatch_verify_duration_seconds` and
//! `hooklatch_store_duration_seconds`. Give the exporter buckets for them:
//! `metrics-exporter-prometheus` without buckets writes summaries, whose
//! quantiles Prometheus cannot add up across instances. hooklatch-tower's
//! `axum_receiver` example sets them for every name ending in
//! `_duration_seconds` (`PrometheusBuilder::set_buckets_for_metric` with
//! `Matcher::Suffix`), from 50 µs to 10 s.

mod body;
mod event;
mod handshake;
mod metrics;
mod provider;
mod receiver;
mod rejection;
mod steps;
mod tenant;

pub use body::{DEFAULT_BODY_TIMEOUT, check_declared_length, read_limited};
pub use event::VerifiedEvent;
pub use handshake::{Handshake, HandshakeAnswer};
pub use metrics::report_inbox_depth;
pub use receiver::{Received, Receiver};
pub use rejection::Rejection;
pub use tenant::{NameFn, StaticTenants, Tenant, TenantError, TenantKey, TenantSource, Tenants};

/// The steps the framework adapters share: accept or claim a verified
/// event, settle its lease, and the span a request runs in. For
/// `hooklatch-tower` and `hooklatch-actix`; it follows them and may change
/// in any release, which is why each adapter requires the exact version of
/// `hooklatch` it was released with (`=0.1.0`).
#[doc(hidden)]
pub mod adapter {
    pub use super::metrics::request_span;
    pub use super::steps::{COMPLETE_TRIES, Claimed, accept, claim, complete_with_retries, settle};
}
