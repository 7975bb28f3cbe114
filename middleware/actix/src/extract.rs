//! The extractors: [`Webhook<T>`], [`RawWebhook`], [`InboxWebhook`] and
//! [`LeasedWebhook`].

use std::future::Future;
use std::sync::Arc;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, HttpResponse, Responder};
use futures_util::future::LocalBoxFuture;
use hooklatch::dedup::{Acceptance, DedupError, Lease};
use hooklatch::receive::adapter::Claimed;
use hooklatch::receive::{Received, Rejection, Tenant, VerifiedEvent};
use serde::de::DeserializeOwned;

use crate::config::{DynLease, WebhookConfig};
use crate::error::WebhookError;
use crate::headers::ActixHeaders;

/// Finds the request's config, reads and verifies the request, and runs
/// `step` with the config and the event; an error on the way is answered
/// the config's way. Every extractor is this with its own step.
fn verified<T, F, Fut>(
    request: &HttpRequest,
    payload: &mut Payload,
    step: F,
) -> LocalBoxFuture<'static, Result<T, WebhookError>>
where
    F: FnOnce(WebhookConfig, VerifiedEvent, Option<Tenant>) -> Fut + 'static,
    Fut: Future<Output = Result<T, WebhookError>>,
{
    let (request, payload) = (request.clone(), payload.take());
    Box::pin(async move {
        let config = WebhookConfig::from_request(&request)
            .cloned()
            .ok_or(Rejection::NotConfigured)?;
        let (respond, reason_in_body) = (
            config.settings().respond.clone(),
            config.settings().reason_in_body,
        );
        let run = async {
            let headers = ActixHeaders(request.headers());
            let settings = config.settings();
            let tenant = match &settings.tenants {
                Some(tenants) => Some(tenants.resolve(request.path(), &headers).await?),
                None => None,
            };
            let receiver = match (&tenant, &settings.receiver) {
                (Some(tenant), _) => tenant.receiver(),
                (None, Some(receiver)) => receiver,
                (None, None) => return Err(Rejection::NotConfigured.into()),
            };
            let query = Some(request.query_string()).filter(|query| !query.is_empty());
            if let Some(answer) =
                receiver.answer_before_body(request.method().as_str(), query, &headers)
            {
                return Err(WebhookError::handshake_answered(answer));
            }
            let received = if receiver.needs_request_line() {
                let (method, uri, headers) = request_line(&request)?;
                receiver
                    .receive_request(&method, &uri, &headers, payload)
                    .await?
            } else {
                receiver.receive_or_answer(&headers, payload).await?
            };
            let event = match received {
                Received::Event(event) => event,
                Received::Answered(answer) => return Err(WebhookError::handshake_answered(answer)),
            };
            // The tenant's secrets may have changed while the body
            // arrived: check them again before claiming the event.
            let tenant = match (&settings.tenants, tenant) {
                (Some(tenants), Some(before)) => Some(
                    tenants
                        .recheck(request.path(), &headers, &before, &event)
                        .await?,
                ),
                (_, tenant) => tenant,
            };
            // A provider's handshake is answered here: never claimed,
            // never handed to the handler.
            let now = match &tenant {
                Some(tenant) => Some(tenant.receiver()),
                None => settings.receiver.as_ref(),
            };
            if let Some(answer) =
                now.and_then(|receiver| receiver.answer_verified(&headers, &event))
            {
                return Err(WebhookError::handshake_answered(answer));
            }
            step(config, event, tenant).await
        };
        let span = hooklatch::receive::adapter::request_span();
        tracing::Instrument::instrument(run, span)
            .await
            .map_err(|error| error.answered_by(respond, reason_in_body))
    })
}

/// The request's method, URI and headers as the `http` crate's types, for
/// a receiver of HTTP message signatures, which cover them. actix-web
/// checked each already; one `http` refuses is answered 400.
fn request_line(
    request: &HttpRequest,
) -> Result<(http::Method, http::Uri, http::HeaderMap), Rejection> {
    let method = http::Method::from_bytes(request.method().as_str().as_bytes())
        .map_err(|_| not_http("method"))?;
    let uri = request
        .uri()
        .to_string()
        .parse::<http::Uri>()
        .map_err(|_| not_http("URI"))?;
    let mut headers = http::HeaderMap::with_capacity(request.headers().len());
    for (name, value) in request.headers() {
        let name = http::HeaderName::from_bytes(name.as_str().as_bytes())
            .map_err(|_| not_http("header name"))?;
        let value =
            http::HeaderValue::from_bytes(value.as_bytes()).map_err(|_| not_http("header"))?;
        headers.append(name, value);
    }
    Ok((method, uri, headers))
}

/// A request part the `http` crate refuses, for a receiver of message
/// signatures (400).
fn not_http(part: &str) -> Rejection {
    #[cfg(feature = "http-signatures")]
    return Rejection::MessageUnverified(
        hooklatch::verify::message::MessageSignatureError::InvalidTarget(format!(
            "the request's {part} is not valid HTTP"
        )),
    );
    #[cfg(not(feature = "http-signatures"))]
    {
        let _ = part;
        Rejection::BodyUnreadable
    }
}

/// The namespace a store configured with `namespace` claims in: its own,
/// or for a tenant's request the two joined
/// ([`tenant_namespace`](hooklatch::dedup::tenant_namespace)).
fn namespace_for(namespace: &str, tenant: Option<&Tenant>) -> String {
    match tenant {
        None => namespace.to_owned(),
        Some(tenant) => hooklatch::dedup::tenant_namespace(namespace, tenant.namespace()),
    }
}

/// A verified webhook as received: id, timestamp, scheme and raw body.
#[derive(Debug, Clone)]
pub struct RawWebhook(pub VerifiedEvent);

