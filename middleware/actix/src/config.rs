//! [`WebhookConfig`]: looked up like `web::JsonConfig`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpRequest, web};
use hooklatch::dedup::{Acceptance, DedupError, Inbox, Lease, LeaseStore, validate_namespace};
use hooklatch::receive::{self, Claimed, Rejection, VerifiedEvent};
use hooklatch::verify::EventKey;
use hooklatch::verify::Verifier;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The stores behind one object-safe interface, so one config type serves
/// every store. Each step is the core's (`hooklatch::receive`), as in the
/// tower layer.
pub(crate) trait DynInbox: Send + Sync {
    fn accept<'a>(
        &'a self,
        namespace: &'a str,
        event: &'a VerifiedEvent,
    ) -> BoxFuture<'a, Result<Acceptance, Rejection>>;
}

impl<S: Inbox> DynInbox for S {
    fn accept<'a>(
        &'a self,
        namespace: &'a str,
        event: &'a VerifiedEvent,
    ) -> BoxFuture<'a, Result<Acceptance, Rejection>> {
        Box::pin(receive::accept(self, namespace, event))
    }
}

pub(crate) trait DynLease: Send + Sync {
    fn claim<'a>(
        &'a self,
        namespace: &'a str,
        event: &'a VerifiedEvent,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Claimed, Rejection>>;
    fn complete<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), DedupError>>;
    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), DedupError>>;
    fn extend_lease<'a>(
        &'a self,
        lease: &'a Lease,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<(), DedupError>>;
}

impl<S: LeaseStore> DynLease for S {
    fn claim<'a>(
        &'a self,
        namespace: &'a str,
        event: &'a VerifiedEvent,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Claimed, Rejection>> {
        Box::pin(receive::claim(self, namespace, event, lease_for))
    }

    fn complete<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), DedupError>> {
        Box::pin(LeaseStore::complete(self, lease))
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), DedupError>> {
        Box::pin(LeaseStore::release(self, lease))
    }

    fn extend_lease<'a>(
        &'a self,
        lease: &'a Lease,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<(), DedupError>> {
        Box::pin(LeaseStore::extend_lease(self, lease, lease_for))
    }
}

/// Configuration for the extractors, found the way `web::JsonConfig` is:
/// `app_data::<WebhookConfig>()`, then `app_data::<web::Data<WebhookConfig>>()`;
/// without either, extractors answer 500 (not configured).
///
/// ```
/// use actix_web::{App, web};
/// use hooklatch::dedup::MemoryStore;
/// use hooklatch::verify::{Scheme, Verifier};
/// use hooklatch_actix::WebhookConfig;
///
/// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
/// let config = WebhookConfig::new(verifier)
///     .with_body_limit(256 * 1024)
///     .with_inbox(MemoryStore::new(), "github")?;
/// let app = App::new().app_data(config);
/// # let _ = app;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct WebhookConfig {
    pub(crate) verifier: Verifier,
    pub(crate) body_limit: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) key: EventKey,
    pub(crate) inbox: Option<(Arc<dyn DynInbox>, String)>,
    pub(crate) lease: Option<(Arc<dyn DynLease>, String, Duration)>,
    pub(crate) respond: Option<crate::error::RespondFn>,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("verifier", &self.verifier)
            .field("body_limit", &self.body_limit)
            .field("key", &self.key)
            .field("inbox", &self.inbox.as_ref().map(|(_, ns)| ns))
            .field("lease", &self.lease.as_ref().map(|(_, ns, d)| (ns, d)))
            .finish()
    }
}

impl WebhookConfig {
    /// Verifies with `verifier`; the body limit is the verifier's (1 MiB
    /// by default).
    pub fn new(verifier: Verifier) -> Self {
        Self {
            body_limit: verifier.max_body_len(),
            body_timeout: receive::DEFAULT_BODY_TIMEOUT,
            verifier,
            key: EventKey::default(),
            inbox: None,
            lease: None,
            respond: None,
        }
    }

    /// Reads at most `limit` bytes of body (413 beyond).
    #[must_use]
    pub fn with_body_limit(mut self, limit: usize) -> Self {
        self.body_limit = limit;
        self
    }

    /// How long the whole body may take to arrive; a slower request is
    /// answered 408. Defaults to 10 seconds.
    #[must_use]
    pub fn with_body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Answers rejections with `respond`'s response wherever it returns one
    /// (a JSON problem document, say); `None` keeps the plain-text default.
    ///
    /// ```
    /// use actix_web::HttpResponse;
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_actix::WebhookConfig;
    ///
    /// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
    /// let config = WebhookConfig::new(verifier).with_rejection_response(|rejection| {
    ///     let status = actix_web::http::StatusCode::from_u16(rejection.status().as_u16()).ok()?;
    ///     Some(HttpResponse::build(status).json(serde_json::json!({ "error": rejection.body_text() })))
    /// });
    /// # let _ = config;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_rejection_response(
        mut self,
        respond: impl Fn(&Rejection) -> Option<actix_web::HttpResponse> + Send + Sync + 'static,
    ) -> Self {
        self.respond = Some(Arc::new(respond));
        self
    }

    /// Claims events by `key`. Defaults to [`EventKey::Signed`]: the
    /// scheme's signed id, Stripe's body `id`, or else a digest of what the
    /// signature covers.
    #[must_use]
    pub fn with_event_key(mut self, key: EventKey) -> Self {
        self.key = key;
        self
    }

    /// The store [`InboxWebhook`](crate::InboxWebhook) accepts events into.
    pub fn with_inbox<S: Inbox + 'static>(
        mut self,
        store: S,
        namespace: &str,
    ) -> Result<Self, DedupError> {
        validate_namespace(namespace)?;
        self.inbox = Some((Arc::new(store), namespace.to_owned()));
        Ok(self)
    }

    /// The store [`LeasedWebhook`](crate::LeasedWebhook) claims leases of
    /// `lease_for` in.
    pub fn with_lease<S: LeaseStore + 'static>(
        mut self,
        store: S,
        namespace: &str,
        lease_for: Duration,
    ) -> Result<Self, DedupError> {
        validate_namespace(namespace)?;
        self.lease = Some((Arc::new(store), namespace.to_owned(), lease_for));
        Ok(self)
    }

    pub(crate) fn from_request(request: &HttpRequest) -> Option<&Self> {
        request.app_data::<Self>().or_else(|| {
            request
                .app_data::<web::Data<Self>>()
                .map(|data| data.get_ref())
        })
    }
}
