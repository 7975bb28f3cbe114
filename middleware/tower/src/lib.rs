//! Webhook receivers for tower and axum: verify the signature on the raw
//! body, then accept each event once.
//!
//! [`WebhookLayer`] reads the body through a limit (413 before reading when
//! Content-Length is over it, and as soon as more arrives when it is not
//! given), verifies it with a [`hooklatch::verify::Verifier`], and then:
//!
//! - alone ([`VerifyOnly`]): passes the request on, body intact, with a
//!   [`VerifiedEvent`] in its extensions;
//! - [`with_inbox`](WebhookLayer::with_inbox): claims and enqueues the event
//!   in one atomic step, answering 202 (accepted) or 200 (duplicate)
//!   without calling the inner service; workers drain the inbox;
//! - [`with_lease`](WebhookLayer::with_lease): runs the inner service under
//!   a lease, completing the claim on 2xx and releasing it otherwise.
//!
//! | outcome | status |
//! |---|---|
//! | bad or missing signature, stale or future timestamp, malformed header | 400 |
//! | body over the limit | 413 |
//! | body still arriving after the timeout (10 s by default) | 408 |
//! | newly accepted (inbox) | 202 |
//! | duplicate | 200 |
//! | another delivery of the event in progress (lease) | 409 + `Retry-After` |
//! | claim store failed or unreachable | 503 + `Retry-After` |
//!
//! A rejection is logged at `warn` with its precise reason (never a secret
//! or the expected signature) and the [`Rejection`] is put into the
//! response extensions; the client gets a generic text. The layer's own
//! accepted and duplicate answers carry the [`VerifiedEvent`] in their
//! extensions, so an outer layer can log the event's id.
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use hooklatch::dedup::SqliteInbox;
//! use hooklatch::verify::{Scheme, Verifier};
//! use hooklatch_tower::WebhookLayer;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let verifier = Verifier::builder(Scheme::standard_webhooks())
//!     .with_secret(&std::env::var("HOOKLATCH_SECRET")?)?
//!     .build()?;
//! let inbox = SqliteInbox::open("webhooks.db").await?;
//! let app = Router::new()
//!     // In inbox mode the layer answers; the handler is never called.
//!     .route("/webhooks", post(|| async {}))
//!     .layer(WebhookLayer::new(verifier).with_inbox(inbox, "acme")?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "console")]
pub mod console;
#[cfg(feature = "axum")]
mod extract;
mod future;
mod layer;
mod mode;
mod response;
mod service;

#[cfg(feature = "axum")]
pub use extract::{RawWebhook, VerifiedBody, VerifiedJson, VerifiedRejection, Webhook};
pub use future::ResponseFuture;
/// The core crate, with what this crate's features turn on in it (the
/// SQLite store by default; `postgres`, `redis`, `sender-http`, ... pass
/// through): `hooklatch_tower::hooklatch::dedup::SqliteInbox`. To write
/// `hooklatch::...`, add `hooklatch` as well (`cargo add hooklatch`); cargo
/// builds one copy with the features of both lines.
pub use hooklatch;
pub use hooklatch::receive::{DEFAULT_BODY_TIMEOUT, Rejection, VerifiedEvent};
pub use hooklatch::verify::EventKey;
pub use layer::WebhookLayer;
#[doc(hidden)]
pub use mode::{AnswerBody, Call, Next, Ready};
pub use mode::{InboxMode, LeaseMode, Mode, NoHandler, VerifyOnly};
#[doc(hidden)]
pub use response::Answers;
pub use service::WebhookService;
