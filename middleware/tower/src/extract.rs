//! axum extractors: [`Webhook<T>`] and [`RawWebhook`].

use axum::extract::{FromRequest, Request};
use hooklatch::receive::{Receiver, Rejection, VerifiedEvent};
use hooklatch::verify::Verifier;
use serde::de::DeserializeOwned;

/// A verified webhook with its JSON body deserialized into `T`.
///
/// Behind a [`WebhookLayer`](crate::WebhookLayer) it takes the layer's
/// verified event. Alone, it verifies the request itself with the
/// [`Verifier`] found in the request extensions (add it with
/// `axum::Extension(verifier)`), reading at most the verifier's body limit.
///
/// ```
/// use axum::{Extension, Router, routing::post};
/// use hooklatch::verify::{Scheme, Verifier};
/// use hooklatch_tower::Webhook;
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
/// let app = Router::new()
///     .route("/webhooks", post(invoice_paid))
///     .layer(Extension(verifier));
/// # Ok(app)
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Webhook<T>(pub T);

/// A verified webhook as received: id, timestamp, scheme and raw body.
#[derive(Debug, Clone)]
pub struct RawWebhook(pub VerifiedEvent);

impl<S: Send + Sync> FromRequest<S> for RawWebhook {
    type Rejection = Rejection;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Rejection> {
        if let Some(event) = request.extensions().get::<VerifiedEvent>() {
            return Ok(Self(event.clone()));
        }
        let verifier = request
            .extensions()
            .get::<Verifier>()
            .cloned()
            .ok_or(Rejection::NotConfigured)?;
        let (parts, body) = request.into_parts();
        let event = Receiver::new(verifier)
            .receive(&parts.headers, body.into_data_stream())
            .await?;
        Ok(Self(event))
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Webhook<T> {
    type Rejection = Rejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Rejection> {
        let RawWebhook(event) = RawWebhook::from_request(request, state).await?;
        serde_json::from_slice(&event.body)
            .map(Webhook)
            .map_err(|error| Rejection::InvalidJson(error.to_string()))
    }
}
