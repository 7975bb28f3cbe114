//! [`WebhookLayer`]: configuration, built once and cloned into services.

use std::sync::Arc;
use std::time::Duration;

use hooklatch::dedup::{DedupError, Inbox, LeaseStore, validate_namespace};
use hooklatch::receive::{Handshake, Receiver, Tenants};
use hooklatch::verify::{ConfigError, Verifier};
use tower_layer::Layer;

use crate::mode::{InboxMode, LeaseMode, NoHandler, VerifyOnly};
use crate::response::Answers;
use crate::service::WebhookService;
use hooklatch::verify::EventKey;

/// A tower [`Layer`] that verifies webhook requests and, with a store,
/// accepts each event once.
///
/// ```
/// use std::time::Duration;
/// use hooklatch::dedup::MemoryInbox;
/// use hooklatch::verify::{Scheme, Verifier};
/// use hooklatch_tower::WebhookLayer;
///
/// // Stripe events are claimed by the `id` of their signed body.
/// let verifier = Verifier::builder(Scheme::stripe())
///     .with_secret("whsec_test_secret")?
///     .build()?;
/// let layer = WebhookLayer::new(verifier)
///     .with_body_limit(256 * 1024)
///     .with_inbox(MemoryInbox::new(), "stripe")?;
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct WebhookLayer<M = VerifyOnly> {
    config: Arc<Config<M>>,
}

impl<M> Clone for WebhookLayer<M> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Config<M> {
    pub(crate) source: Source,
    pub(crate) mode: M,
    pub(crate) answers: Answers,
}

/// How a request's verifier (and, for tenants, its namespace) is found.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// One receiver for every request.
    Fixed(Receiver),
    /// Each request's tenant's own.
    Tenants(Tenants),
}

impl Source {
    /// Changes the fixed receiver; tenants' receivers are their own.
    fn map(self, change: impl FnOnce(Receiver) -> Receiver) -> Self {
        match self {
            Self::Fixed(receiver) => Self::Fixed(change(receiver)),
            tenants @ Self::Tenants(_) => tenants,
        }
    }
}

impl WebhookLayer {
    /// Verifies with `verifier` and passes verified requests on, with a
    /// [`VerifiedEvent`](crate::VerifiedEvent) in their extensions. The body
    /// limit is the verifier's (1 MiB by default).
    pub fn new(verifier: Verifier) -> Self {
        Self::from_receiver(Receiver::new(verifier))
    }

    /// Verifies with `receiver`, built with every setting it has (body
    /// limit and timeout, event key, kept headers, handshakes), and passes
    /// verified requests on. The way to receive HTTP message signatures
    /// (`Receiver::for_message_signatures`, feature `http-signatures`).
    ///
    /// ```
    /// use hooklatch::dedup::MemoryInbox;
    /// use hooklatch::receive::Receiver;
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_tower::WebhookLayer;
    ///
    /// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
    /// let receiver = Receiver::new(verifier)
    ///     .with_body_limit(256 * 1024)
    ///     .with_kept_headers(["x-github-hook-installation-target-id"])?;
    /// let layer = WebhookLayer::from_receiver(receiver).with_inbox(MemoryInbox::new(), "github")?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_receiver(receiver: Receiver) -> Self {
        Self {
            config: Arc::new(Config {
                source: Source::Fixed(receiver),
                mode: VerifyOnly,
                answers: Answers::default(),
            }),
        }
    }

    /// Verifies each request with its tenant's receiver, found by
    /// `tenants` before the body is read: an unknown tenant is answered
    /// 404, a failed lookup 503. With a store, each tenant's events are
    /// claimed in the namespace `{namespace}~{tenant namespace}`, so the
    /// same id in two tenants is two events. The body limit, its timeout
    /// and the event key are each tenant's [`Receiver`]'s.
    ///
    /// ```
    /// use hooklatch::dedup::MemoryInbox;
    /// use hooklatch::receive::{StaticTenants, TenantKey, Tenants};
    /// use hooklatch_tower::WebhookLayer;
    ///
    /// let tenants = StaticTenants::default(); // filled, and refilled, at run time
    /// let layer = WebhookLayer::for_tenants(Tenants::new(TenantKey::LastPathSegment, tenants))
    ///     .with_inbox(MemoryInbox::new(), "hooks")?; // POST /webhooks/{tenant}
    /// # let _ = layer;
    /// # Ok::<(), hooklatch::dedup::DedupError>(())
    /// ```
    pub fn for_tenants(tenants: Tenants) -> Self {
        Self {
            config: Arc::new(Config {
                source: Source::Tenants(tenants),
                mode: VerifyOnly,
                answers: Answers::default(),
            }),
        }
    }
}

