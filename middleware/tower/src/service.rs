//! [`WebhookService`]: reads the body through a limit, verifies it, and
//! hands the request to the layer's mode.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use http_body_util::BodyExt as _;

use crate::future::ResponseFuture;
use crate::layer::{Config, Source};
use crate::mode::{Call, Mode, Ready};
use hooklatch::receive::{Received, Tenant};

/// The service [`WebhookLayer`](crate::WebhookLayer) wraps around yours.
#[derive(Debug)]
pub struct WebhookService<S, M> {
    inner: S,
    config: Arc<Config<M>>,
}

impl<S: Clone, M> Clone for WebhookService<S, M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, M> WebhookService<S, M> {
    pub(crate) fn new(inner: S, config: Arc<Config<M>>) -> Self {
        Self { inner, config }
    }
}

impl<S, M, ReqBody, ResBody> Service<Request<ReqBody>> for WebhookService<S, M>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    M: Mode,
    ReqBody: Body + From<Bytes> + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    ResBody: From<&'static str> + From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was polled ready is the one to call: keep it and
        // leave a fresh clone behind.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        let span = hooklatch::receive::adapter::request_span();
        ResponseFuture::running(Box::pin(tracing::Instrument::instrument(
            async move {
                let (parts, body) = request.into_parts();
                let tenant = match &config.source {
                    Source::Fixed(_) => None,
                    Source::Tenants(tenants) => {
                        match tenants.resolve(parts.uri.path(), &parts.headers).await {
                            Ok(tenant) => Some(tenant),
                            Err(rejection) => return Ok(config.answers.reject(rejection)),
                        }
                    }
                };
                let receiver = match (&config.source, &tenant) {
                    (Source::Fixed(receiver), _) => receiver,
                    (Source::Tenants(_), Some(tenant)) => tenant.receiver(),
                    (Source::Tenants(_), None) => unreachable!("a tenant was resolved above"),
                };
                if let Some(answer) = receiver.answer_before_body(
                    parts.method.as_str(),
                    parts.uri.query(),
                    &parts.headers,
                ) {
                    return Ok(crate::response::handshake(answer));
                }
                let received = receiver
                    .receive_request(
                        &parts.method,
                        request_uri(&parts),
                        &parts.headers,
                        body.into_data_stream(),
                    )
                    .await;
                let event = match received {
                    Ok(Received::Event(event)) => event,
                    Ok(Received::Answered(answer)) => {
                        return Ok(crate::response::handshake(answer));
                    }
                    Err(rejection) => return Ok(config.answers.reject(rejection)),
                };
                // The tenant's secrets may have changed while the body
                // arrived: check them again before claiming the event.
                let tenant = match (&config.source, tenant) {
                    (Source::Tenants(tenants), Some(before)) => {
                        match tenants
                            .recheck(parts.uri.path(), &parts.headers, &before, &event)
                            .await
                        {
                            Ok(now) => Some(now),
                            Err(rejection) => return Ok(config.answers.reject(rejection)),
                        }
                    }
                    (_, tenant) => tenant,
                };
                // A provider's handshake is answered here: never claimed,
                // never passed on.
                let now = match (&config.source, &tenant) {
                    (_, Some(tenant)) => Some(tenant.receiver()),
                    (Source::Fixed(receiver), None) => Some(receiver),
                    (Source::Tenants(_), None) => None,
                };
                if let Some(answer) =
                    now.and_then(|receiver| receiver.answer_verified(&parts.headers, &event))
                {
                    return Ok(crate::response::handshake(answer));
                }
                // Each mode puts the event where it goes: into the request for
                // the inner service, or into the layer's own answer.
                let request = Request::from_parts(parts, ReqBody::from(event.body.clone()));
                let call = Call {
                    event,
                    request,
                    next: Ready::new(inner),
                    answers: &config.answers,
                    tenant: tenant.as_ref().map(Tenant::namespace),
                };
                config.mode.run(call).await
            },
            span,
        )))
    }
}

/// The URI as the client sent it: axum's `OriginalUri` where a nested
/// router took its prefix off `uri` (a message signature covers the whole
/// path).
pub(crate) fn request_uri(parts: &http::request::Parts) -> &http::Uri {
    #[cfg(feature = "axum")]
    if let Some(original) = parts.extensions.get::<axum::extract::OriginalUri>() {
        return &original.0;
    }
    &parts.uri
}
