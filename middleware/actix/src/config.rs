//! [`WebhookConfig`]: looked up like `web::JsonConfig`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpRequest, web};
use hooklatch::dedup::{Acceptance, DedupError, Inbox, Lease, LeaseStore, validate_namespace};
use hooklatch::receive::adapter::{self as receive, Claimed};
use hooklatch::receive::{Handshake, Receiver, Rejection, Tenants, VerifiedEvent};
use hooklatch::verify::EventKey;
use hooklatch::verify::{ConfigError, Verifier};

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
        Box::pin(receive::complete_with_retries(self, lease))
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
/// use hooklatch::dedup::MemoryInbox;
/// use hooklatch::verify::{Scheme, Verifier};
/// use hooklatch_actix::WebhookConfig;
///
/// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
/// let config = WebhookConfig::new(verifier)
///     .with_body_limit(256 * 1024)
///     .with_inbox(MemoryInbox::new(), "github")?;
/// let app = App::new().app_data(config);
/// # let _ = app;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Cloning it is cheap: the settings are shared, as each request takes its
/// own handle to them.
#[derive(Clone)]
pub struct WebhookConfig {
    settings: Arc<Settings>,
}

#[derive(Clone)]
pub(crate) struct Settings {
    /// One receiver for every request; `None` with tenants.
    pub(crate) receiver: Option<Receiver>,
    pub(crate) tenants: Option<Tenants>,
    pub(crate) inbox: Option<(Arc<dyn DynInbox>, String)>,
    pub(crate) lease: Option<(Arc<dyn DynLease>, String, Duration)>,
    pub(crate) respond: Option<crate::error::RespondFn>,
    /// Whether the plain-text answer names the reason's kind.
    pub(crate) reason_in_body: bool,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let settings = &self.settings;
        f.debug_struct("WebhookConfig")
            .field("receiver", &settings.receiver)
            .field("tenants", &settings.tenants)
            .field("inbox", &settings.inbox.as_ref().map(|(_, ns)| ns))
            .field("lease", &settings.lease.as_ref().map(|(_, ns, d)| (ns, d)))
            .field("reason_in_body", &settings.reason_in_body)
            .finish()
    }
}

impl WebhookConfig {
    /// Verifies with `verifier`; the body limit is the verifier's (1 MiB
    /// by default).
    pub fn new(verifier: Verifier) -> Self {
        Self::from_receiver(Receiver::new(verifier))
    }

