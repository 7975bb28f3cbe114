//! axum extractors: [`Webhook<T>`] and [`RawWebhook`].

use axum::extract::{FromRef, FromRequest, Request};
use axum::response::{IntoResponse, Response};
use hooklatch::receive::{HandshakeAnswer, Received, Receiver, Rejection, VerifiedEvent};
use serde::de::DeserializeOwned;

/// A verified webhook with its JSON body deserialized into `T`, behind a
/// [`WebhookLayer`](crate::WebhookLayer): the layer has read the body,
/// verified it and (in lease mode) claimed the event; this extractor reads
/// the event the layer left and parses it. A body that does not parse as
/// `T` is answered 422 ([`Rejection::InvalidJson`]).
///
/// To verify in the handler without a layer, use [`VerifiedJson`], which
/// verifies with the [`Receiver`] in the router's state. On a route with
/// no layer, `Webhook<T>` answers 500 ([`Rejection::NotConfigured`]).
///
/// ```
/// use axum::{Router, routing::post};
/// use hooklatch::dedup::MemoryInbox;
/// use hooklatch::verify::{Scheme, Verifier};
/// use hooklatch_tower::{Webhook, WebhookLayer};
/// use std::time::Duration;
///
/// #[derive(serde::Deserialize)]
/// struct InvoicePaid { invoice: String }
///
/// async fn invoice_paid(Webhook(event): Webhook<InvoicePaid>) -> &'static str {
///     println!("paid: {}", event.invoice);
///     "ok"
/// }
///
/// # fn app() -> Result<Router, Box<dyn std::error::Error>> {
/// let verifier = Verifier::builder(Scheme::standard_webhooks())
///     .with_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?
///     .build()?;
/// let layer = WebhookLayer::new(verifier).with_lease(
///     MemoryInbox::new(),
///     "billing",
///     Duration::from_secs(30),
/// )?;
/// let app = Router::new().route("/webhooks", post(invoice_paid).layer(layer));
/// # Ok(app)
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Webhook<T>(pub T);

/// A verified webhook as received, behind a
/// [`WebhookLayer`](crate::WebhookLayer): id, timestamp, scheme, raw body
/// and metadata. Without a layer, use [`VerifiedBody`]; on a route with no
/// layer, `RawWebhook` answers 500 ([`Rejection::NotConfigured`]).
#[derive(Debug, Clone)]
pub struct RawWebhook(pub VerifiedEvent);

impl<S: Send + Sync> FromRequest<S> for RawWebhook {
    type Rejection = Rejection;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Rejection> {
        request
            .extensions()
            .get::<VerifiedEvent>()
            .map(|event| Self(event.clone()))
            .ok_or(Rejection::NotConfigured)
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Webhook<T> {
    type Rejection = Rejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Rejection> {
        let RawWebhook(event) = RawWebhook::from_request(request, state).await?;
        event.json().map(Webhook)
    }
}

/// A webhook verified with the [`Receiver`] in the router's state, its JSON
/// body deserialized into `T`: a router without a `Receiver` in its state
/// does not compile. Behind a [`WebhookLayer`](crate::WebhookLayer) it
/// takes the layer's verified event, as [`Webhook`] does.
///
/// The state is the `Receiver` itself, or any state it can be taken from
/// (`#[derive(FromRef)]`). A verified body that does not parse as `T` is
/// answered 422; senders that retry every non-2xx keep retrying it until
/// their schedule ends, so where that matters use an inbox and parse in
/// the worker ([`InboxEntry::json`](hooklatch::dedup::InboxEntry::json)).
///
/// ```
/// use axum::{Router, extract::FromRef, routing::post};
/// use hooklatch::receive::Receiver;
/// use hooklatch::verify::{Scheme, Verifier};
/// use hooklatch_tower::VerifiedJson;
///
/// #[derive(Clone, FromRef)]
/// struct AppState {
///     webhooks: Receiver,
/// }
///
/// #[derive(serde::Deserialize)]
/// struct Push { after: String }
///
/// async fn push(VerifiedJson(push): VerifiedJson<Push>) -> String {
///     push.after
/// }
///
/// # fn app() -> Result<Router, Box<dyn std::error::Error>> {
/// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
/// let app = Router::new()
///     .route("/github", post(push))
///     .with_state(AppState { webhooks: Receiver::new(verifier) });
/// # Ok(app)
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct VerifiedJson<T>(pub T);

/// A webhook verified with the [`Receiver`] in the router's state, as
/// received: the event with its raw body. See [`VerifiedJson`].
#[derive(Debug, Clone)]
pub struct VerifiedBody(pub VerifiedEvent);

/// Why [`VerifiedBody`] or [`VerifiedJson`] did not hand a request to the
/// handler: a [`Rejection`], or a provider's handshake the [`Receiver`]
/// answered ([`Receiver::with_handshake`]). Both are answered as they
/// say.
#[derive(Debug)]
pub enum VerifiedRejection {
    /// Refused, with the rejection's status.
    Rejected(Rejection),
    /// A provider's subscription check, answered by the receiver.
    Handshake(HandshakeAnswer),
}

impl From<Rejection> for VerifiedRejection {
    fn from(rejection: Rejection) -> Self {
        Self::Rejected(rejection)
    }
}

impl IntoResponse for VerifiedRejection {
    fn into_response(self) -> Response {
        match self {
            Self::Rejected(rejection) => rejection.into_response(),
            Self::Handshake(answer) => crate::response::handshake(answer),
        }
    }
}

impl<S> FromRequest<S> for VerifiedBody
where
    S: Send + Sync,
    Receiver: FromRef<S>,
{
    type Rejection = VerifiedRejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, VerifiedRejection> {
        if let Some(event) = request.extensions().get::<VerifiedEvent>() {
            return Ok(Self(event.clone()));
        }
        let receiver = Receiver::from_ref(state);
        let (parts, body) = request.into_parts();
        if let Some(answer) =
            receiver.answer_before_body(parts.method.as_str(), parts.uri.query(), &parts.headers)
        {
            return Err(VerifiedRejection::Handshake(answer));
        }
        let event = match receiver
            .receive_request(
                &parts.method,
                crate::service::request_uri(&parts),
                &parts.headers,
                body.into_data_stream(),
            )
            .await?
        {
            Received::Event(event) => event,
            Received::Answered(answer) => return Err(VerifiedRejection::Handshake(answer)),
        };
        if let Some(answer) = receiver.answer_verified(&parts.headers, &event) {
            return Err(VerifiedRejection::Handshake(answer));
        }
        Ok(Self(event))
    }
}

impl<T, S> FromRequest<S> for VerifiedJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
    Receiver: FromRef<S>,
{
    type Rejection = VerifiedRejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, VerifiedRejection> {
        let VerifiedBody(event) = VerifiedBody::from_request(request, state).await?;
        Ok(event.json().map(VerifiedJson)?)
    }
}