impl FromRequest for RawWebhook {
    type Error = WebhookError;
    type Future = LocalBoxFuture<'static, Result<Self, WebhookError>>;

    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        verified(
            request,
            payload,
            |_, event, _| async move { Ok(Self(event)) },
        )
    }
}

/// A verified webhook with its JSON body deserialized into `T`.
///
/// ```
/// use actix_web::{App, post};
/// use hooklatch::verify::{Scheme, Verifier};
/// use hooklatch_actix::{Webhook, WebhookConfig};
///
/// #[derive(serde::Deserialize)]
/// struct Push { after: String }
///
/// #[post("/github")]
/// async fn push(Webhook(push): Webhook<Push>) -> String {
///     push.after
/// }
///
/// # fn app() -> Result<(), Box<dyn std::error::Error>> {
/// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
/// let app = App::new().app_data(WebhookConfig::new(verifier)).service(push);
/// # let _ = app;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Webhook<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest for Webhook<T> {
    type Error = WebhookError;
    type Future = LocalBoxFuture<'static, Result<Self, WebhookError>>;

    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        verified(request, payload, |_, event, _| async move {
            event.json().map(Webhook).map_err(WebhookError::from)
        })
    }
}

/// A verified webhook claimed and enqueued in the configured inbox.
///
/// Return it from the handler to answer 202 (accepted) or 200 (duplicate);
/// a store failure has already answered 503.
///
/// ```
/// use actix_web::post;
/// use hooklatch_actix::InboxWebhook;
///
/// #[post("/webhooks")]
/// async fn receive(webhook: InboxWebhook) -> InboxWebhook {
///     webhook
/// }
/// ```
#[derive(Debug, Clone)]
pub struct InboxWebhook {
    /// The verified event.
    pub event: VerifiedEvent,
    /// Whether it was new or a duplicate.
    pub acceptance: Acceptance,
}

impl FromRequest for InboxWebhook {
    type Error = WebhookError;
    type Future = LocalBoxFuture<'static, Result<Self, WebhookError>>;

    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        verified(request, payload, |config, event, tenant| async move {
            let (store, namespace) = config
                .settings()
                .inbox
                .as_ref()
                .ok_or(Rejection::NotConfigured)?;
            let namespace = namespace_for(namespace, tenant.as_ref());
            let acceptance = store.accept(&namespace, &event).await?;
            Ok(Self { event, acceptance })
        })
    }
}

impl Responder for InboxWebhook {
    type Body = actix_web::body::BoxBody;

    fn respond_to(self, _: &HttpRequest) -> HttpResponse {
        match self.acceptance {
            Acceptance::Accepted => HttpResponse::build(StatusCode::ACCEPTED).body("accepted"),
            Acceptance::Duplicate => HttpResponse::Ok().body("duplicate"),
        }
    }
}

/// A verified webhook whose id this delivery holds a lease on.
///
/// Call [`complete`](Self::complete) once the work succeeded; if the
/// handler returns without completing, fails or panics, the lease is
/// released when this is dropped, so the sender's retry runs the handler
/// again. A delivery that arrives while another holds the lease is answered
/// 409 with `Retry-After`; one after completion is answered 200 and the
/// handler is skipped.
pub struct LeasedWebhook {
    /// The verified event.
    pub event: VerifiedEvent,
    held: Option<(Arc<dyn DynLease>, Lease)>,
}

impl std::fmt::Debug for LeasedWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedWebhook")
            .field("event", &self.event)
            .field("held", &self.held.as_ref().map(|(_, lease)| lease))
            .finish()
    }
}

impl LeasedWebhook {
    /// Marks the event handled: later deliveries get 200 without running
    /// the handler. A failing store is tried three times, as the tower
    /// layer does; if it still fails, the lease expires and a retry runs
    /// the handler again.
    pub async fn complete(mut self) -> Result<(), DedupError> {
        match self.held.take() {
            Some((store, lease)) => store.complete(&lease).await,
            None => Ok(()),
        }
    }

    /// A heartbeat for a handler that needs longer: the lease now ends
    /// `lease_for` from now, on the store's clock. Fails with
    /// [`DedupError::LeaseLost`] if another delivery took the event.
    pub async fn extend(&self, lease_for: std::time::Duration) -> Result<(), DedupError> {
        match &self.held {
            Some((store, lease)) => store.extend_lease(lease, lease_for).await,
            None => Err(DedupError::LeaseLost),
        }
    }
}

impl Drop for LeasedWebhook {
    /// Releases the lease in a task on the current tokio runtime, whatever
    /// task or thread drops it (actix's own `spawn` would need its local
    /// set, and panics outside it). With no runtime at hand the lease is
    /// left to expire. Never panics.
    fn drop(&mut self) {
        let Some((store, lease)) = self.held.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(error) = store.release(&lease).await {
                        tracing::error!(id = lease.id(), %error, "could not release the lease; it will expire");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(
                    id = lease.id(),
                    "lease dropped outside a tokio runtime; it will expire"
                );
            }
        }
    }
}

impl FromRequest for LeasedWebhook {
    type Error = WebhookError;
    type Future = LocalBoxFuture<'static, Result<Self, WebhookError>>;

    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        verified(request, payload, |config, event, tenant| async move {
            let (store, namespace, lease_for) = config
                .settings()
                .lease
                .clone()
                .ok_or(Rejection::NotConfigured)?;
            let namespace = namespace_for(&namespace, tenant.as_ref());
            match store.claim(&namespace, &event, lease_for).await? {
                Claimed::Fresh(lease) => Ok(Self {
                    event,
                    held: Some((store, lease)),
                }),
                Claimed::Done => Err(WebhookError::already_handled()),
            }
        })
    }
}
