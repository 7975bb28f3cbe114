//! actix-web extractors that verify webhooks on the raw body and accept
//! each event once.
//!
//! Configure a [`WebhookConfig`] with `App::app_data` (or `web::Data`), the
//! way `web::JsonConfig` is configured, then take one of:
//!
//! - [`Webhook<T>`]: verified, JSON body deserialized into `T`;
//! - [`RawWebhook`]: verified, raw body and metadata;
//! - [`InboxWebhook`]: verified, then claimed and enqueued in one atomic
//!   step; return it to answer 202 (new) or 200 (duplicate);
//! - [`LeasedWebhook`]: verified and leased for an inline handler; call
//!   [`complete`](LeasedWebhook::complete) on success, and the lease is
//!   released otherwise.
//!
//! Answers match the tower layer's: 400 for anything that fails
//! verification, 413 over the body limit, 409 with `Retry-After` while
//! another delivery holds the lease, 503 when the store fails.
//!
//! ```no_run
//! use actix_web::{App, HttpServer, post};
//! use hooklatch::dedup::SqliteInbox;
//! use hooklatch::verify::{Scheme, Verifier};
//! use hooklatch_actix::{InboxWebhook, WebhookConfig};
//!
//! #[post("/webhooks")]
//! async fn receive(webhook: InboxWebhook) -> InboxWebhook {
//!     webhook
//! }
//!
//! #[actix_web::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let verifier = Verifier::builder(Scheme::standard_webhooks())
//!         .with_secret(&std::env::var("HOOKLATCH_SECRET")?)?
//!         .build()?;
//!     let config = WebhookConfig::new(verifier)
//!         .with_inbox(SqliteInbox::open("webhooks.db").await?, "acme")?;
//!     HttpServer::new(move || App::new().app_data(config.clone()).service(receive))
//!         .bind("127.0.0.1:3000")?
//!         .run()
//!         .await?;
//!     Ok(())
//! }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod error;
mod extract;
mod headers;

pub use config::WebhookConfig;
pub use error::WebhookError;
pub use extract::{InboxWebhook, LeasedWebhook, RawWebhook, Webhook};
pub use headers::ActixHeaders;
/// The core crate, with what this crate's features turn on in it (the
/// SQLite store by default; `postgres`, `redis`, `sender-http`, ... pass
/// through): `hooklatch_actix::hooklatch::dedup::SqliteInbox`. To write
/// `hooklatch::...`, add `hooklatch` as well (`cargo add hooklatch`); cargo
/// builds one copy with the features of both lines.
pub use hooklatch;