    /// Verifies with `receiver`, built with every setting it has (body
    /// limit and timeout, event key, kept headers, handshakes). The way to
    /// receive HTTP message signatures (`Receiver::for_message_signatures`, feature `http-signatures`).
    ///
    /// ```
    /// use hooklatch::dedup::MemoryInbox;
    /// use hooklatch::receive::Receiver;
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_actix::WebhookConfig;
    ///
    /// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
    /// let receiver = Receiver::new(verifier)
    ///     .with_body_limit(256 * 1024)
    ///     .with_kept_headers(["x-github-hook-installation-target-id"])?;
    /// let config = WebhookConfig::from_receiver(receiver).with_inbox(MemoryInbox::new(), "github")?;
    /// # let _ = config;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_receiver(receiver: Receiver) -> Self {
        Self {
            settings: Arc::new(Settings {
                receiver: Some(receiver),
                tenants: None,
                inbox: None,
                lease: None,
                respond: None,
                reason_in_body: false,
            }),
        }
    }

    fn change(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        change(Arc::make_mut(&mut self.settings));
        self
    }

    /// Verifies each request with its tenant's receiver, found by
    /// `tenants` before the body is read: an unknown tenant is answered
    /// 404, a failed lookup 503. Each tenant's events are claimed in the
    /// namespace `{namespace}~{tenant namespace}`, so the same id in two
    /// tenants is two events. The body limit, its timeout and the event
    /// key are each tenant's [`Receiver`]'s.
    ///
    /// ```
    /// use hooklatch::dedup::MemoryInbox;
    /// use hooklatch::receive::{StaticTenants, TenantKey, Tenants};
    /// use hooklatch_actix::WebhookConfig;
    ///
    /// let tenants = Tenants::new(TenantKey::LastPathSegment, StaticTenants::default());
    /// let config = WebhookConfig::for_tenants(tenants).with_inbox(MemoryInbox::new(), "hooks")?;
    /// # let _ = config;
    /// # Ok::<(), hooklatch::dedup::DedupError>(())
    /// ```
    pub fn for_tenants(tenants: Tenants) -> Self {
        Self {
            settings: Arc::new(Settings {
                receiver: None,
                tenants: Some(tenants),
                inbox: None,
                lease: None,
                respond: None,
                reason_in_body: false,
            }),
        }
    }

    /// Changes the fixed receiver; tenants' receivers are their own.
    fn change_receiver(self, change: impl FnOnce(Receiver) -> Receiver) -> Self {
        self.change(|settings| settings.receiver = settings.receiver.take().map(change))
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Changes the [`Receiver`] with `change` (to keep headers, say):
    /// every setting a receiver has. With tenants, each tenant's receiver
    /// is its own and this changes nothing.
    pub fn with_receiver<E>(
        self,
        change: impl FnOnce(Receiver) -> Result<Receiver, E>,
    ) -> Result<Self, E> {
        let mut settings = Arc::unwrap_or_clone(self.settings);
        settings.receiver = settings.receiver.map(change).transpose()?;
        Ok(Self {
            settings: Arc::new(settings),
        })
    }

    /// Reads at most `limit` bytes of body (413 beyond).
    #[must_use]
    pub fn with_body_limit(self, limit: usize) -> Self {
        self.change_receiver(|receiver| receiver.with_body_limit(limit))
    }

    /// How long the whole body may take to arrive; a slower request is
    /// answered 408. Defaults to 10 seconds.
    #[must_use]
    pub fn with_body_timeout(self, timeout: Duration) -> Self {
        self.change_receiver(|receiver| receiver.with_body_timeout(timeout))
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
        self,
        respond: impl Fn(&Rejection) -> Option<actix_web::HttpResponse> + Send + Sync + 'static,
    ) -> Self {
        self.change(|settings| settings.respond = Some(Arc::new(respond)))
    }

    /// Whether the plain-text answer to a refused request names the
    /// reason's kind after the generic text, as a stable short code and a
    /// fixed sentence ([`Rejection::body_text_with_kind`]):
    /// `webhook verification failed: timestamp_too_old (the signed
    /// timestamp is older than this receiver accepts)`. Defaults to
    /// `false`: the generic text alone.
    ///
    /// The kind is what a sender can know or find out anyway (its clock,
    /// the headers it sent, whether it signed with the right secret), so
    /// this weakens nothing: the body never holds a secret, a signature,
    /// which secret matched or how many there are. The precise reason
    /// still goes only to `tracing`. A
    /// [`with_rejection_response`](Self::with_rejection_response) hook
    /// that gives a response answers in its own words instead.
    ///
    /// ```
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_actix::WebhookConfig;
    ///
    /// let verifier = Verifier::builder(Scheme::stripe())
    ///     .with_secret("whsec_test_secret")?
    ///     .build()?;
    /// // A request signed long ago is answered 400 with
    /// // "webhook verification failed: timestamp_too_old (...)".
    /// let config = WebhookConfig::new(verifier).with_reason_in_body(true);
    /// # let _ = config;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_reason_in_body(self, reason_in_body: bool) -> Self {
        self.change(|settings| settings.reason_in_body = reason_in_body)
    }

    /// Answers a provider's subscription check itself ([`Handshake`]:
    /// Slack, Meta, Twitch, Zoom) before any claim: the extractor answers
    /// it and your handler does not run. Meta's is a `GET`: route `GET` to
    /// the handler too (`web::route()`, or `#[route(.., method = "GET",
    /// method = "POST")]`). With tenants, give each tenant's [`Receiver`]
    /// its handshake.
    ///
    /// Fails when the handshake belongs to another scheme than the
    /// verifier's ([`Receiver::with_handshake`]).
    ///
    /// ```
    /// use hooklatch::receive::Handshake;
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_actix::WebhookConfig;
    ///
    /// let verifier = Verifier::builder(Scheme::meta()).with_secret("app-secret")?.build()?;
    /// let config = WebhookConfig::new(verifier).with_handshake(Handshake::meta("verify-token"))?;
    /// # let _ = config;
    /// # Ok::<(), hooklatch::verify::ConfigError>(())
    /// ```
    pub fn with_handshake(self, handshake: Handshake) -> Result<Self, ConfigError> {
        self.with_receiver(|receiver| receiver.with_handshake(handshake))
    }

    /// Claims events by `key`. Defaults to [`EventKey::Signed`]: the
    /// scheme's signed id, Stripe's body `id`, or else a digest of what the
    /// signature covers.
    #[must_use]
    pub fn with_event_key(self, key: EventKey) -> Self {
        self.change_receiver(|receiver| receiver.with_event_key(key))
    }

    /// The store [`InboxWebhook`](crate::InboxWebhook) accepts events into.
    pub fn with_inbox<S: Inbox + 'static>(
        self,
        store: S,
        namespace: &str,
    ) -> Result<Self, DedupError> {
        validate_namespace(namespace)?;
        let inbox: Arc<dyn DynInbox> = Arc::new(store);
        Ok(self.change(|settings| settings.inbox = Some((inbox, namespace.to_owned()))))
    }

    /// The store [`LeasedWebhook`](crate::LeasedWebhook) claims leases of
    /// `lease_for` in.
    pub fn with_lease<S: LeaseStore + 'static>(
        self,
        store: S,
        namespace: &str,
        lease_for: Duration,
    ) -> Result<Self, DedupError> {
        validate_namespace(namespace)?;
        let lease: Arc<dyn DynLease> = Arc::new(store);
        Ok(self.change(|settings| settings.lease = Some((lease, namespace.to_owned(), lease_for))))
    }

    pub(crate) fn from_request(request: &HttpRequest) -> Option<&Self> {
        request.app_data::<Self>().or_else(|| {
            request
                .app_data::<web::Data<Self>>()
                .map(|data| data.get_ref())
        })
    }
}