impl<M: Clone> WebhookLayer<M> {
    fn map<N>(self, change: impl FnOnce(Config<M>) -> Config<N>) -> WebhookLayer<N> {
        let config = Arc::try_unwrap(self.config).unwrap_or_else(|shared| (*shared).clone());
        WebhookLayer {
            config: Arc::new(change(config)),
        }
    }

    /// Reads at most `limit` bytes of body: 413 before reading when
    /// Content-Length says more, and as soon as more arrives otherwise.
    /// Defaults to the verifier's limit (1 MiB unless changed).
    pub fn with_body_limit(self, limit: usize) -> Self {
        self.map(|config| Config {
            source: config
                .source
                .map(|receiver| receiver.with_body_limit(limit)),
            ..config
        })
    }

    /// How long the whole body may take to arrive; a slower request is
    /// answered 408. Defaults to 10 seconds. The deadline uses tokio's
    /// timers, which every axum and hyper server runtime enables (a
    /// hand-built runtime needs `enable_time`).
    pub fn with_body_timeout(self, timeout: Duration) -> Self {
        self.map(|config| Config {
            source: config
                .source
                .map(|receiver| receiver.with_body_timeout(timeout)),
            ..config
        })
    }

    /// Answers rejections with `respond`'s response wherever it returns one
    /// (a JSON problem document, say); `None` keeps the plain-text default.
    /// The [`Rejection`](crate::Rejection) is still logged and put into the
    /// response's extensions.
    ///
    /// ```
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_tower::WebhookLayer;
    ///
    /// let verifier = Verifier::builder(Scheme::standard_webhooks())
    ///     .with_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?
    ///     .build()?;
    /// let layer = WebhookLayer::new(verifier).with_rejection_response(|rejection| {
    ///     let body = format!(r#"{{"error":"{}"}}"#, rejection.body_text());
    ///     http::Response::builder()
    ///         .status(rejection.status())
    ///         .header("content-type", "application/json")
    ///         .body(body)
    ///         .ok()
    /// });
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_rejection_response(
        self,
        respond: impl Fn(&crate::Rejection) -> Option<http::Response<String>> + Send + Sync + 'static,
    ) -> Self {
        self.map(|config| Config {
            answers: config.answers.with_hook(respond),
            ..config
        })
    }

    /// Whether the plain-text answer to a refused request names the
    /// reason's kind after the generic text, as a stable short code and a
    /// fixed sentence ([`Rejection::body_text_with_kind`](crate::Rejection::body_text_with_kind)):
    /// `webhook verification failed: timestamp_too_old (the signed
    /// timestamp is older than this receiver accepts)`. Defaults to
    /// `false`: the generic text alone.
    ///
    /// The kind is what a sender can know or find out anyway (its clock,
    /// the headers it sent, whether it signed with the right secret), so
    /// this weakens nothing: the body never holds a secret, a signature,
    /// which secret matched or how many there are. The precise reason
    /// still goes only to `tracing` and the response extensions. A
    /// [`with_rejection_response`](Self::with_rejection_response) hook
    /// that gives a response answers in its own words instead.
    ///
    /// ```
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_tower::WebhookLayer;
    ///
    /// let verifier = Verifier::builder(Scheme::stripe())
    ///     .with_secret("whsec_test_secret")?
    ///     .build()?;
    /// // A request signed long ago is answered 400 with
    /// // "webhook verification failed: timestamp_too_old (...)".
    /// let layer = WebhookLayer::new(verifier).with_reason_in_body(true);
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_reason_in_body(self, reason_in_body: bool) -> Self {
        self.map(|config| Config {
            answers: config.answers.with_reason_in_body(reason_in_body),
            ..config
        })
    }

    /// Changes the [`Receiver`] with `change` (to keep headers, say):
    /// every setting a receiver has. For a layer of tenants, each tenant's
    /// receiver is its own and this changes nothing.
    pub fn with_receiver<E>(
        self,
        change: impl FnOnce(Receiver) -> Result<Receiver, E>,
    ) -> Result<Self, E> {
        let config = Arc::try_unwrap(self.config).unwrap_or_else(|shared| (*shared).clone());
        let source = match config.source {
            Source::Fixed(receiver) => Source::Fixed(change(receiver)?),
            tenants @ Source::Tenants(_) => tenants,
        };
        Ok(WebhookLayer {
            config: Arc::new(Config { source, ..config }),
        })
    }

    /// Answers a provider's subscription check itself ([`Handshake`]:
    /// Slack, Meta, Twitch, Zoom) before any claim: the handshake never
    /// reaches your handler or the inbox. Meta's is a `GET`: apply the
    /// layer with `.layer(..)` on the route (not `.route_layer(..)`), so it
    /// sees a `GET` on a `post` route. For a layer of tenants, give each
    /// tenant's [`Receiver`] its handshake.
    ///
    /// Fails when the handshake belongs to another scheme than the
    /// verifier's ([`Receiver::with_handshake`]).
    ///
    /// ```
    /// use hooklatch::receive::Handshake;
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_tower::WebhookLayer;
    ///
    /// use axum::{Router, routing::post};
    ///
    /// fn app() -> Result<Router, Box<dyn std::error::Error>> {
    ///     let verifier = Verifier::builder(Scheme::meta()).with_secret("the app secret")?.build()?;
    ///     let layer = WebhookLayer::new(verifier).with_handshake(Handshake::meta("my verify token"))?;
    ///     Ok(Router::new().route("/hooks/meta", post(|| async { "handled" })).layer(layer))
    /// }
    /// # app().unwrap();
    /// ```
    pub fn with_handshake(self, handshake: Handshake) -> Result<Self, ConfigError> {
        self.with_receiver(|receiver| receiver.with_handshake(handshake))
    }

    /// Claims events by `key`. Defaults to [`EventKey::Signed`]: the
    /// scheme's signed id, Stripe's body `id`, or else a digest of what the
    /// signature covers.
    pub fn with_event_key(self, key: EventKey) -> Self {
        self.map(|config| Config {
            source: config.source.map(|receiver| receiver.with_event_key(key)),
            ..config
        })
    }

    /// Accepts each verified event into `store` under `namespace`: 202 when
    /// new, 200 for a duplicate, 503 when the store fails. The inner service
    /// is not called; workers take the events from the inbox.
    pub fn with_inbox<S: Inbox + Clone + 'static>(
        self,
        store: S,
        namespace: &str,
    ) -> Result<WebhookLayer<InboxMode<S>>, DedupError> {
        validate_namespace(namespace)?;
        Ok(self.map(|config| Config {
            source: config.source,
            mode: InboxMode {
                store,
                namespace: namespace.to_owned(),
            },
            answers: config.answers,
        }))
    }

    /// Runs the inner service under a lease of `lease_for` in `store`: the
    /// claim completes on a 2xx answer and is released otherwise. Set
    /// `lease_for` longer than the handler can take.
    pub fn with_lease<S: LeaseStore + Clone + 'static>(
        self,
        store: S,
        namespace: &str,
        lease_for: Duration,
    ) -> Result<WebhookLayer<LeaseMode<S>>, DedupError> {
        validate_namespace(namespace)?;
        Ok(self.map(|config| Config {
            source: config.source,
            mode: LeaseMode {
                store,
                namespace: namespace.to_owned(),
                lease_for,
            },
            answers: config.answers,
        }))
    }
}

impl<S: Inbox + Clone + 'static> WebhookLayer<InboxMode<S>> {
    /// The inbox as a service of its own, for a route with no handler:
    /// it verifies, accepts (202, or 200 for a duplicate) and answers, so
    /// no dummy handler is needed.
    ///
    /// ```
    /// use axum::{Router, routing::post_service};
    /// use hooklatch::dedup::MemoryInbox;
    /// use hooklatch::verify::{Scheme, Verifier};
    /// use hooklatch_tower::WebhookLayer;
    ///
    /// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
    /// let inbox = WebhookLayer::new(verifier).with_inbox(MemoryInbox::new(), "github")?;
    /// let app: Router = Router::new().route("/webhooks", post_service(inbox.into_endpoint()));
    /// # let _ = app;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "axum")]
    pub fn into_endpoint(self) -> WebhookService<NoHandler<axum::body::Body>, InboxMode<S>> {
        self.into_endpoint_with_body()
    }

    /// [`into_endpoint`](Self::into_endpoint) for a stack whose response
    /// body is `B` (hyper or tonic without axum, say).
    pub fn into_endpoint_with_body<B>(self) -> WebhookService<NoHandler<B>, InboxMode<S>> {
        WebhookService::new(NoHandler::default(), self.config)
    }
}

impl<S, M> Layer<S> for WebhookLayer<M> {
    type Service = WebhookService<S, M>;

    fn layer(&self, inner: S) -> Self::Service {
        WebhookService::new(inner, Arc::clone(&self.config))
    }
}
